"""Chapter 04's first look, before the profiler: a job's own time split (sampled split steps) per rank, its straggler
verdict, and how its communication share compares with the profiler's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helpers.core.config import JobConfig
from helpers.job.launch import JobResult
from helpers.job.straggler import SPLIT_PARTS, StragglerVerdict, comm_wait_split, rank_time_split, step_comm_shares
from helpers.output.plots import time_split_bars
from helpers.output.tables import show_md
from helpers.train.time_split import SPLIT_EVERY_ENV

EVERY_STEP = {SPLIT_EVERY_ENV: "1"}   # the first look splits every step after the first (step 1 is left out)


def first_look_config(base: JobConfig, look_steps: int = 4) -> JobConfig:
    """The first look's job: ``base`` (the chapter's baseline) without the profiler, every step after the first
    split by the job itself, ``look_steps`` long and at least to ``base``'s first profiled step."""
    return base.replace(name="first_look", profile=False, env={**base.env, **EVERY_STEP},
                        steps=max(look_steps, base.profile_skip_steps + 1))


@dataclass
class FirstLook:
    """Per rank, mean seconds per step in ``SPLIT_PARTS`` over the job's split steps, the straggler verdict, and
    per split step the ranks' mean communication share."""

    result: JobResult
    verdict: StragglerVerdict
    ranks: list[int]
    seconds: np.ndarray
    step_shares: np.ndarray

    @property
    def comm_share(self) -> float:
        """Communication over the step, the ranks' mean (as ``JobProfile.comm_share``)."""
        return float(np.mean(self.seconds[:, 2] / self.seconds.sum(axis=1)))

    @property
    def comm_share_spread(self) -> float:
        """Standard deviation of the communication share from one split step to the next (0 with one step)."""
        return float(np.std(self.step_shares, ddof=1)) if len(self.step_shares) > 1 else 0.0

    def rows(self) -> list[tuple]:
        """(rank, data, compute, communication, other, comm share) per rank."""
        return [(r, *map(float, row), float(row[2] / row.sum())) for r, row in zip(self.ranks, self.seconds)]

    HEADERS = ("rank", *(f"{p} (s)" for p in SPLIT_PARTS), "comm share")


def read_first_look(result: JobResult) -> FirstLook:
    """A finished job's first look (its split steps must exist: run it with ``EVERY_STEP`` in its env)."""
    ranks, seconds, split = rank_time_split(result.steps)
    if not split:
        raise ValueError(f"{result.run_dir}: no split steps to read (was {SPLIT_EVERY_ENV} set in the job's env?)")
    return FirstLook(result, result.straggler, ranks, seconds, step_comm_shares(result.steps))


def plot_first_look(look: FirstLook):
    """A stacked bar per rank: where the first look's steps went."""
    return time_split_bars(look.ranks, look.seconds, SPLIT_PARTS,
                           "first look (no profiler): where each rank's step went", look.verdict.rank)


def first_look_values(look: FirstLook, profiler_comm_share: float) -> dict:
    """What chapter 04 records of the first look: its split, its verdict, its agreement with the profiler."""
    return dict(first_look_comm_share=look.comm_share, first_look_agreement=abs(look.comm_share - profiler_comm_share),
                first_look_spread=look.comm_share_spread,
                first_look_verdict=look.verdict.as_dict(), first_look_split=[list(r) for r in look.rows()],
                first_look_steps=look.verdict.steps, first_look_comm_wait=comm_wait_split(look.result.steps),
                first_look_job=look.result.config.name)


def show_first_look(job: JobResult, show_rows) -> FirstLook | None:
    """Shows each rank's split of ``job`` (``show_rows(rows, headers)``, then a stacked bar per rank) and the
    straggler verdict. None, with the reason shown, when the job recorded no split steps (a train step the split
    does not take apart: accumulation, the hybrid step)."""
    import matplotlib.pyplot as plt

    try:
        look = read_first_look(job)
    except ValueError as e:
        if "no split steps" not in str(e):
            raise
        show_md(f"**No first look for this run:** its train step is not one the time split takes apart, so its "
                f"verdict comes from data wait alone: {job.straggler.line()}")
        return None
    show_rows(look.rows(), look.HEADERS)
    show_md(f"**Verdict:** {look.verdict.line()}")
    plot_first_look(look)
    plt.show()
    return look
