"""MindSpore's compile cache: one folder per graph-shaping config, held by one running job at a time."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path

from helpers.core.config import JobConfig
from helpers.core.paths import code_root, resolve

CACHE_ENV = "MS_COMPILER_CACHE_PATH"


def code_fingerprint() -> str:
    """A hash of the helpers' source: MindSpore's compile cache checks only the entry script, so a graph
    cached before an edit to the model code would be loaded (and fail, or train the old model) after it."""
    h = hashlib.sha1()
    for path in sorted((code_root() / "helpers").rglob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def graph_classes(cfg: JobConfig) -> int | None:
    """The classifier's size the worker will build (``num_classes``, else the train split's class folders)."""
    try:
        return cfg.num_classes or sum(1 for e in os.scandir(resolve(cfg.data_dir) / "train") if e.is_dir())
    except OSError:
        return None


def compile_cache_dir(cfg: JobConfig) -> Path:
    """One cache folder per graph-shaping part of the config, so different jobs never overwrite each other."""
    key = json.dumps([code_fingerprint(), graph_classes(cfg), cfg.task, cfg.device_target, cfg.world_size,
                      cfg.arch, cfg.width, cfg.stem, cfg.conv_impl, cfg.image_size, cfg.batch_per_rank,
                      cfg.comm_fusion, cfg.micro_batch_size, cfg.accumulation_steps, cfg.amp_level,
                      cfg.grad_reduce, cfg.cell_comm_fusion, cfg.strategy_file, cfg.num_classes,
                      cfg.loss_scale, cfg.label_smoothing, cfg.lr_schedule, cfg.warmup_fraction,
                      cfg.decay_norm_and_bias, cfg.keep_fp32, cfg.deterministic,
                      bool(cfg.evaluate and cfg.bn_recalibration_batches)], sort_keys=True)
    return resolve("runs/compile_cache") / hashlib.sha1(key.encode()).hexdigest()[:12]


def chain_cache(cfg: JobConfig, more_files: dict[str, bytes]) -> JobConfig:
    """A launch with further jobs (``run_job(..., more=)``): its compile cache folder keyed by their configs too.
    MindSpore numbers a process's cached graphs in compile order, so a chain's graph n is not a lone job's."""
    if not cfg.compile_cache or not more_files:
        return cfg
    tag = hashlib.sha1(b"".join(more_files[k] for k in sorted(more_files))).hexdigest()[:8]
    return cfg.replace(env={**cfg.env, CACHE_ENV: f"{cfg.env.get(CACHE_ENV) or compile_cache_dir(cfg)}-then-{tag}"})


@contextmanager
def claim_compile_cache(env: dict, run_dir: Path):
    """Hold the job's cache folder (``env[MS_COMPILER_CACHE_PATH]``) while it runs; yields the env to use.

    Two jobs of the same graph at once (two notebooks, a workshop on one server, pytest-xdist) would write
    the same cache files while the other reads them. The first takes an exclusive ``flock`` on
    ``<folder>.lock`` (released by the kernel if the launcher dies); a job that finds it taken compiles
    into a private folder in its run directory, so it never reads a half-written graph."""
    path = env.get(CACHE_ENV)
    if not path or env.get("MS_COMPILER_CACHE_ENABLE") != "1":
        yield env
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_CREAT | os.O_RDWR, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield {**env, CACHE_ENV: str(Path(run_dir) / "compile_cache")}
            return
        yield env
    finally:
        os.close(fd)   # closing the descriptor releases the lock
