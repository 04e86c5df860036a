"""The worker's per-step host time around the compiled step, on one rank in this process (no msrun, no collective).

Builds the preset's network, train step and data pipeline as ``helpers.train.worker`` does (GRAPH_MODE, stand-alone),
runs ``SKIP_STEPS`` untimed steps (they compile), then the worker's own step loop (``_loop``) with the step cell and
each host part wrapped in a timer: loss to float, batch fetch, ``Tensor.asnumpy`` (labels and the loss), host
memory, class counts, record write. Prints ms per step; ``host_ms`` = wall minus the step cell. Issue 31.

    python -m benchmarks.worker_overhead [--preset cpu] [--steps 30] [--batch 16] [--save]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import contextmanager

from benchmarks._jobs import SKIP_STEPS

PARTS = ("step_cell", "loss_to_float", "next_batch", "labels_asnumpy", "memory_now_mb", "class_counts",
         "record_write")


class _Timed:
    """Wraps a callable; adds each call's wall time to ``totals[label]`` (no profiler: a few µs per call)."""

    def __init__(self, fn, label: str, totals: dict):
        self.fn, self.label, self.totals = fn, label, totals

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.totals[self.label] = self.totals.get(self.label, 0.0) + time.perf_counter() - t0


class _TimedIter:
    """An iterator whose ``__next__`` is timed as ``next_batch``."""

    def __init__(self, it, totals: dict):
        self.next = _Timed(it.__next__, "next_batch", totals)

    def __next__(self):
        return self.next()


@contextmanager
def _patched(totals: dict):
    """The worker's host parts wrapped in timers, as module attributes the loop looks up at call time."""
    from mindspore.common.tensor import Tensor

    from helpers.core.metrics import MetricsWriter
    from helpers.train import recipe, worker

    targets = [(worker, "memory_now_mb"), (worker, "class_counts"), (recipe, "step_loss"),
               (MetricsWriter, "write"), (Tensor, "asnumpy")]
    labels = {"step_loss": "loss_to_float", "write": "record_write", "asnumpy": "labels_asnumpy"}
    saved = [(obj, name, getattr(obj, name)) for obj, name in targets]
    try:
        for obj, name, fn in saved:
            timed = _Timed(fn, labels.get(name, name), totals)
            setattr(obj, name, (lambda t: lambda *a, **k: t(*a, **k))(timed) if isinstance(obj, type) else timed)
        yield
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)


def _build(cfg):
    """(train step, endless batch iterator) as the worker builds them, on one stand-alone rank."""
    import mindspore.dataset as ds

    from helpers.train.data import build_dataset
    from helpers.train.image_folder import scan_split
    from helpers.train.worker import _build_train_step, setup_runtime

    setup_runtime(cfg)
    ds.config.set_seed(cfg.seed)
    _net, step = _build_train_step(cfg, len(scan_split(cfg.data_dir, "train").classes))
    data = build_dataset(cfg, "train", 0, 1, batch_size=cfg.micro_batch_size).repeat()
    return step, data.create_tuple_iterator(num_epochs=-1)


def measure(cfg, steps: int) -> dict:
    """Per step after the warm-up: wall, step cell and host parts in ms."""
    from helpers.core.metrics import MetricsWriter
    from helpers.train.profiler_session import NoProfiler
    from helpers.train.worker import _loop

    step, it = _build(cfg)
    out = MetricsWriter(tempfile.mkdtemp(prefix="worker_overhead_"), 0)
    _loop(cfg.replace(steps=SKIP_STEPS), 0, step, it, out, NoProfiler())    # compiles: not timed
    totals: dict[str, float] = {}
    with _patched(totals):
        t0 = time.perf_counter()
        _loop(cfg, 0, _Timed(step, "step_cell", totals), _TimedIter(it, totals), out, NoProfiler())
        wall = time.perf_counter() - t0
    out.close()
    per = {label: 1e3 * totals.get(label, 0.0) / steps for label in PARTS}
    return {"steps_timed": steps, "wall_ms": 1e3 * wall / steps,
            "host_ms": 1e3 * wall / steps - per["step_cell"], "parts_ms": per,
            "note": "labels_asnumpy counts every Tensor.asnumpy, the loss's inside loss_to_float included"}


def main(argv=None) -> dict:
    """Measure one rank of ``--preset`` at ``--batch`` images per step; prints and returns ``measure``'s dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--save", action="store_true", help="write benchmarks/results/worker_overhead.json")
    args = ap.parse_args(argv)
    from helpers.core.config import job_config
    from helpers.job.plan import plan_job

    cfg = plan_job(job_config(args.preset, world_size=1, global_batch=args.batch, steps=args.steps,
                              chapter="bench", name="worker_overhead", evaluate=False))
    res = {"preset": args.preset, "batch": args.batch, **measure(cfg, args.steps)}
    if args.save:
        from benchmarks._jobs import save

        return save("worker_overhead", res)
    json.dump(res, sys.stdout, indent=2)
    return res


if __name__ == "__main__":
    main()
