"""Where a job's first seconds go: an empty 8-rank job by phase, the first training step with a cold and a warm
compile cache, and MindSpore's jit levels on CPU (compile seconds, step time, same losses?).

    python -m benchmarks.startup [--repeats 3] [--preset ci]
    python -m benchmarks.startup --empty-env MS_RETRY_INTERVAL_LOWER=3 --empty-env MS_RETRY_INTERVAL_UPPER=5

Each part alternates its variants ``--repeats`` times in this one run; medians and ranges go to
``benchmarks/results/startup.json``. With ``--empty-env`` only the empty job runs, alternated with and without
those variables (ABBA order), into ``results/startup_env.json``: how a MindSpore setting moves the start-up floor.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._jobs import save
from helpers.core.config import job_config
from helpers.core.errors import ConfigError
from helpers.core.fresh_python import call_fresh
from helpers.job.launch import run_job

PROBE = ("-m", "benchmarks.startup_probe")
JIT_LEVELS = ("", "O0", "O1")      # "" = MindSpore's own choice
# MindSpore 2.10's INFO lines (GLOG_v=1) that time init(): (text, the wheel file printing it; pinned in
# tests/contract/test_startup_wheel.py). The scheduler logs the first when every rank has registered; a rank logs
# the second when its own heartbeat has told it so; the third precedes each fixed sleep(3) of mccl's address
# exchange (ms_collective_node.cc FetchNodeAddress: a peer's address not registered yet, no setting shortens it).
TOPOLOGY_BUILT = ("The cluster topology has been constructed successfully", "lib/libmindspore_cluster.so")
RANK_OUT_OF_BUILD = ("Cluster is successfully initialized.", "lib/libmindspore_cluster.so")
ADDRESS_SLEEP = (" to be registered, retry ", "lib/libmindspore_cpu.so")
_LOG_TIME = re.compile(r"(\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d)\.(\d{3})\.(\d{3})")


def _stats(values) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def empty_job(root: Path, world_size: int = 8, env: dict | None = None, glog_v: int | None = None) -> dict:
    """One 8-rank job that only imports MindSpore and calls ``init()``: wall seconds and where they went. The import
    floor is the CPU seconds of one import times the job's processes (ranks + msrun's scheduler) over the cores.
    ``init_after_last_import_s`` (last rank out of ``init()`` minus last rank done importing) is MindSpore's own
    cluster build and address exchange, the part an environment variable could move; ``env`` is added to the job's.
    With ``glog_v=1`` MindSpore's INFO logs split that part further (``cluster_wait``)."""
    cfg = job_config("ci", name="empty", task="noop", world_size=world_size, global_batch=8 * world_size)
    cfg = cfg.replace(env={**cfg.env, **(env or {})}, **({"glog_v": glog_v} if glog_v is not None else {}))
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
            "init_after_last_import_s": max(x["t_init"] for x in s) - max(x["t_imported"] for x in s),
            "last_rank_ready_s": ready, "after_last_rank_ready_s": res.wall_s - ready,
            **(cluster_wait(res.run_dir / "logs", [x["t_init"] for x in s]) if glog_v == 1 else {})}


def _log_times(path: Path, text: str) -> list[float]:
    """Epoch seconds of the lines of one MindSpore log that contain ``text`` (its stamps are local time)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = _LOG_TIME.search(line) if text in line else None
        if m:
            out.append(time.mktime(time.strptime(m.group(1), "%Y-%m-%d-%H:%M:%S")) + int(m.group(2) + m.group(3)) / 1e6)
    return out


def cluster_wait(log_dir: Path, t_init: list[float]) -> dict:
    """From one job's INFO logs: seconds from the scheduler's "every rank registered" to the last rank out of the
    cluster build (its heartbeat interval decides) and to the last rank out of ``init()`` (``t_init``), and how
    many fixed 3 s sleeps the ranks took in the address exchange."""
    t_built = min(_log_times(log_dir / "scheduler.log", TOPOLOGY_BUILT[0]))
    workers = sorted(log_dir.glob("worker_*.log"))
    out = [max(_log_times(w, RANK_OUT_OF_BUILD[0])) for w in workers]
    return {"last_rank_out_of_build_s": max(out) - t_built, "all_ranks_through_init_s": max(t_init) - t_built,
            "address_sleeps": sum(len(_log_times(w, ADDRESS_SLEEP[0])) for w in workers)}


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


def parse_env(pairs: list[str]) -> dict:
    """``["NAME=VALUE", ...]`` -> ``{"NAME": "VALUE"}``; a pair without ``=`` is a ConfigError naming it."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"--empty-env takes NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def empty_env_ab(env: dict, repeats: int) -> dict:
    """The empty job without and with ``env``, alternated ABBA ``repeats`` times each, with MindSpore's INFO logs:
    medians, ranges and the ratios with/without of the wall time, of ``init_after_last_import_s`` and of the
    seconds from "every rank registered" to every rank through ``init()`` (the cores are shared: only alternated
    runs compare, and the last one least depends on how busy they are)."""
    runs = {"without": [], "with": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            for name in (("without", "with") if i % 2 == 0 else ("with", "without")):
                runs[name].append(empty_job(Path(tmp), env=env if name == "with" else None, glog_v=1))
    stats = {name: {k: _stats([r[k] for r in rs]) for k in rs[0]} for name, rs in runs.items()}
    ratio = {k: round(stats["with"][k]["median"] / stats["without"][k]["median"], 3)
             for k in ("wall_s", "init_after_last_import_s", "all_ranks_through_init_s")}
    return {"repeats": repeats, "env": env, "ratio_with_over_without": ratio, **stats}


def main(argv=None) -> dict:
    """Run the three parts alternated ``--repeats`` times; print and save ``results/startup.json`` (or, with
    ``--empty-env``, only the empty job with and without those variables into ``results/startup_env.json``)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--empty-env", action="append", default=[], metavar="NAME=VALUE",
                    help="only the empty job, alternated without and with this variable (repeatable)")
    args = ap.parse_args(argv)
    if args.empty_env:
        return save("startup_env", empty_env_ab(parse_env(args.empty_env), args.repeats))
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
