"""The memory levers beyond accumulation on CPU: planner against measurement, one fresh process per case.

Recomputation (``Cell.recompute()`` on each residual block, on each stage) and AMP O2 are measured against the
plain fp32 step on the ci model: steady peak RSS at each batch, fitted to MiB per image, and step time (1 thread,
the levers alternated within each batch). Optimizer-state sharding is planned only (MindSpore refuses it on CPU):
bytes per rank at 1/2/8 shards for the gpu8 preset's ResNet-50 and the cpu preset's model. Takes ~5 min.

    python -m benchmarks memory_levers [--batches 32 64 128] [--conv-impls im2col native] [--steps 2]
"""

from __future__ import annotations

import argparse

from benchmarks._jobs import save
from helpers.core.config import job_config
from helpers.job.host_memory import num_classes
from helpers.topics.memory_levers import LEVERS, SHARDS_REFUSED, lever_rows, measure_levers, planned_shards

MODEL = dict(arch="resnet18", width=0.125, stem="small", image_size=32)      # the ci preset's model
CLASSES = 10
NATIVE_BATCHES = (16, 32, 48)     # the native convolution is ~10x slower here: smaller batches, 2 timed steps


def compare(measured: dict) -> dict:
    """The planner's MiB per image next to each measured lever, their ratio, and each against the plain step
    (``lever_rows`` on the ci config)."""
    cfg = job_config("ci", conv_impl=measured["conv_impl"], num_classes=CLASSES)
    rows = [r for r in lever_rows(cfg, measured) if r.unit == "MiB/image"]
    plain = rows[0]
    return {r.lever: {"unit": r.unit, "planned": r.planned, "measured": r.measured, "planned_over_measured": r.ratio,
                      "planned_vs_plain": r.planned / plain.planned,
                      "measured_vs_plain": r.measured / plain.measured if r.measured else None,
                      "step_time_ratio_vs_plain": r.time_ratio, "where": r.where} for r in rows}


def shard_plans() -> dict:
    """Weights + gathered copies + gradients + optimizer state per rank at 1/2/8 shards (level1, the default)."""
    out = {}
    for preset in ("gpu8", "cpu"):
        cfg = job_config(preset)
        classes = num_classes(cfg)
        out[preset] = {"arch": cfg.arch, "width": cfg.width, "num_classes": classes,
                       "mib_per_rank": planned_shards(cfg.arch, classes, cfg.width, cfg.stem)}
    return out


def main(argv=None) -> dict:
    """Measure the levers per convolution, add the planner's figures and the shard plans; save the JSON."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks memory_levers", description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="*", default=[32, 64, 128], help="im2col batches")
    ap.add_argument("--conv-impls", nargs="*", default=["im2col", "native"])
    ap.add_argument("--steps", type=int, default=4, help="timed steps per process (native: 2)")
    args = ap.parse_args(argv)
    out = {"model": {**MODEL, "num_classes": CLASSES, "threads": 1}, "levers": list(LEVERS), "measured": {}}
    for impl in args.conv_impls:
        batches, steps = (args.batches, args.steps) if impl == "im2col" else (NATIVE_BATCHES, 2)
        measured = measure_levers(batches, conv_impl=impl, steps=steps, **MODEL)
        out["measured"][impl] = {**measured, "planner": compare(measured)}
    out["optimizer_sharding"] = {"refused_on_cpu": list(SHARDS_REFUSED), "level": "level1", **shard_plans()}
    return save("memory_levers", out)


if __name__ == "__main__":
    main()
