"""Where an 8-rank job's wall time goes, read from its run directory after it ended.

Answers "why does the course take this long" with numbers: for every job a timed course run launched, the
seconds from launch to the last rank through ``init()`` (msrun start, the scheduler and 8 Python
processes importing MindSpore on shared cores, the cluster build), the first step (graph compilation +
one step, the slowest rank), the rest of the work (other steps, evaluation, a grad check), and the exit
(finalising the cluster until the last log write). Only the run directory's files are read: ``config.json``
(written just before msrun starts), ``metrics/rank_<r>.jsonl`` and the logs' modification times; ``cell``: the job
ran a notebook's ``%%ranks`` cell (its run folder holds the cell's file).
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cells.program import CELL_FILE
from helpers.core.metrics import read_records

PHASES = ("launch_s", "first_step_s", "rest_s", "exit_s")


def job_phases(run_dir: str | Path) -> dict | None:
    """Phase seconds of one job, its world size and total; None when no rank wrote a record."""
    run_dir = Path(run_dir)
    config = run_dir / "config.json"
    records = [r for p in sorted((run_dir / "metrics").glob("rank_*.jsonl")) for r in read_records(p)]
    if not config.exists() or not records:
        return None
    t0 = config.stat().st_mtime
    starts = [r["time"] for r in records if r["event"] == "start"]
    firsts: dict = {}     # each rank's first step 0: a job of phases numbers every phase's steps from 0
    for r in records:
        if r["event"] == "step" and r.get("step") == 0:
            firsts[r.get("rank")] = min(r["time"], firsts.get(r.get("rank"), r["time"]))
    first = list(firsts.values())
    t_ready = max(starts) if starts else t0
    t_first = max(first) if first else t_ready
    t_last = max(r["time"] for r in records)
    logs = [p.stat().st_mtime for p in [run_dir / "msrun.log", *run_dir.glob("logs/*.log")] if p.exists()]
    t_end = max([t_last, *logs])
    out = dict(launch_s=t_ready - t0, first_step_s=t_first - t_ready, rest_s=t_last - t_first,
               exit_s=t_end - t_last, total_s=t_end - t0,
               world_size=int(json.loads(config.read_text()).get("world_size", len(starts))),
               name=run_dir.name, chapter=run_dir.parent.name, cell=(run_dir / CELL_FILE).exists())
    return out


def phases_since(runs_root: str | Path, since: float) -> dict:
    """Every job under ``runs_root/<chapter>/`` whose config was written at or after ``since`` (a
    ``time.time()``), with the phase sums per chapter and over all."""
    jobs = []
    for config in sorted(Path(runs_root).glob("*/*/config.json")):
        if config.stat().st_mtime >= since:
            p = job_phases(config.parent)
            if p is not None:
                jobs.append(p)
    def total(js):
        return {"jobs": len(js), **{k: round(sum(j[k] for j in js), 1) for k in (*PHASES, "total_s")}}

    chapters = sorted({j["chapter"] for j in jobs})
    return {"all": total(jobs), "chapters": {c: total([j for j in jobs if j["chapter"] == c]) for c in chapters},
            "jobs": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in j.items()} for j in jobs]}
