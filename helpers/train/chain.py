"""A launch's further jobs on the same ranks, each run in turn as a fresh job starts (``run_job(..., more=)``,
``%%ranks ... --then`` with ``FollowOn.more``): one start of the ranks for several jobs."""

from __future__ import annotations

import gc
import os
from pathlib import Path

from helpers.core.config import JobConfig
from helpers.core.metrics import FOLLOW_ON_EVENT, MORE_SUMMARY_EVENT, MetricsWriter
from helpers.core.paths import more_dir

running: dict = {}      # the chained job this rank runs now: named in its failure (``failure_where``)
STARTUP_PREFIX = "MS_"  # MindSpore's variables: read once, when the process starts; a chained job cannot change them


def failure_where() -> str:
    """Where a failure outside a cell happened: `` (in the chained job 'NAME')`` while a further job runs, ``(in the
    --then job after the cell)`` in a cell's first follow-on, else ''."""
    if "job" not in running:
        return ""
    return f" (in the chained job {running['job']!r})" if running["job"] else " (in the --then job after the cell)"


def fresh_start(cfg: JobConfig, out: MetricsWriter, more: int) -> None:
    """What a fresh job starts from: MindSpore's default parallel settings (a ``comm_fusion`` set before would stay,
    the worker passes none for the default ``{}``) in GRAPH_MODE (a PyNative cell or hybrid job leaves PyNative on),
    the previous job's objects collected; then the job's ``follow_on`` record (the watchdog's compile allowance)."""
    import mindspore as ms

    gc.collect()
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    running["job"] = cfg.name if more else None
    out.write(FOLLOW_ON_EVENT, task=cfg.task, more=more, name=cfg.name, steps=cfg.progress_steps)


def use_job_env(cfg: JobConfig, launched: JobConfig, own=()) -> None:
    """The course's environment variables of ``cfg`` in this process, in place of the launched job's (the worker
    reads them as it runs, e.g. the time split's period); MindSpore's (``MS_*``) and ``own`` stay as launched."""
    for key in set(launched.env) | set(cfg.env):
        if key.startswith(STARTUP_PREFIX) or key in own:
            continue
        if key in cfg.env:
            os.environ[key] = str(cfg.env[key])
        else:
            os.environ.pop(key, None)


def more_configs(run_dir: Path) -> list[JobConfig]:
    """The launch's further jobs, in order: ``then-1/config.json``, ``then-2/config.json``, ..."""
    out, i = [], 1
    while (more_dir(run_dir, i) / "config.json").exists():
        out.append(JobConfig.load(more_dir(run_dir, i) / "config.json"))
        i += 1
    return out


def run_more(run_task, launched: JobConfig, run_dir: Path, rank: int, world: int, out: MetricsWriter, card: dict,
             before=lambda: None, own=()) -> None:
    """Each further job on this rank, in turn: ``before()`` (e.g. release a cell), a fresh start, its own course
    variables, ``run_task`` (the worker's) in its ``then-<i>`` folder; its summary, with the rank's ``card`` fields,
    a ``more_summary`` record. ``peak_rss_mb`` in a summary is the process's, all jobs so far included."""
    for i, cfg in enumerate(more_configs(run_dir), start=1):
        before()
        use_job_env(cfg, launched, own)
        fresh_start(cfg, out, more=i)
        out.write(MORE_SUMMARY_EVENT, more=i, **card, **run_task(cfg, more_dir(run_dir, i), rank, world, out))
