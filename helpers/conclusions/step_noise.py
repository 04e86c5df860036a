"""Whether two settings' step times differ by more than the jobs' own step-to-step noise (chapters 02-04).

A setting's figure is the median of its job's timed steps. Two settings are ranked only when their ratio is
further from 1 than the band: ``SPREAD_WIDTH`` x the larger relative step-to-step spread (sample std over the
median) of the two jobs, or the chapter's own floor if larger. The spread is not divided by sqrt(steps) on
purpose: the two jobs ran at different times on a shared machine, whose load moves between jobs by more than the
standard error of one job's median. With fewer than 2 timed steps in a job the spread is not measured: the
sentence says so, only the floor applies, and with no floor nothing is ranked (``tie`` is then "not ranked").
"""

from __future__ import annotations

import numpy as np

from helpers.core.step_times import per_step_s

SPREAD_WIDTH = 2.0      # a ranked difference exceeds twice the larger job's step-to-step spread
THROUGHPUT_FLOOR = 0.05  # two jobs' img/s within 5 % are a tie whatever their steps' spread (a shared machine)


def per_step(step_s, start: int = 1, end: int | None = None, ranks: str = "slowest") -> list[float]:
    """Each timed step's time, the series ``helpers.core.step_times.steady_step_s`` takes the median of
    (``per_step_s``: steps ``start..end-1``, the slowest rank's or the ranks' mean), as a list for the records."""
    return [float(x) for x in per_step_s(step_s, start, ranks, end)]


def unprofiled_steps(result) -> list[float]:
    """A finished job's unprofiled steps after step 0, the ranks' mean per step: the series behind
    ``helpers.topics.profiling.job_step_s`` (``result``: a ``JobResult``)."""
    cfg = result.config
    return per_step(result.metric("step_s"), 1, cfg.profile_skip_steps if cfg.profile else None, ranks="mean")


def relative_spread(steps) -> float | None:
    """Sample std of a job's per-step times over their median; None with fewer than 2 steps (not measured)."""
    v = np.asarray(steps, dtype=float)
    return float(v.std(ddof=1) / np.median(v)) if v.size > 1 else None


def compare(ratio: float, *series, floor: float = 0.0) -> dict:
    """A ratio of two settings' figures against the noise of the jobs' per-step ``series``: the larger relative
    spread (None when a job had fewer than 2 timed steps), the band, whether ``ratio`` is outside it (``ranked``)
    and the fewest timed steps of a job."""
    spreads = [relative_spread(s) for s in series]
    spread = None if None in spreads else max(spreads)
    band = max(floor, SPREAD_WIDTH * spread if spread is not None else 0.0)
    return _verdict(dict(ratio=ratio, spread=spread, band=band, steps=min(len(s) for s in series), unit="%"),
                    abs(ratio - 1))


def step_shares(profile) -> list[float]:
    """A profiled job's communication share of each profiled step, the ranks' mean (``profile``: a ``JobProfile``,
    whose ``comm_share`` averages over steps first); only that share when the profile's steps do not line up with
    the timed ones (a profile read from per-type tables, without a kernel timeline)."""
    comm, step = np.asarray(profile.comm_s, dtype=float), np.asarray(profile.step_s, dtype=float)
    if comm.shape != step.shape:
        return [float(profile.comm_share)]
    return [float(x) for x in (comm / step).mean(axis=0)]


def compare_shares(diff: float, *series) -> dict:
    """A difference of two shares of the step against the per-step shares' noise, in points: the larger sample std
    of a job's ``series`` (None with fewer than 2 steps), ``SPREAD_WIDTH`` x it as the band, ``ranked``."""
    spreads = [float(np.std(s, ddof=1)) if len(s) > 1 else None for s in series]
    spread = None if None in spreads else max(spreads)
    band = SPREAD_WIDTH * spread if spread is not None else 0.0
    return _verdict(dict(diff=diff, spread=spread, band=band, steps=min(len(s) for s in series), unit="points"),
                    abs(diff))


def _verdict(c: dict, gap: float) -> dict:
    """``ranked``: the gap is outside the band, and there is a band (a measured spread or a floor); ``tie``: the
    words for an unranked comparison."""
    measured = c["spread"] is not None or c["band"] > 0
    return dict(c, ranked=bool(measured and gap > c["band"]), tie="within noise" if measured else "not ranked")


def _amount(x: float, unit: str) -> str:
    return f"{x:.1%}" if unit == "%" else f"{100 * x:.1f} points"


def noise_words(c: dict, runs: str = "one run") -> str:
    """How noisy the comparison was, for a sentence: "one run; step-to-step spread ±3.1% (at least 4 steps a job),
    ranked beyond 6.2%" or, when a job had one timed step, that its spread was not measured."""
    if c["spread"] is None:
        return (f"{runs}; one timed step in a job, so the step-to-step spread was not measured"
                + (f", ranked beyond {_amount(c['band'], c['unit'])}" if c["band"] else ""))
    return (f"{runs}; step-to-step spread ±{_amount(c['spread'], c['unit'])} (at least {c['steps']} steps a job), "
            f"ranked beyond {_amount(c['band'], c['unit'])}")
