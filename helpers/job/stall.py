"""Decide from the ranks' records and heartbeats whether a job is stuck, and which ranks hold it up."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

STEP_FACTOR = 10         # a rank is stalled after max(stall_s, STEP_FACTOR x the median step so far) without a step
STALE_BEAT_S = 10.0      # a heartbeat older than this (beats come every 2 s): the process is stopped or frozen


@dataclass
class RankProgress:
    """A rank's last progress record: its wall time, its event (``start``, ``ready``, ``step``, ...), its step."""

    time: float
    event: str | None = None
    step: int | None = None

    def describe(self) -> str:
        if self.event is None:
            return "no record yet"
        return f"last record '{self.event}'" + (f" (step {self.step})" if self.step is not None else "")


def stall_limit(stall_s: float, compile_stall_s: float, progress: RankProgress, step_times: list[float]) -> float:
    """Seconds without progress after which a rank counts as stalled: compile allowance before its first step."""
    if progress.event != "step":
        return compile_stall_s
    median = float(np.median(step_times)) if step_times else 0.0
    return max(stall_s, STEP_FACTOR * median)


def stalled_ranks(stall_s: float, compile_stall_s: float, progress: dict[int, RankProgress],
                  step_times: list[float], now: float) -> list[int]:
    """Ranks (not yet finished) that made no progress for longer than their limit."""
    return [r for r, p in sorted(progress.items()) if p.event != "summary"
            and now - p.time > stall_limit(stall_s, compile_stall_s, p, step_times)]


def frozen_ranks(ranks, beats: dict[int, dict | None], now: float) -> list[int]:
    """Ranks whose heartbeat is missing or stale: the whole process is stopped (SIGSTOP) or frozen."""
    return [r for r in ranks if not beats.get(r) or now - beats[r]["time"] > STALE_BEAT_S]


def _ranges(ranks) -> str:
    return ", ".join(map(str, ranks))


def stuck_ranks(stalled: list[int], progress: dict[int, RankProgress], beats: dict[int, dict | None],
                now: float) -> tuple[list[int], str]:
    """Which of the stalled ranks hold the job up, and the evidence, tried from the strongest sign down."""
    moving = [r for r in progress if r not in stalled and progress[r].event != "summary"]
    if moving:
        return stalled, f"ranks {_ranges(moving)} kept making progress"
    steps = {r: -1 if progress[r].step is None else progress[r].step for r in stalled}
    if len(set(steps.values())) > 1:
        low = min(steps.values())
        behind = [r for r in stalled if steps[r] == low]
        return behind, f"the other ranks finished more steps ({max(steps.values()) + 1} against {low + 1})"
    frozen = frozen_ranks(stalled, beats, now)
    if frozen and len(frozen) < len(stalled):
        return frozen, "their heartbeat stopped (the process is stopped or frozen), the others' did not"
    places = {r: (beats.get(r) or {}).get("ours") for r in stalled}
    counts = Counter(places.values())
    if len(counts) > 1:
        common, _ = counts.most_common(1)[0]
        odd = [r for r in stalled if places[r] != common]
        return odd, f"the other ranks wait at {common} (inside the train step and its collectives)"
    return stalled, f"every rank is waiting at {next(iter(counts))}"


def frozen_before(ranks, beats: dict[int, dict | None], when: float) -> list[int]:
    """Ranks whose heartbeat had stopped well before ``when`` (the job's first failure) while others still beat:
    the rank msrun's own heartbeat then dropped was stuck, not crashed."""
    alive_then = [r for r in ranks if beats.get(r) and beats[r]["time"] >= when - STALE_BEAT_S]
    stopped = [r for r in ranks if beats.get(r) and beats[r]["time"] < when - STALE_BEAT_S]
    return stopped if alive_then and stopped else []
