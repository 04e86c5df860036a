"""Where a job's first seconds go: an empty 8-rank job by phase, the first training step with a cold and a warm
compile cache, and MindSpore's jit levels on CPU (compile seconds, step time, same losses?).

    python -m benchmarks.startup [--repeats 3] [--preset ci]

Each part alternates its variants ``--repeats`` times in this one run; medians and ranges go to
``benchmarks/results/startup.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._jobs import save
from helpers.core.config import job_config
from helpers.core.fresh_python import call_fresh
from helpers.job.launch import run_job

PROBE = ("-m", "benchmarks.startup_probe")
JIT_LEVELS = ("", "O0", "O1")      # "" = MindSpore's own choice


def _stats(values) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def empty_job(root: Path, world_size: int = 8) -> dict:
    """One 8-rank job that only imports MindSpore and calls ``init()``: wall seconds and where they went. The import
    floor is the CPU seconds of one import times the job's processes (ranks + msrun's scheduler) over the cores."""
    cfg = job_config("ci", name="empty", task="noop", world_size=world_size, global_batch=8 * world_size)
    res = run_job(cfg, progress="none", run_root=root, worker=PROBE)
    t_launch = (res.run_dir / "config.json").stat().st_mtime        # written just before msrun starts
    s = [res.summaries[r] for r in res.ranks]
    ready = max(x["t_init"] for x in s) - t_launch
    return {"wall_s": res.wall_s,
            "until_processes_start_s": statistics.median(x["t_process"] for x in s) - t_launch,
            "import_mindspore_s": statistics.median(x["t_imported"] - x["t_import"] for x in s),
            "import_cpu_s": statistics.median(x["import_cpu_s"] for x in s),
            "import_floor_s": statistics.median(x["import_cpu_s"] for x in s) * (world_size + 1) / os.cpu_count(),
            "init_s": statistics.median(x["t_init"] - x["t_imported"] for x in s),
            "init_spread_s": max(x["t_init"] for x in s) - min(x["t_init"] for x in s),
            "last_rank_ready_s": ready, "after_last_rank_ready_s": res.wall_s - ready}


def first_step(root: Path, cache: Path, cold: bool, preset: str = "ci") -> dict:
    """One short training job with its own compile-cache folder, emptied first when ``cold``."""
    if cold:
        shutil.rmtree(cache, ignore_errors=True)
    cfg = job_config(preset, name="cold" if cold else "warm", steps=3)
    cfg = cfg.replace(env={**cfg.env, "MS_COMPILER_CACHE_PATH": str(cache)})
    res = run_job(cfg, progress="none", run_root=root)
    return {"first_step_s": float(res.metric("step_s")[:, 0].max()), "wall_s": res.wall_s}


def time_jit_level(level: str, width: float = 0.125, image_size: int = 32, batch: int = 8, steps: int = 4) -> dict:
    """In this (fresh) process: compile + first step, median later step and the losses at one jit level."""
    import mindspore as ms
    from mindspore.device_context.cpu.op_tuning import threads_num

    from helpers.train.models import build_model
    from helpers.train.recipe import plain_train_step

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    threads_num(1)
    if level:
        ms.set_context(jit_config={"jit_level": level})
    ms.set_seed(0)
    step = plain_train_step(build_model("resnet18", 10, width, "small", "im2col"))
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((batch, 3, image_size, image_size)).astype(np.float32))
    y = ms.Tensor(rng.integers(0, 10, batch).astype(np.int32))
    t0 = time.perf_counter()
    losses = [float(step(x, y).asnumpy())]
    first = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        losses.append(float(step(x, y).asnumpy()))
        times.append(time.perf_counter() - t0)
    return {"first_step_s": first, "step_s": float(np.median(times)), "losses": losses}


def main(argv=None) -> dict:
    """Run the three parts alternated ``--repeats`` times; print and save ``results/startup.json``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="ci")
    args = ap.parse_args(argv)
    empty, cold, warm, jit = [], [], [], {lv or "default": [] for lv in JIT_LEVELS}
    with tempfile.TemporaryDirectory() as tmp:
        root, cache = Path(tmp), Path(tmp) / "compile_cache"
        for _ in range(args.repeats):
            empty.append(empty_job(root))
            cold.append(first_step(root, cache, cold=True, preset=args.preset))
            warm.append(first_step(root, cache, cold=False, preset=args.preset))
            for lv in JIT_LEVELS:
                jit[lv or "default"].append(call_fresh("benchmarks.startup:time_jit_level", lv))
    out = {"repeats": args.repeats, "preset": args.preset,
           "empty_job": {k: _stats([e[k] for e in empty]) for k in empty[0]},
           "first_step": {"cold": _stats([c["first_step_s"] for c in cold]),
                          "warm": _stats([w["first_step_s"] for w in warm]),
                          "cold_wall": _stats([c["wall_s"] for c in cold]),
                          "warm_wall": _stats([w["wall_s"] for w in warm])},
           "jit_levels": {lv: {"first_step_s": _stats([r["first_step_s"] for r in rs]),
                               "step_s": _stats([r["step_s"] for r in rs]),
                               "same_losses_as_default": all(r["losses"] == d["losses"]
                                                             for r, d in zip(rs, jit["default"]))}
                          for lv, rs in jit.items()}}
    return save("startup", out)


if __name__ == "__main__":
    main()
