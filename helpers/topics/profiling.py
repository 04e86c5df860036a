"""A whole profiled job: every rank's compute, communication and data wait per step, and its step times.

Each rank's profiler output is read by :mod:`helpers.topics.rank_profile` (folders on disk) and
:mod:`helpers.topics.kernel_trace` (kernels split into steps). The rank's own metrics file adds the wall step time
and the time it waited for data, so ``other = step - data - compute - comm`` is what ran outside kernels (Python,
graph launch, gaps). A job profiles steps ``profile_skip_steps..``; the steps before ran without the profiler,
which gives the step time without it (:func:`unprofiled_step_s`) and the profiler's cost (:func:`overhead_ratio`).
The bytes AllReduce moves per step are measured on CPU (the framework file's input shapes); on a card the
collectives run on the device and are not in that file, so they are the job's gradient bytes, all reduced once
per step (``gradient_bytes``), and the mean bucket is those bytes over the gradient AllReduce calls counted (a
loss-scale cell adds one more per step, its overflow flag summed over the ranks, which carries no gradient).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from helpers.core.step_times import steady_step_s
from helpers.job.launch import JobResult, load_result
from helpers.topics.kernel_trace import op_type
from helpers.topics.rank_profile import RankProfile, rank_dirs, read_rank


def unprofiled_step_s(step_s, profiled_from: int | None = None, first_timed: int = 1) -> float:
    """Steady step time (median over steps of the ranks' mean) of steps ``first_timed .. profiled_from-1``: the
    ones a profiled job ran without the profiler (all steps after ``first_timed`` when ``profiled_from`` is None)."""
    a = np.asarray(step_s, dtype=float)
    end = a.shape[1] if profiled_from is None else profiled_from
    if not first_timed < end <= a.shape[1]:
        raise ValueError(f"no unprofiled steps after step {first_timed - 1} (job has {a.shape[1]} steps)")
    return steady_step_s(a[:, first_timed:end], skip=0, ranks="mean")


def job_step_s(result) -> float:
    """A finished job's steady step time without the profiler (its unprofiled steps after step 0)."""
    cfg = result.config
    return unprofiled_step_s(result.metric("step_s"), cfg.profile_skip_steps if cfg.profile else None)


def overhead_ratio(step_s, profiled_from: int, first_timed: int = 1) -> float:
    """Steady step time of profiled steps over that of unprofiled ones, same job (ranks' mean, median over steps).

    ``step_s`` is (ranks x steps); steps ``first_timed .. profiled_from-1`` ran without the profiler (step 0
    compiles the graph and is left out), steps ``profiled_from ..`` with it.
    """
    a = np.asarray(step_s, dtype=float)
    if not first_timed < profiled_from < a.shape[1]:
        raise ValueError(f"need unprofiled steps {first_timed}..{profiled_from - 1} and profiled ones after "
                         f"(job has {a.shape[1]} steps)")
    return (steady_step_s(a[:, profiled_from:], skip=0, ranks="mean")
            / unprofiled_step_s(a, profiled_from, first_timed))


@dataclass
class JobProfile:
    """Every rank's profiled steps, joined with its own metrics (wall step time, data wait)."""

    run_dir: Path
    ranks: dict[int, RankProfile]
    profiled_steps: list[int]                    # step indices of the job that were profiled
    step_s: np.ndarray                           # (ranks x profiled steps), from the metrics files
    data_s: np.ndarray
    gradient_bytes: list[int] = field(default_factory=list)   # the job's float32 gradients, one entry per tensor
    flag_allreduce_per_step: int = 0             # AllReduce calls per step without gradients (a loss scale's flag)

    def _per_rank(self, attr: str) -> np.ndarray:
        return np.array([[getattr(s, attr) for s in self.ranks[r].steps] for r in sorted(self.ranks)], float)

    @property
    def compute_s(self) -> np.ndarray:
        return self._per_rank("compute_s")

    @property
    def comm_s(self) -> np.ndarray:
        return self._per_rank("comm_s")

    @property
    def other_s(self) -> np.ndarray:
        return np.clip(self.step_s - self.data_s - self.compute_s - self.comm_s, 0.0, None)

    @property
    def allreduce_per_step(self) -> int:
        calls = self._per_rank("allreduce_calls")
        if calls.min() != calls.max():
            seen = sorted(set(calls.ravel()))
            raise ValueError(f"AllReduce calls per step differ across ranks/steps: {seen}")
        return int(calls[0, 0])

    @property
    def comm_share(self) -> float:
        """Communication time over wall step time, mean of the ranks' shares."""
        return float(self.comm_share_per_rank.mean())

    @property
    def comm_share_per_rank(self) -> np.ndarray:
        return self.comm_s.mean(axis=1) / self.step_s.mean(axis=1)

    @property
    def measured_mb_per_step(self) -> float | None:
        """Data one rank hands to AllReduce per step, from the framework file's shapes (CPU only; None elsewhere)."""
        elements = self.ranks[min(self.ranks)].allreduce_elements
        return 4.0 * sum(elements) / 2**20 if elements else None

    @property
    def gradient_mb(self) -> float | None:
        """The job's gradients (MB): what data parallel reduces once per step; None when not given."""
        return sum(self.gradient_bytes) / 2**20 if self.gradient_bytes else None

    @property
    def reduced_mb_per_step(self) -> float:
        """Gradient data one rank hands to AllReduce per step (MB): measured on CPU, else the gradients' size."""
        for mb in (self.measured_mb_per_step, self.gradient_mb):
            if mb is not None:
                return mb
        return math.nan

    def sizes_agree(self, rel: float = 0.01) -> bool | None:
        """Whether the measured bytes match the gradients' (within ``rel``: the measured side also holds any
        non-gradient AllReduce, e.g. a loss scale's overflow flag); None unless both are known (CPU)."""
        measured, grads = self.measured_mb_per_step, self.gradient_mb
        if measured is None or grads is None:
            return None
        return abs(measured - grads) <= rel * grads

    @property
    def gradient_allreduce_per_step(self) -> int:
        """AllReduce calls per step that reduce gradients: all of them but the loss-scale cell's overflow flag."""
        return self.allreduce_per_step - self.flag_allreduce_per_step

    @property
    def mean_bucket_mb(self) -> float:
        """Mean bytes per gradient AllReduce call (MB): the data reduced per step over those calls."""
        n = self.gradient_allreduce_per_step
        return self.reduced_mb_per_step / n if n > 0 else math.nan

    def kernel_types(self) -> dict[str, tuple[float, float]]:
        """Kernel type -> (executions per step, ms per step), means over ranks and profiled steps. GPU: the op table's
        MindSpore op types; Ascend: a device kernel counts as its framework op, an op's kernels once per step."""
        calls: Counter = Counter()
        ms: Counter = Counter()
        n = 0
        for rp in self.ranks.values():
            if rp.type_table:                     # GPU: per-type totals, already per step
                n += 1
                for t, (c, m) in rp.type_table.items():
                    calls[op_type(t)] += c
                    ms[op_type(t)] += m
                continue
            for ev in rp.step_events:
                n += 1
                launched = set()                  # Ascend: framework ops seen this step (one launch, 1+ kernels)
                for e in ev:
                    ms[e.op] += e.dur_us / 1e3
                    if e.framework in launched:
                        continue
                    calls[e.op] += 1
                    if e.framework:
                        launched.add(e.framework)
        return {t: (calls[t] / n, ms[t] / n) for t in sorted(calls, key=lambda t: -ms[t])}

    @property
    def has_timeline(self) -> bool:
        """False when only per-type op tables were read (a GPU job without ``activity_execute_timestamp_<dev>.txt``
        or whose kernels did not split into whole steps)."""
        return any(ev for rp in self.ranks.values() for ev in rp.step_events)

    def table(self) -> list[tuple]:
        """Per rank, means over the profiled steps: step, data, compute, comm, other (s), comm share."""
        rows = []
        for i, r in enumerate(sorted(self.ranks)):
            rows.append((r, float(self.step_s[i].mean()), float(self.data_s[i].mean()),
                         float(self.compute_s[i].mean()), float(self.comm_s[i].mean()),
                         float(self.other_s[i].mean()), float(self.comm_share_per_rank[i])))
        return rows

    TABLE_HEADERS = ("rank", "step (s)", "data wait (s)", "compute (s)", "communication (s)", "other (s)",
                     "comm share")

    def summary(self) -> dict:
        return dict(allreduce_per_step=self.allreduce_per_step, comm_share=self.comm_share,
                    step_s=float(self.step_s.mean()), compute_s=float(self.compute_s.mean()),
                    comm_s=float(self.comm_s.mean()), data_s=float(self.data_s.mean()),
                    reduced_mb_per_step=self.reduced_mb_per_step, mean_bucket_mb=self.mean_bucket_mb)


def read_job_profile(run, gradient_bytes=()) -> JobProfile:
    """Parse every rank of a profiled job. ``run`` is a ``JobResult`` or a run directory; ``gradient_bytes``, the
    job's gradient sizes, give the bytes reduced where the profile does not measure them (GPU, Ascend)."""
    result = run if isinstance(run, JobResult) else load_result(run)
    cfg = result.config
    if not cfg.profile:
        raise ValueError(f"{result.run_dir}: the job ran with profile=False")
    folders = rank_dirs(result.run_dir / "profile")
    missing = [r for r in range(cfg.world_size) if r not in folders]
    if missing:
        raise FileNotFoundError(f"{result.run_dir / 'profile'}: no profiler output for ranks {missing}")
    profiled = list(range(cfg.profile_skip_steps, cfg.steps))
    ranks = {r: read_rank(folders[r], r, n_steps=len(profiled), device_target=cfg.device_target)
             for r in range(cfg.world_size)}
    step_s = result.metric("step_s")[:, profiled]
    data_s = result.metric("data_s")[:, profiled]
    return JobProfile(result.run_dir, ranks, profiled, step_s, data_s, list(gradient_bytes),
                      overflow_flag_allreduces(result))


def overflow_flag_allreduces(result: JobResult) -> int:
    """AllReduce calls per step that carry a loss-scale cell's overflow flag: 1 when the step records an ``overflow``
    (the cell's ``(loss, overflow, scale)``, ``helpers.train.recipe.step_loss``), which under DATA_PARALLEL is summed
    over the ranks by one AllReduce (``nn.TrainOneStepWithLossScaleCell``), else 0."""
    steps = result.steps[min(result.steps)] if result.steps else []
    return int(any("overflow" in rec for rec in steps))


def job_comm_overlap(profile: "JobProfile") -> dict | None:
    """Rank 0's last profiled step's ``kernel_trace.comm_overlap`` (rank 0 compiled the graph, so its kernels keep
    their scope names: the other ranks load its graph, named without them) and the most overlap any rank had."""
    if 0 not in profile.ranks or not profile.ranks[0].step_events:
        return None
    from helpers.topics.kernel_trace import comm_overlap

    out = comm_overlap(profile.ranks[0].step_events[-1])
    out["max_overlap_ms_any_rank"] = max(comm_overlap(p.step_events[-1])["overlap_ms"]
                                         for p in profile.ranks.values() if p.step_events)
    return out

