"""The one way the course turns per-rank step times into a steady step time and a throughput."""

from __future__ import annotations

import numpy as np

RANK_REDUCTIONS = ("slowest", "mean")


def per_step_s(step_s, skip: int = 1, ranks: str = "slowest", end: int | None = None) -> np.ndarray:
    """Each step's time over steps ``skip..end-1``: its slowest rank's (a data-parallel step ends when its slowest
    rank does) or the ranks' mean (``ranks="mean"``: where one rank's time goes). ``step_s`` is (ranks x steps);
    step 0 compiles the graph, hence ``skip=1``; with no step after ``skip`` all are used."""
    if ranks not in RANK_REDUCTIONS:
        raise ValueError(f"ranks must be one of {RANK_REDUCTIONS}, not {ranks!r}")
    a = np.atleast_2d(np.asarray(step_s, dtype=float))
    if a.size == 0:
        raise ValueError("no step times")
    if a.shape[1] > skip:
        a = a[:, skip:end]
    return a.max(axis=0) if ranks == "slowest" else a.mean(axis=0)


def steady_step_s(step_s, skip: int = 1, ranks: str = "slowest", fastest: bool = False) -> float:
    """The median of ``per_step_s`` (the fastest such step with ``fastest``): a job's steady step time."""
    steps = per_step_s(step_s, skip, ranks)
    return float(steps.min() if fastest else np.median(steps))


def img_per_s(step_s, global_batch: int, skip: int = 1) -> float:
    """Images per second of a job: the global batch over its steady (slowest-rank) step time."""
    return float(global_batch / steady_step_s(step_s, skip))


def phase_step_s(step_s, skip: int = 0) -> float:
    """A short run's wall seconds per step: the slowest rank's steps averaged, the first (its pipeline start and
    first batch) included unless ``skip``-ped (a step that built the graph), so the data a rank reads before its
    first step counts too."""
    return float(per_step_s(step_s, skip=skip).mean())
