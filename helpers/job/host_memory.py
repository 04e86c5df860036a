"""Host memory of a job: what it will need, what is free, one check before launch, and the peak it really used.

The check (``admit``) runs in ``run_job`` before anything starts: a job that cannot fit gets one clear error (or,
when asked, waits for the other course jobs to finish) instead of the kernel's out-of-memory killer picking a rank,
the notebook or the browser. The measure is ``helpers.core.footprint``'s (private memory of every process plus the
shared libraries once), sampled for a job by ``helpers.job.watch`` and for a chapter by ``helpers.course``.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from helpers.core import memory_planner as planner
from helpers.core.footprint import footprint
from helpers.core.errors import CourseError

MIB = 2 ** 20
AVAILABLE_ENV = "COURSE_AVAILABLE_MB"   # a room's (or a test's) limit: this many MB for course jobs, less what they use
WAIT_ENV = "COURSE_MEMORY_WAIT_S"       # wait up to this many seconds for other course jobs instead of failing
RESERVE_MB = 512.0      # kept free for the notebook kernel, the browser and the system (never handed to a job)
# Calibration from measured runs (benchmarks/results/host_memory.json): a CPU rank's private memory besides its
# training step (MindSpore runtime, compiled graph, data pipeline: 386 MB at the ci preset's peak, 37 MB of it the
# step) and the measured memory per MiB the planner counts, per convolution (native: oneDNN's NHWC copies, chapter
# 02 section 5; im2col: 1391 MB measured above the ready point for 1225 MB planned).
RANK_BASE_MB = 350.0
SCHEDULER_MB = 650.0    # once per job: msrun (156 MB) and its scheduler (156 MB; it runs the same script), the rank
                        # guards (8 MB each), and the MindSpore libraries' shared pages counted once (~270 MB)
CONV_FACTOR = {"native": 3.2, "im2col": 1.15}
# chapter 02's grad_check runs the whole per-rank batch besides its micro-batches and keeps the graphs of three
# networks and two built-in cells: 702 MB per rank measured against 551 MB for one full-batch graph
TASK_EXTRA_MB = {"grad_check": 200.0}
# a profiled CPU rank analyses its trace at the end in 2-3 forked children that share its pages copy-on-write: as
# summed PSS a one-rank probe took 676-731 MB against 659-665 MB unprofiled (the children's own pages, 15-60 MB);
# chapter 04's profiled 8-rank ci jobs peaked at 2,593-2,638 MB against 2,611 MB for its unprofiled no_reduce job
PROFILER_EXTRA_MB = 30.0
# a job whose steps are sampled split (helpers.train.time_split) keeps three more graphs per rank: chapter 04's
# first look took 117-128 MB per rank more than its unprofiled no_reduce job when every rank compiled them (ci 3,547
# vs 2,611 MB; cpu 4,598 vs 3,576 MB, 8 ranks), 22 MB once ranks 1-7 load rank 0's (ci 2,781 vs 2,608 MB,
# helpers.train.shared_graphs; cpu not measured since); and a job of phases keeps one data pipeline per sampler and
# seed: chapter 01's at cpu (4 samplers x 5 seeds) took 200 MB per rank above that, at ci (4 x 1) 23 MB (summed PSS)
SPLIT_EXTRA_MB = 40.0
PHASE_DATASET_MB = 10.0
CARD_RANK_MB = 1500.0   # a GPU/Ascend rank's host side (runtime, data pipeline); its activations live on the card
POLL_S = 2.0
BUDGET_MB = {"ci": 6 * 1024, "cpu": 10 * 1024}   # a chapter's peak host memory at these presets (issue 35: a 16 GB
                                                # laptop with a browser open runs ci; benchmarks/host_memory.py)


class NotEnoughHostMemory(CourseError):
    """A job that would not fit in this machine's free memory, refused before anything started."""


def available_mb() -> float:
    """Memory free for a new job now (MB): psutil's ``available``, or under ``COURSE_AVAILABLE_MB`` that limit less
    what the running course jobs' processes hold (so a test or a room can set the machine's size)."""
    limit = os.environ.get(AVAILABLE_ENV)
    if limit:
        return float(limit) - sum(j["rss_mb"] for j in other_jobs())
    return psutil.virtual_memory().available / MIB


def rank_need_mb(cfg) -> float:
    """One local rank's peak private memory (MB): the calibrated base plus the planner's step at the micro-batch
    (the whole per-rank batch for a grad check; at most ``mem_cap_mb``: an address-space cap bounds the rank)."""
    if cfg.device_target != "CPU":
        return CARD_RANK_MB
    impl = cfg.conv_impl if cfg.conv_impl in CONV_FACTOR else "native"
    try:
        batch = cfg.batch_per_rank if cfg.task == "grad_check" else cfg.micro_batch_size
        est = planner.estimate(cfg.arch, batch, cfg.image_size, num_classes=num_classes(cfg),
                               width=cfg.width, stem=cfg.stem, conv_impl=impl,
                               accumulation_steps=cfg.accumulation_steps)
    except (ValueError, KeyError):
        return RANK_BASE_MB                  # a model the planner does not know (a benchmark's worker)
    need = (RANK_BASE_MB + TASK_EXTRA_MB.get(cfg.task, 0.0) + (PROFILER_EXTRA_MB if cfg.profile else 0.0)
            + (SPLIT_EXTRA_MB if splits_steps(cfg) else 0.0)
            + PHASE_DATASET_MB * len(cfg.phase_samplers) * max(1, len(cfg.phase_seeds))
            + CONV_FACTOR[impl] * est.total_bytes / MIB)
    return min(need, float(cfg.mem_cap_mb)) if cfg.mem_cap_mb else need   # the cap bounds the address space, so RSS


def splits_steps(cfg) -> bool:
    """Whether the job's ranks will sample split steps (the worker's rule: a train job without accumulation or a
    strategy file, long enough for ``split_every``, under the job's environment)."""
    from helpers.train.time_split import split_every

    plain = cfg.task == "train" and cfg.accumulation_steps == 1 and not cfg.strategy_file
    return plain and bool(split_every(cfg.steps, {**os.environ, **{k: str(v) for k, v in cfg.env.items()}}))


def num_classes(cfg) -> int:
    """The config's classes, else what its stem implies (as ``helpers.job.plan.oom_hint``): the head is small."""
    return int(cfg.num_classes or (10 if cfg.stem == "small" else 1000))


def job_need_mb(cfg) -> float:
    """What the job's processes here will hold at their peak (MB): its local ranks, msrun and its scheduler."""
    return cfg.local_workers * rank_need_mb(cfg) + SCHEDULER_MB


def job_rss_mb(job_id: str) -> float:
    """Footprint (MB) of every process carrying ``job_id`` (a running course job, from any clone)."""
    from helpers.job.processes import job_processes

    return footprint(job_processes(job_id))[0]


def other_jobs(exclude: str | None = None) -> list[dict]:
    """The other course jobs running on this machine: name, what they will need and what they hold now (MB)."""
    from helpers.job.registry import machine_jobs

    out = []
    for rec in machine_jobs(exclude):
        rss = job_rss_mb(rec["job_id"])
        need = float(rec.get("host_need_mb") or rss)
        out.append(dict(job_id=rec["job_id"], run_dir=rec["run_dir"], need_mb=need, rss_mb=rss,
                        still_mb=max(0.0, need - rss)))
    return out


def shortfall(cfg, job_id: str | None = None) -> tuple[float, float, list[dict]]:
    """(need, free, others): the job's need, the memory free for it (available now, less ``RESERVE_MB`` and what
    the other course jobs will still take as they grow to their need), and those jobs."""
    others = other_jobs(job_id)
    free = available_mb() - RESERVE_MB - sum(j["still_mb"] for j in others)
    return job_need_mb(cfg), free, others


def refusal(cfg, need: float, free: float, others: list[dict]) -> str:
    """The error's text: the need, what is free, who holds the rest, and what to do."""
    held = "".join(f"\n  - {Path(j['run_dir']).name} ({j['job_id']}): holds {j['rss_mb']:.0f} MB, needs up to "
                   f"{j['need_mb']:.0f} MB" for j in others) or " none (other programs hold the rest)"
    per_rank = rank_need_mb(cfg)
    n = int((free - SCHEDULER_MB) // per_rank)
    fewer = f"fewer ranks (world_size={n} would fit)" if 1 <= n < cfg.local_workers else "fewer ranks"
    return (f"{cfg.name}: not started, it would not fit in this machine's memory. It needs about {need:.0f} MB "
            f"({cfg.local_workers} ranks x {per_rank:.0f} MB + {SCHEDULER_MB:.0f} MB for msrun and its scheduler); "
            f"{max(free, 0):.0f} MB are free for it ({RESERVE_MB:.0f} MB kept for the notebook and the system). "
            f"Other course jobs on this machine:{held}\nFix: {fewer}, a smaller "
            f"batch per rank (or micro_batch with accumulation_steps), the 'ci' preset, or wait for the other jobs "
            f"to finish (set {WAIT_ENV}=<seconds> to wait for them instead of failing); close other programs.")


@contextmanager
def _machine_lock():
    """Only one course job on this machine checks and registers at a time (else two could both see room)."""
    from helpers.job.registry import MACHINE_REGISTRY

    MACHINE_REGISTRY.mkdir(parents=True, exist_ok=True)
    with open(MACHINE_REGISTRY / ".admit.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def admit(cfg, job_id: str, register, bar=None, wait_s: float | None = None) -> float:
    """Check the job fits, then ``register(host_need_mb=...)`` it, under a machine-wide lock; returns the need (MB).

    Raises ``NotEnoughHostMemory`` before anything starts; with ``wait_s`` (default ``COURSE_MEMORY_WAIT_S``, 0)
    first waits up to that long while other course jobs hold the memory, the wait shown on ``bar``."""
    if cfg.launcher != "local":
        register(host_need_mb=None)          # the ranks run on other machines (Slurm): this host's memory is not theirs
        return 0.0
    wait_s = float(os.environ.get(WAIT_ENV) or 0) if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    while True:
        with _machine_lock():
            need, free, others = shortfall(cfg, job_id)
            if need <= free:
                register(host_need_mb=round(need))
                return need
        if not others or time.monotonic() >= deadline:
            raise NotEnoughHostMemory(refusal(cfg, need, free, others))
        if bar is not None:
            bar.queued(f"waiting for memory: needs {need:.0f} MB, held by other course jobs: "   # printed on change
                       + ", ".join(Path(j["run_dir"]).name for j in others))
        time.sleep(POLL_S)
