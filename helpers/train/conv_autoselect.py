"""Choose the faster convolution for this CPU by measuring it (``conv_impl="auto"``).

Which kernel MindSpore's CPU ``Conv2d`` lands in depends on the processor's instruction set (oneDNN picks it at run
time). On this course's machine (AMD EPYC with AVX-512) oneDNN ran 3x3 convolutions (forward, input gradient) as
``jit_uni_ncsp:conv+ref:any`` and im2col + MatMul made a whole training step 10x (ci model) to 17x (cpu model) faster
(``benchmarks/results/conv_cpu.json``: native 7.7-18x slower in every case). No other CPU has been measured for
the course, and one where oneDNN has a direct kernel for this layout may reverse the order. So the course does not
assume: ``auto`` times one
training step of the job's own model (per-rank batch, one thread, after compilation) with each
implementation in a subprocess, picks the faster, and caches the answer per machine and model in
``runs/conv_choice.json`` (written atomically and merged with what another course run wrote meanwhile; a
corrupt file counts as empty and is rewritten). On GPU/Ascend ``auto`` means ``native``.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from helpers.core.paths import resolve

CACHE = "runs/conv_choice.json"


def cpu_name() -> str:
    """The CPU model name (the key of a measurement: another CPU measures again)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def train_step_and_batch(arch, width, stem, image_size, batch, impl, threads=1, classes=10):
    """A GRAPH-mode train step of the model on CPU with ``threads`` op threads, and one random batch for it."""
    import mindspore as ms
    from mindspore.device_context.cpu.op_tuning import threads_num

    from helpers.train.models import build_model
    from helpers.train.recipe import plain_train_step

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    try:
        threads_num(threads)
    except RuntimeError:   # already set in this process (MindSpore allows it once)
        pass
    ms.set_seed(0)
    step = plain_train_step(build_model(arch, classes, width, stem, impl))
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((batch, 3, image_size, image_size)).astype(np.float32))
    y = ms.Tensor(rng.integers(0, classes, batch).astype(np.int32))
    return step, x, y


def median_step_s(step, x, y, repeats: int) -> float:
    """Median seconds of ``repeats`` synchronised calls of ``step(x, y)``."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step(x, y).asnumpy()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def time_train_step(arch, width, stem, image_size, batch, impl, repeats=2, threads=1) -> float:
    """Seconds per training step (median of ``repeats`` after a compile/warm-up step), this process."""
    step, x, y = train_step_and_batch(arch, width, stem, image_size, batch, impl, threads)
    step(x, y).asnumpy()
    return median_step_s(step, x, y, repeats)


def _key(cfg) -> str:
    return json.dumps([cpu_name(), cfg.arch, cfg.width, cfg.stem, cfg.image_size, cfg.batch_per_rank])


def measure(cfg) -> dict:
    """Both implementations timed in fresh subprocesses (MindSpore state stays out of the caller)."""
    from helpers.core.fresh_python import call_fresh

    return {impl: float(call_fresh("helpers.train.conv_autoselect:time_train_step", cfg.arch, cfg.width, cfg.stem,
                                   cfg.image_size, cfg.batch_per_rank, impl))
            for impl in ("native", "im2col")}


def read_cache(path) -> dict:
    """The cached measurements; a missing, unreadable or corrupt file (e.g. cut off by a full disk) is empty."""
    try:
        cache = json.loads(Path(path).read_text())
    except (OSError, ValueError):       # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        return {}
    return cache if isinstance(cache, dict) else {}


def write_cache_entry(path, key: str, entry: dict) -> dict:
    """Add ``entry`` under ``key`` atomically: re-read what another course run may have written meanwhile,
    merge, write a temporary file in the same folder and ``os.replace`` it (readers see the old or the new
    file, never half of one). Returns the merged cache."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cache = {**read_cache(path), key: entry}
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(cache, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return cache


def resolve_conv_impl(cfg) -> tuple[str, dict]:
    """(impl, evidence): ``cfg.conv_impl`` unless it is ``auto``; then measured (and cached) on CPU."""
    if cfg.conv_impl != "auto":
        return cfg.conv_impl, {"reason": "set in the config"}
    if cfg.device_target != "CPU":
        return "native", {"reason": f"native kernels are the fast ones on {cfg.device_target}"}
    path = resolve(CACHE)
    key = _key(cfg)
    entry = read_cache(path).get(key)
    if not (isinstance(entry, dict) and isinstance(entry.get("seconds_per_step"), dict)
            and entry["seconds_per_step"]):
        times = measure(cfg)
        entry = {"seconds_per_step": times, "cpu": cpu_name(), "measured": time.strftime("%Y-%m-%d %H:%M")}
        write_cache_entry(path, key, entry)
    times = entry["seconds_per_step"]
    impl = min(times, key=times.get)
    return impl, {"reason": "measured on this CPU (one train step of this model, per-rank batch, 1 thread)",
                  **entry}
