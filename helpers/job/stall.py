"""Decide from the ranks' records, heartbeats and CPU time whether a job is stuck, and which ranks hold it up."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

STEP_FACTOR = 10         # a rank is stalled after max(stall_s, STEP_FACTOR x the median step so far) without a step
STALE_BEAT_S = 10.0      # a heartbeat older than this (beats come every 2 s): the process is stopped or frozen
# Before the first step the records cannot tell compiling from stuck; the rank's CPU time can. Measured on 2 cores
# (ci and cpu presets, 4 and 8 ranks, cold compile): a compiling rank used 0.08-0.9 CPU s per second; a rank
# stopped, sleeping in Python or waiting in a CPU collective (they sleep, not spin) used at most 0.02 s in any 10 s.
BUSY_WINDOW_S = 10.0     # CPU use is judged over this trailing window
BUSY_CPU_S = 0.1         # at least this much CPU time in the window: the rank is working (compiling, loading data)
QUIET_S = 30.0           # every rank before its first step idle (no CPU, no record) this long: the job is stuck
STOPPED_S = 10.0         # a rank process stopped by a signal (state T) this long: stuck, whatever its peers do
QUIET_MARGIN_S = 5.0     # a rank idle this much earlier than all the others went quiet first (they waited for it)
BEFORE_FIRST_STEP = (None, "start", "ready")     # progress events of a rank that has not finished a step yet


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


class CpuActivity:
    """Per rank, when its CPU time last moved (``last_busy``) and since when its process is stopped, from samples
    ``observe(rank, time, cpu_seconds, stopped)`` (the launcher reads them with psutil: ``helpers.job.watch``)."""

    def __init__(self, window_s: float = BUSY_WINDOW_S, busy_cpu_s: float = BUSY_CPU_S):
        self.window_s, self.busy_cpu_s = window_s, busy_cpu_s
        self.last_busy: dict[int, float] = {}
        self.stopped_since: dict[int, float] = {}
        self._samples: dict[int, deque] = {}

    def observe(self, rank: int, t: float, cpu_s: float, stopped: bool = False) -> None:
        q = self._samples.setdefault(rank, deque())
        q.append((t, cpu_s))
        while len(q) > 2 and q[1][0] <= t - self.window_s:
            q.popleft()                   # keep one sample at least a window old
        if cpu_s - q[0][1] >= self.busy_cpu_s and not stopped:
            self.last_busy[rank] = t
        if stopped:
            self.stopped_since.setdefault(rank, t)
        else:
            self.stopped_since.pop(rank, None)

    def idle_since(self, progress: dict[int, "RankProgress"]) -> dict[int, float]:
        """Per rank seen working at least once (a worker imports MindSpore; a process that never works is not one):
        the later of its last CPU activity and its last record."""
        return {r: max(t, progress[r].time) for r, t in self.last_busy.items() if r in progress}


def quiet_before_first_step(progress: dict[int, RankProgress], idle_since: dict[int, float], now: float,
                            quiet_s: float = QUIET_S) -> list[int]:
    """The ranks still before their first step once every one of them has been idle for ``quiet_s``.

    Before its first step a rank may wait in a collective only for a peer that is itself still getting there
    (compiling, loading data), and that peer's CPU moves; when none moves, none will. Judged only once every
    rank has left ``init()`` (its first record): one still in it sleeps between attempts to register with msrun's
    scheduler (seen for 40 s on 2 cores, its peers idle past it meanwhile). Every rank must also be observed
    (a remote node's are not)."""
    if any(p.event is None for p in progress.values()):
        return []
    before = [r for r, p in sorted(progress.items()) if p.event in BEFORE_FIRST_STEP]
    if not before or any(r not in idle_since for r in before):
        return []
    return before if all(now - idle_since[r] > quiet_s for r in before) else []


def stopped_ranks(stopped_since: dict[int, float], now: float, stopped_s: float = STOPPED_S) -> list[int]:
    """Ranks whose process has been stopped by a signal (SIGSTOP, state T) for ``stopped_s``."""
    return sorted(r for r, t in stopped_since.items() if now - t >= stopped_s)


def stall_limit(stall_s: float, compile_stall_s: float, progress: RankProgress, step_times: list[float]) -> float:
    """Seconds without progress after which a rank counts as stalled: the compile allowance before its first step
    and after a record that is not a step (an evaluation's progress, a profile's analysis), else the step limit."""
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
                now: float, idle_since: dict[int, float] | None = None,
                stopped: list[int] = ()) -> tuple[list[int], str]:
    """Which of the stalled ranks hold the job up, and the evidence, tried from the strongest sign down."""
    held = [r for r in stalled if r in stopped]
    if held:
        return held, "their process is stopped by a signal: state T, e.g. kill -STOP or a job suspend"
    moving = [r for r in progress if r not in stalled and progress[r].event != "summary"]
    if moving:
        return stalled, f"ranks {_ranges(moving)} kept making progress"
    done = [r for r in progress if r not in stalled and progress[r].event == "summary"]
    if done:
        return stalled, f"ranks {_ranges(done)} finished and wait for them"
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
    common, most = counts.most_common(1)[0]
    if len(counts) > 1 and most > len(stalled) - most:          # a strict majority waits at one place
        odd = [r for r in stalled if places[r] != common]
        return odd, f"the other ranks wait at {common} (inside the train step and its collectives)"
    first = went_quiet_first(stalled, idle_since or {})
    if first:
        return first, "their CPU stopped first; the others worked on, then waited for them"
    return stalled, f"every rank is waiting at {next(iter(counts))}"


def went_quiet_first(stalled: list[int], idle_since: dict[int, float], margin_s: float = QUIET_MARGIN_S) -> list[int]:
    """The earliest ranks to go idle, when the next one went idle at least ``margin_s`` later ([] otherwise)."""
    known = {r: idle_since[r] for r in stalled if r in idle_since}
    if len(known) < max(2, len(stalled)):
        return []
    times = sorted(known.values())
    for a, b in zip(times, times[1:]):
        if b - a >= margin_s:
            return [r for r in stalled if known[r] <= a]
    return []


def frozen_before(ranks, beats: dict[int, dict | None], when: float) -> list[int]:
    """Ranks whose heartbeat had stopped well before ``when`` (the job's first failure) while others still beat:
    the rank msrun's own heartbeat then dropped was stuck, not crashed."""
    alive_then = [r for r in ranks if beats.get(r) and beats[r]["time"] >= when - STALE_BEAT_S]
    stopped = [r for r in ranks if beats.get(r) and beats[r]["time"] < when - STALE_BEAT_S]
    return stopped if alive_then and stopped else []
