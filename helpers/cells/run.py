"""Run a notebook cell's code on every rank of a job: ``run_cell(body, cfg, namespace)`` -> ``JobResult``.

The cell goes to the ranks as a file in the job's run directory (``helpers.cells.program``) and runs there under
``helpers.cells.rank_main`` through ``run_job``: the same launcher, progress, failure naming, hang detection,
host-memory admission, stop and Slurm path as every other job. MindSpore's compile cache stays off for a cell:
a ``@ms.jit`` train step loaded from it returned NaN losses and left the weights untouched (ARCHITECTURE.md).
"""

from __future__ import annotations

from helpers.cells.program import CELL_FILE, VALUES_FILE, cell_program
from helpers.core.config import JobConfig
from helpers.core.paths import resolve
from helpers.job.launch import JobResult, run_job

RANK_MAIN = ("-m", "helpers.cells.rank_main")
CONFIG_NAME = "cfg"          # what the cell calls the job's config


def cell_config(cfg: JobConfig) -> JobConfig:
    """``cfg`` as a cell's job runs it: no compile cache, the data folder absolute (the ranks run in their run
    folder)."""
    return cfg.replace(compile_cache=False, data_dir=str(resolve(cfg.data_dir)))


def cell_job(result: JobResult) -> dict:
    """``run_job`` arguments that launch the cell program of the earlier cell job ``result`` again (its file and
    notebook values), e.g. on two nodes or through Slurm: ``run_job(cell_config(cfg), **cell_job(result))``."""
    files = {name: (result.run_dir / name).read_bytes() for name in (CELL_FILE, VALUES_FILE)}
    return dict(worker=(*RANK_MAIN, CELL_FILE, CONFIG_NAME), files=files)


def run_cell(body: str, cfg: JobConfig, namespace: dict, magic_line: str = "%%ranks", progress: str = "auto",
             run_root="runs") -> JobResult:
    """Run ``body`` (a cell's code) on ``cfg``'s ranks, where ``cfg`` is the job's config; every other name the
    cell reads from the notebook is sent by value. Raises ``CellError`` before launch, ``JobFailed``
    after; returns the ``JobResult`` (``.returns``: each rank's ``finish(value)``)."""
    program = cell_program(magic_line, body, namespace, provided={CONFIG_NAME})
    return run_job(cell_config(cfg), progress=progress, run_root=run_root,
                   worker=(*RANK_MAIN, CELL_FILE, CONFIG_NAME), files=program.files())
