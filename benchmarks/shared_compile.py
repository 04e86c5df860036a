"""A cold compile cache: ranks 1-7 loading rank 0's compiled step against every rank compiling its own.

    python -m benchmarks.shared_compile [--preset ci] [--repeats 3]

Both ways alternate in this one run, each job with a fresh, empty cache folder (so both write the cache alike);
the baseline turns the sharing off with ``COURSE_SHARE_GRAPH=0`` (``helpers.train.shared_compile``). Records the
first step (the slowest rank's: it holds the others at the first AllReduce), the job's wall time, and whether the
two ways trained the same losses and weights. Saves ``results/shared_compile.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from benchmarks._jobs import alternate, run_record, save
from helpers.core.config import job_config
from helpers.job.launch import run_job
from helpers.train.data import prepare_data
from helpers.train.shared_compile import SHARE_ENV


def variant(cfg, root: Path, share: bool, losses: dict):
    """A zero-argument job for ``alternate``: ``cfg`` in a fresh cache folder, sharing on or off."""
    count = iter(range(10 ** 6))

    def run():
        env = {**cfg.env, "MS_COMPILER_CACHE_PATH": str(root / f"cache_{share}_{next(count)}")}
        if not share:
            env[SHARE_ENV] = "0"
        res = run_job(cfg.replace(env=env), progress="none", run_root=root / "runs")
        losses.setdefault(share, []).append((res.metric("loss"), res.summary("checksum")))
        return run_record(res)       # first_step_s: the slowest rank's
    return run


def main(argv=None) -> dict:
    """Alternate both ways ``--repeats`` times; print and save ``results/shared_compile.json``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args(argv)
    cfg = job_config(args.preset, name="shared_compile", chapter="bench", steps=args.steps)
    prepare_data(cfg)
    losses: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = alternate({"shared": variant(cfg, Path(tmp), True, losses),
                          "own": variant(cfg, Path(tmp), False, losses)}, args.repeats)
    med = {k: {m: statistics.median(r[m] for r in runs[k]) for m in ("first_step_s", "wall_s")}
           for k in ("shared", "own")}
    same = all(np.array_equal(a[0], b[0]) and a[1] == b[1] for a in losses[True] for b in losses[False])
    return save("shared_compile", {
        "preset": args.preset, "world_size": cfg.world_size, "steps": args.steps, "repeats": args.repeats,
        "runs": runs, "median": med,
        "first_step_shared_over_own": med["shared"]["first_step_s"] / med["own"]["first_step_s"],
        "wall_shared_over_own": med["shared"]["wall_s"] / med["own"]["wall_s"],
        "same_losses_and_weights": bool(same)})


if __name__ == "__main__":
    main()
