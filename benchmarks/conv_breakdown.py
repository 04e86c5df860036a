"""Where one CPU train step's kernel time goes (the cpu model, im2col, 1 thread, batch 128), by MindSpore's profiler.

Each op type's kernel time per step (the trace's kernel rows, ``helpers.topics.kernel_trace.op_events``), with the
im2col convolution's parts named: the unfold (Im2Col), the fold of its gradient (Col2Im), the matmuls, the per-image
weight copy (BroadcastTo) and its gradient's sum (ReduceSum), transposes. RESULTS.md gives the vs_pytorch batch-128
row its reason from it.

    python -m benchmarks conv_breakdown [--batch 128] [--steps 3]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from pathlib import Path

PARTS = {"Im2Col": "unfold", "Col2Im": "fold", "BatchMatMul": "matmul", "MatMul": "matmul",
         "BroadcastTo": "weight copy", "ReduceSum": "batch sum", "Transpose": "transpose"}
ARCH, WIDTH, STEM, SIZE, CLASSES = "resnet18", 0.25, "small", 32, 10      # the cpu preset's model


def measure_here(batch: int, steps: int, out_dir: str) -> dict:
    """In a fresh interpreter: two warm-up steps, ``steps`` timed, then ``steps`` profiled into ``out_dir``."""
    from mindspore.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    from helpers.train.conv_autoselect import median_step_s, train_step_and_batch

    step, x, y = train_step_and_batch(ARCH, WIDTH, STEM, SIZE, batch, "im2col", classes=CLASSES)
    for _ in range(2):
        step(x, y).asnumpy()
    step_s = median_step_s(step, x, y, steps)
    with profile(activities=[ProfilerActivity.CPU], on_trace_ready=tensorboard_trace_handler(out_dir),
                 schedule=schedule(wait=0, warmup=0, active=steps, repeat=1, skip_first=0)) as prof:
        for _ in range(steps):
            step(x, y).asnumpy()
            prof.step()
    return {"step_s": step_s}


def per_type_ms(out_dir: str | Path, steps: int) -> dict[str, float]:
    """Kernel milliseconds per step of each op type in the profile written under ``out_dir``."""
    from helpers.topics.kernel_trace import op_events, op_type
    from helpers.topics.rank_profile import read_trace

    traces = sorted(Path(out_dir).rglob("trace_view.json"))
    if not traces:
        raise FileNotFoundError(f"no trace_view.json under {out_dir}")
    totals: dict[str, float] = defaultdict(float)
    for e in op_events(read_trace(traces[0])):
        totals[op_type(e.name)] += e.dur_us / 1e3 / steps
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def main(argv=None) -> dict:
    """Profile one train step in a fresh interpreter; save ``benchmarks/results/conv_breakdown.json``."""
    from benchmarks._jobs import save
    from helpers.core.fresh_python import call_fresh

    ap = argparse.ArgumentParser(prog="python -m benchmarks.conv_breakdown", description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="conv_breakdown_") as tmp:
        timed = call_fresh("benchmarks.conv_breakdown:measure_here", args.batch, args.steps, tmp,
                           env={"OMP_NUM_THREADS": "1"}, timeout_s=1800)
        types = per_type_ms(tmp, args.steps)
    parts: dict[str, float] = defaultdict(float)
    for name, ms_ in types.items():
        parts[PARTS.get(name, "other")] += ms_
    return save("conv_breakdown", {"arch": ARCH, "width": WIDTH, "image_size": SIZE, "batch": args.batch,
                                   "threads": 1, "steps": args.steps, "step_s": timed["step_s"],
                                   "kernel_ms_per_step": round(sum(types.values()), 1),
                                   "parts_ms": {k: round(v, 1) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])},
                                   "op_types_ms": {k: round(v, 2) for k, v in types.items()}})


if __name__ == "__main__":
    main()
