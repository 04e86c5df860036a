"""Native MindSpore Conv2d vs im2col + MatMul on CPU: the presets' ResNet blocks and a whole train step.

Which one wins depends on the CPU (see helpers.train.conv_autoselect): run this on your machine.

Same parameters, same inputs; forward + backward timed in GRAPH_MODE after a warm-up (compile) call,
alternating the two implementations. Prints JSON with the native/im2col time ratio (> 1: im2col faster).

    python -m benchmarks.conv_cpu [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def _timed(fn, args, repeats):
    fn(*args)  # compile + warm-up
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = fn(*args)
        (r[0] if isinstance(r, tuple) else r).asnumpy()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def block_case(width_channels: int, batch: int, image: int, impl: str):
    """A jitted value-and-grad of one ``BasicBlock`` with ``impl`` convolutions, and its input."""
    import mindspore as ms
    from mindspore import ops

    from helpers.train.models import BasicBlock

    ms.set_seed(0)
    block = BasicBlock(width_channels, width_channels, 1, impl)
    x = ms.Tensor(np.random.default_rng(0).standard_normal((batch, width_channels, image, image)).astype(np.float32))
    def loss(xx):
        return block(xx).sum()

    grad = ops.value_and_grad(loss, None, block.trainable_params())
    return ms.jit(grad), (x,)


def main(argv=None):
    """Time native vs im2col per preset (one block, a whole train step); print the JSON."""
    from helpers.train.conv_autoselect import cpu_name, time_train_step

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import mindspore as ms
    from mindspore.device_context.cpu.op_tuning import threads_num

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    threads_num(args.threads)
    from helpers.core.config import job_config

    cases = {}
    for preset in ("ci", "cpu"):
        cfg = job_config(preset)
        ch = max(1, int(round(64 * cfg.width)))
        cases[f"{preset}: layer1 BasicBlock {ch}ch {cfg.image_size}px batch {cfg.batch_per_rank}"] = (
            lambda impl, ch=ch, cfg=cfg: block_case(ch, cfg.batch_per_rank, cfg.image_size, impl))
    rows = {}
    for name, make in cases.items():
        t = {}
        for impl in ("native", "im2col"):
            fn, fargs = make(impl)
            t[impl] = _timed(fn, fargs, args.repeats)
        rows[name] = {"native_s": t["native"], "im2col_s": t["im2col"], "native_over_im2col": t["native"] / t["im2col"]}
    for preset in ("ci", "cpu"):
        cfg = job_config(preset)
        t = {impl: time_train_step(cfg.arch, cfg.width, cfg.stem, cfg.image_size, cfg.batch_per_rank, impl,
                                   repeats=args.repeats, threads=args.threads) for impl in ("native", "im2col")}
        rows[f"{preset}: whole train step {cfg.arch} x{cfg.width} batch {cfg.batch_per_rank}"] = {
            "native_s": t["native"], "im2col_s": t["im2col"], "native_over_im2col": t["native"] / t["im2col"]}
    print(json.dumps({"benchmark": "conv_cpu", "cpu": cpu_name(), "threads": args.threads, "repeats": args.repeats, "cases": rows},
                     indent=2))


if __name__ == "__main__":
    main()
