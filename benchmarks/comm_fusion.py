"""Gradient fusion on 8 ranks: MindSpore's default (one AllReduce per gradient) vs ``comm_fusion`` auto.

The ``cpu`` preset's ResNet, both variants profiled from step ``--profile-from`` on (the earlier steps, after
step 0's compilation, time the step without the profiler), run alternately ``--repeats`` times so that a
change in machine load hits both. Prints JSON: AllReduce calls per step (from the profiler), median step
time without the profiler and the fused/baseline ratio, communication share (profiled) for both.
Goal: fused step time <= 0.6x baseline on this CPU setup.

    python -m benchmarks.comm_fusion [--repeats 3] [--world-size 8] [--steps 10] [--profile-from 6]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from helpers.topics import profiling as prof
from helpers.core.config import FUSE_ALL, job_config
from helpers.job.launch import run_job

VARIANTS = {"baseline": {}, "fused": FUSE_ALL}


def main(argv=None):
    """Alternate the fusion variants as profiled jobs and print the JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--profile-from", type=int, default=6)
    args = ap.parse_args(argv)
    base = job_config(args.preset, chapter="bench", world_size=args.world_size, steps=args.steps,
                      profile=True, profile_skip_steps=args.profile_from)
    runs = {k: [] for k in VARIANTS}
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, fusion in VARIANTS.items():
                cfg = base.replace(name=name, comm_fusion=fusion)
                res = run_job(cfg, progress="none", run_root=Path(tmp))
                jp = prof.read_job_profile(res)
                runs[name].append(dict(step_s=prof.job_step_s(res), profiled_step_s=float(jp.step_s.mean()),
                                       allreduce_per_step=jp.allreduce_per_step, comm_share=jp.comm_share,
                                       overhead=prof.overhead_ratio(res.metric("step_s"), args.profile_from),
                                       wall_s=res.wall_s))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("step_s", "comm_share", "overhead")}
           for k, v in runs.items()}
    ratio = med["fused"]["step_s"] / med["baseline"]["step_s"]
    print(json.dumps({
        "benchmark": "comm_fusion", "preset": args.preset, "arch": base.arch, "width": base.width,
        "world_size": args.world_size, "global_batch": base.global_batch, "repeats": args.repeats,
        "steps": args.steps, "profiled_from_step": args.profile_from,
        "allreduce_per_step": {k: v[0]["allreduce_per_step"] for k, v in runs.items()},
        "median_step_s": {k: med[k]["step_s"] for k in runs},
        "step_time_ratio_fused_over_baseline": ratio,
        "img_per_s": {k: base.global_batch / med[k]["step_s"] for k in runs},
        "comm_share": {k: med[k]["comm_share"] for k in runs},
        "profiler_overhead_ratio": {k: med[k]["overhead"] for k in runs},
        "runs": runs, "total_s": time.monotonic() - t_start,
        "goal": "fused step time <= 0.6x baseline", "goal_met": ratio <= 0.6,
    }, indent=2))


if __name__ == "__main__":
    main()
