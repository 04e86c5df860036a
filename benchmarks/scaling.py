"""Distribution efficiency on one machine: 8 ranks vs 1 process using all cores, same global batch.

Both through ``run_job`` (our worker, the preset's model): ``world_size=8`` with the preset's threads per
rank, and ``world_size=1`` with ``threads_per_rank = cores`` (the one process gets every core). Alternating
runs; steady img/s as in ``benchmarks.vs_model_train``. efficiency = img/s(8 ranks) / img/s(1 process).

Goal: efficiency >= 0.9 (issue 18). Writes ``benchmarks/results/scaling.json``.

    python -m benchmarks.scaling [--preset ci] [--steps 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from benchmarks._jobs import SKIP_STEPS, alternate, job_record, medians, save
from helpers.core.config import job_config


def main(argv=None) -> dict:
    """Alternate the multi-rank job and one process on every core; save ``scaling.json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    dist = job_config(args.preset, chapter="bench", name=f"scaling-{args.ranks}ranks", world_size=args.ranks,
                      steps=args.steps)
    single = dist.replace(name="scaling-1proc", world_size=1, threads_per_rank=cores)
    root = Path(tempfile.mkdtemp(prefix="bench_scaling_"))
    runs = alternate({f"{args.ranks}_ranks": job_record(dist, root), "1_process": job_record(single, root)},
                     args.repeats)
    med, best = medians(runs), medians(runs, "best_img_per_s")

    def eff_of(m):
        a, b = m.get(f"{args.ranks}_ranks"), m.get("1_process")
        return a / b if a and b else None

    eff = eff_of(med)
    return save("scaling", {
        "preset": args.preset, "arch": dist.arch, "width": dist.width, "image_size": dist.image_size,
        "global_batch": dist.global_batch, "steps": args.steps, "steady_from_step": SKIP_STEPS,
        "repeats": args.repeats,
        "settings": {f"{args.ranks}_ranks": {"world_size": args.ranks, "threads_per_rank": dist.threads_per_rank,
                                             "batch_per_rank": dist.batch_per_rank},
                     "1_process": {"world_size": 1, "threads_per_rank": cores, "batch_per_rank": dist.global_batch}},
        "median_img_per_s": med, "best_step_img_per_s": best, "efficiency_best_step": eff_of(best),
        "efficiency": eff, "ratio": eff, "goal": ">= 0.9",
        "goal_met": None if eff is None else eff >= 0.9, "runs": runs, "run_root": str(root)}, args.out)


if __name__ == "__main__":
    main()
