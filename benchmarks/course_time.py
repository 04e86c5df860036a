"""Course wall time: ``python -m helpers.course run --preset <p>`` timed whole and per chapter.

The course runner records each chapter's seconds and status in ``<out>/<preset>/summary.json``; this adds
the total wall time, where the jobs' time went (``benchmarks.job_phases``: launch + init, first step,
the rest, exit; per chapter and per job), and writes ``benchmarks/results/course_time.json`` (one entry per preset, earlier
entries of other presets kept). Goals (issue 7): ci <= 10 minutes, cpu <= 45 minutes on 2 cores.

    python -m benchmarks.course_time [--preset ci] [--out runs/course_bench]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from benchmarks._jobs import RESULTS, machine
from benchmarks.job_phases import phases_since
from helpers.paths import resolve

GOALS_S = {"ci": 600.0, "cpu": 2700.0}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="ci", choices=["ci", "cpu"])
    ap.add_argument("--out", default="runs/course_bench")
    args = ap.parse_args(argv)
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
    path = RESULTS / "course_time.json"
    data = json.loads(path.read_text()) if path.exists() else {"benchmark": "course_time"}
    data[args.preset] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(data, indent=2))
    return data


if __name__ == "__main__":
    main()
