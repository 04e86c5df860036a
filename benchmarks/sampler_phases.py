"""Chapter 01's four splits as phases of one job against one job each: wall seconds, and the same training?

    python -m benchmarks.sampler_phases [--preset ci] [--repeats 3]

Both ways alternate ``--repeats`` times in this one run (order swapped every repeat), from launch to the last
result, with the chapter's config. Per split it also compares what was trained: the largest difference of a
rank's per-step loss and the held-out accuracy, one way against the other. Saves ``results/sampler_phases.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

from benchmarks._jobs import save
from helpers.chapters.load_imbalance import STRATEGIES
from helpers.core.config import job_config
from helpers.job.launch import run_job
from helpers.train.data import prepare_data


def run_both_ways(base, root, one_job: bool) -> tuple[float, dict]:
    """Wall seconds from the first launch to the last result, and each split's result."""
    t0 = time.monotonic()
    if one_job:
        job = run_job(base.replace(name="samplers", phase_samplers=list(STRATEGIES)), progress="none", run_root=root)
        results = {k: job.phase(k) for k in STRATEGIES}
    else:
        results = {k: run_job(base.replace(name=k, sampler=k), progress="none", run_root=root) for k in STRATEGIES}
    return time.monotonic() - t0, results


def agreement(a: dict, b: dict) -> dict:
    """Per split: the largest |loss difference| over ranks and steps, and both held-out accuracies."""
    return {k: {"max_loss_diff": float(np.abs(a[k].metric("loss") - b[k].metric("loss")).max()),
                "accuracy_one_job": a[k].summaries[0]["accuracy"], "accuracy_own_jobs": b[k].summaries[0]["accuracy"]}
            for k in STRATEGIES}


def main(argv=None) -> dict:
    """Alternate the two ways ``--repeats`` times; print and save ``results/sampler_phases.json``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    base = job_config(args.preset, chapter="01", evaluate=True)
    prepare_data(base)
    walls = {"one_job": [], "own_jobs": []}
    agree = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            got = {}
            for one in ((True, False) if i % 2 == 0 else (False, True)):
                wall, got[one] = run_both_ways(base, tmp, one)
                walls["one_job" if one else "own_jobs"].append(round(wall, 2))
            agree.append(agreement(got[True], got[False]))
    med = {k: statistics.median(v) for k, v in walls.items()}
    out = {"preset": args.preset, "repeats": args.repeats, "splits": list(STRATEGIES), "steps": base.steps,
           "wall_s": walls, "median_s": med, "one_job_over_own_jobs": med["one_job"] / med["own_jobs"],
           "max_loss_diff": max(a[k]["max_loss_diff"] for a in agree for k in STRATEGIES), "per_repeat": agree}
    return save("sampler_phases", out)


if __name__ == "__main__":
    main()
