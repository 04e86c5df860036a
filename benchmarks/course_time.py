"""Course wall time: ``python -m helpers.course run --preset <p>`` timed whole and per chapter.

Takes each chapter's seconds and status from the runner's ``<out>/<preset>/summary.json``, adds the total wall
time and where the jobs' time went (``benchmarks.job_phases``: launch + init, first step, the rest, exit), and
writes ``benchmarks/results/course_time.json`` (one entry per preset, other presets' entries kept). Goals (issue 31): ci <=
6 minutes, cpu <= 15 minutes on 2 cores. It also times the floor under every job, the preset's 8 ranks doing
nothing (task ``noop``), right after the course: jobs x floor is what no chapter's own settings can remove. The
same run's host memory per chapter goes to ``host_memory.json`` (``benchmarks.host_memory.course_entry``).

    python -m benchmarks.course_time [--preset ci] [--out runs/course_bench]
    python -m benchmarks.course_time --preset cpu --floor-only     # add the floor to the stored entry
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import host_memory
from benchmarks._jobs import RESULTS, machine
from benchmarks.job_phases import phases_since
from benchmarks.result_rows import COURSE_GOALS_S as GOALS_S
from helpers.core.paths import resolve


def startup_floor(preset: str, repeats: int = 2) -> dict:
    """Wall seconds of ``run_job`` on the preset's ranks with nothing to do (median of ``repeats``)."""
    from helpers.core.config import job_config
    from helpers.job.launch import run_job

    cfg = job_config(preset, name="noop", chapter="floor", task="noop")
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            t0 = time.monotonic()
            run_job(cfg, progress="none", run_root=tmp)
            times.append(round(time.monotonic() - t0, 2))
    return {"world_size": cfg.world_size, "seconds": times, "median_s": statistics.median(times)}


def _store(preset: str, entry: dict) -> dict:
    path = RESULTS / "course_time.json"
    data = json.loads(path.read_text()) if path.exists() else {"benchmark": "course_time"}
    data[preset] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def main(argv=None) -> dict:
    """Time the course for ``--preset`` (or only the noop-job floor) and store it in course_time.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="ci", choices=["ci", "cpu"])
    ap.add_argument("--out", default="runs/course_bench")
    ap.add_argument("--floor-only", action="store_true", help="only time the empty 8-rank job, into the stored entry")
    args = ap.parse_args(argv)
    if args.floor_only:
        path = RESULTS / "course_time.json"
        entry = (json.loads(path.read_text()) if path.exists() else {}).get(args.preset) or {}
        data = _store(args.preset, {**entry, "noop_job": startup_floor(args.preset)})
        print(json.dumps(data[args.preset]["noop_job"]))
        return data
    cache = resolve("runs/compile_cache")
    cached_graphs = len(list(cache.glob("*"))) if cache.is_dir() else 0   # warm caches make first steps shorter
    t0, wall0 = time.monotonic(), time.time()
    proc = subprocess.run([sys.executable, "-m", "helpers.course", "run", "--preset", args.preset,
                           "--out", args.out], cwd=resolve("."))
    total = time.monotonic() - t0
    summary = resolve(args.out) / args.preset / "summary.json"
    chapters = json.loads(summary.read_text()) if summary.exists() else []
    entry = {"total_s": total, "returncode": proc.returncode,
             "all_ok": proc.returncode == 0 and bool(chapters) and all(c["ok"] for c in chapters),
             "chapters": {c["stem"]: {"seconds": c["seconds"], "ok": c["ok"], "error": c["error"]}
                          for c in chapters},
             "jobs": phases_since(resolve("runs"), wall0), "compile_cache_dirs_at_start": cached_graphs,
             "goal": f"<= {GOALS_S[args.preset]:g} s", "goal_met": total <= GOALS_S[args.preset],
             "machine": machine()}
    host_memory.store(args.preset, host_memory.course_entry(args.preset, chapters, wall0, proc.returncode))
    entry["noop_job"] = startup_floor(args.preset)
    data = _store(args.preset, entry)
    print(json.dumps(data, indent=2))
    return data


if __name__ == "__main__":
    main()
