"""BatchNorm groups and training (chapter 02): the same global batch normalised as 1, m or n x m groups, over seeds.

One fresh process trains the ci model (ResNet-18 layout, width 0.125, 32 px digits, the ci recipe) for
``--updates`` updates of ``--batch`` images, each split into G BatchNorm groups run as micro-batches by chapter
02's ``MicroStep``/``ApplyStep`` (G = 1: the full batch; 4: 4 micro-batches on one rank, or 4 ranks; 16: 4
micro-batches on each of 4 ranks). n ranks with m micro-batches make the same update as one process with n x m
micro-batches (``tests/jobs/test_bn_groups_jobs.py``), except the running statistics: so the held-out loss is
taken with BatchNorm on the statistics of fixed training images under the final weights. Each G's final loss
is judged against G = 1 seed by seed (paired 95 % interval). One thread: ~8 min of CPU, 17 min on 2 busy cores.

    python -m benchmarks bn_groups [--groups 1 4 16] [--seeds 1 2 3 4 5] [--updates 60] [--batch 64]
"""

from __future__ import annotations

import argparse
import time

from benchmarks._jobs import save
from helpers.core.fresh_python import call_fresh
from helpers.topics.bn_groups import final_values, judge


def main(argv=None) -> dict:
    """Train every grouping and seed in one fresh process, judge the final figures, save the JSON."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks bn_groups", description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, nargs="*", default=[1, 4, 16], help="BatchNorm groups; the first is the base")
    ap.add_argument("--seeds", type=int, nargs="*", default=[1, 2, 3, 4, 5])
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--batch", type=int, default=64, help="global batch (the ci preset's)")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    measured = call_fresh("helpers.topics.bn_groups:train_groups", args.groups, args.seeds, args.updates, args.batch,
                          args.eval_every, "im2col", args.threads, env={"OMP_NUM_THREADS": str(args.threads)},
                          unset=("MS_COMPILER_CACHE_ENABLE",), timeout_s=7200)
    judged = {key: {"by_seed": (v := final_values(measured, key)), **judge(v)}
              for key in ("held_out_loss", "held_out_accuracy", "running_loss")}
    return save("bn_groups", {"wall_s": round(time.monotonic() - t0, 1), "judged_on": "held_out_loss",
                              "final": judged, **measured})


if __name__ == "__main__":
    main()
