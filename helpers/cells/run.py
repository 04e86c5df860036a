"""Run a notebook cell's code on every rank of a job: ``run_cell(body, cfg, namespace)`` -> ``JobResult``.

The cell goes to the ranks as a file in the job's run directory (``helpers.cells.program``) and runs there under
``helpers.cells.rank_main`` through ``run_job``: the same launcher, progress, failure naming, hang detection,
host-memory admission, stop and Slurm path as every other job. A cell's graphs are cached in a folder of the
cell's own (its file and values), unless the cell uses ``jit``: a ``@ms.jit`` train step loaded from MindSpore's
cache returned NaN losses and left the weights untouched (ARCHITECTURE.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable

from helpers.cells.program import CELL_FILE, SAME_GRAPH_ENV, VALUES_FILE, cell_program, uses_jit
from helpers.core.errors import CellError
from helpers.core.metrics import THEN_ENV
from helpers.core.config import JobConfig
from helpers.core.paths import resolve
from helpers.job.compile_cache import CACHE_ENV, compile_cache_dir
from helpers.job.launch import JobResult, run_job
from helpers.job.plan import SAME_RANKS

RANK_MAIN = ("-m", "helpers.cells.rank_main")
CONFIG_NAME = "cfg"          # what the cell calls the job's config


def cell_config(cfg: JobConfig, files: dict[str, bytes] | None = None) -> JobConfig:
    """``cfg`` as the job of the cell program ``files`` runs it: the data folder absolute (the ranks run in their run
    folder); the compile cache in a folder keyed by the config and the cell's file and values (MindSpore checks only
    the entry script, ``rank_main``), or off without ``files`` or for a cell that uses ``jit``."""
    cfg = cfg.replace(data_dir=str(resolve(cfg.data_dir)))
    if not files or not cfg.compile_cache or uses_jit(files[CELL_FILE].decode()):
        return cfg.replace(compile_cache=False)
    cell = hashlib.sha1(files[CELL_FILE] + files[VALUES_FILE]).hexdigest()[:12]
    return cfg.replace(env={**cfg.env, CACHE_ENV: f"{compile_cache_dir(cfg)}-cell-{cell}"})


def cell_job(result: JobResult) -> dict:
    """``run_job`` arguments that launch the cell program of the earlier cell job ``result`` again (its file and
    notebook values), e.g. on two nodes or through Slurm: ``job = cell_job(result)``, then
    ``run_job(cell_config(cfg, job["files"]), **job)``."""
    files = {name: (result.run_dir / name).read_bytes() for name in (CELL_FILE, VALUES_FILE)}
    return dict(worker=(*RANK_MAIN, CELL_FILE, CONFIG_NAME), files=files)


@dataclass(frozen=True)
class FollowOn:
    """A worker job the cell's ranks run right after the cell, in the same launch (``%%ranks ... --then NAME``): its
    config (the same ranks as the cell's), and the run folder's files it needs, made from the cell's text (e.g. a
    class the cell defines, for the job to use); ``more``: further worker jobs the ranks run after it, in turn, each
    as a fresh job would (``JobResult.more``)."""

    cfg: JobConfig
    files: Callable[[str], dict[str, bytes]] = field(default=lambda text: {})
    more: tuple[JobConfig, ...] = ()


def follow_on_config(cfg: JobConfig, then: FollowOn) -> JobConfig:
    """The launched job's config: ``then``'s, on the cell's ranks (``CellError`` if they differ), named as the cell's
    job, with ``THEN_ENV`` set; the cell reads it as ``cfg``."""
    differ = [k for k in SAME_RANKS if getattr(cfg, k) != getattr(then.cfg, k)]
    if differ:
        raise CellError(f"%%ranks --then: the follow-on job must run on the cell's ranks; it differs in "
                        f"{', '.join(f'{k} ({getattr(then.cfg, k)} against {getattr(cfg, k)})' for k in differ)}")
    return then.cfg.replace(name=cfg.name, env={**then.cfg.env, **cfg.env, THEN_ENV: "1"})


def same_job(ran: JobConfig, cfg: JobConfig) -> bool:
    """Whether ``ran`` (a job that ran) ran ``cfg`` as ``cfg`` would have run alone: every setting the same but the
    job's name, its port, its timeout (a chain's launch has the sum), the cell's own environment variables and the
    compile cache's folder, the data folder's spelling, and the convolution where ``cfg`` leaves it to the launch."""
    own = (THEN_ENV, SAME_GRAPH_ENV, CACHE_ENV)

    def plain(c: JobConfig) -> JobConfig:
        return c.replace(name="", master_port=cfg.master_port or ran.master_port, data_dir=str(resolve(c.data_dir)),
                         timeout_s=cfg.timeout_s,
                         conv_impl=ran.conv_impl if cfg.conv_impl == "auto" else c.conv_impl,
                         env={k: v for k, v in c.env.items() if k not in own})
    return plain(ran) == plain(cfg)


def ran_follow_on(code_cell, cfg: JobConfig) -> bool:
    """Whether ``code_cell`` (a ``%%ranks`` cell's ``JobResult``) ran ``cfg`` right after the cell (its ``--then``)
    as ``cfg`` would have run alone (``same_job``)."""
    ran = getattr(code_cell, "config", None)
    return ran is not None and ran.env.get(THEN_ENV) == "1" and same_job(ran, cfg)


def chained_job(code_cell, cfg: JobConfig) -> JobResult | None:
    """The result of ``cfg`` when ``code_cell``'s launch ran it after the cell (``--then``, or one of its ``more``
    jobs) as ``cfg`` would have run alone, else None: then the caller runs ``cfg`` itself."""
    if ran_follow_on(code_cell, cfg):
        return code_cell
    return next((job for job in getattr(code_cell, "more", ()) if same_job(job.config, cfg)), None)


def run_cell(body: str, cfg: JobConfig, namespace: dict, magic_line: str = "%%ranks", progress: str = "auto",
             run_root="runs", then: FollowOn | None = None) -> JobResult:
    """Run ``body`` (a cell's code) on ``cfg``'s ranks, where ``cfg`` is the job's config; every other name the
    cell reads from the notebook is sent by value. With ``then``, the same ranks run that worker job after the
    cell (one launch; the result holds both: ``.returns`` and the job's records). Raises ``CellError`` before
    launch, ``JobFailed`` after; returns the ``JobResult`` (``.returns``: each rank's ``finish(value)``)."""
    files = cell_program(magic_line, body, namespace, provided={CONFIG_NAME}).files()
    if then is not None:     # its more jobs: on the cell's ranks, or run_job's ConfigError before launch
        files = {**then.files(files[CELL_FILE].decode()), **files}
        cfg = follow_on_config(cfg, then)
    return run_job(cell_config(cfg, files), progress=progress, run_root=run_root,
                   worker=(*RANK_MAIN, CELL_FILE, CONFIG_NAME), files=files, more=then.more if then else ())
