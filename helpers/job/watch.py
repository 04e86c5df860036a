"""Watches a running job's records, exit files and heartbeats, and decides whether it failed, how and on which rank."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from helpers.train.heartbeat import read_beat
from helpers.core.metrics import MetricsTail
from helpers.job.stall import RankProgress, frozen_before, stalled_ranks, stuck_ranks
from helpers.core.errors import failure_kind

PROGRESS_EVENTS = ("start", "ready", "step", "profile_analysis", "trained", "summary")
VANISH_GRACE_S = 2.0    # a worker gone without an exit file or summary: wait this long for its records
SETTLE_S = 1.0          # after the first sign of failure, wait this long for the other ranks' records


@dataclass
class Verdict:
    """How a job failed: ``kind`` (helpers.core.errors.FAILURE_KINDS), the rank to blame (None: no single rank)."""

    kind: str
    rank: int | None
    message: str


def log_tail(run_dir: Path, rank: int | None, lines: int = 25) -> str:
    """Last lines of a rank's worker log (searched under logs/), or of msrun's output and its scheduler's log."""
    run_dir = Path(run_dir)
    if rank is None:
        candidates = sorted(run_dir.glob("msrun*.log")) + sorted((run_dir / "logs").rglob("scheduler.log"))
    else:
        candidates = sorted((run_dir / "logs").rglob(f"worker_{rank}.log"))
    text = []
    for path in candidates:
        body = path.read_text(errors="replace").strip().splitlines()[-lines:]
        text += [f"[{path.name}]"] + body if len(candidates) > 1 and body else body
    return "\n".join(text)


def worker_pids(procs) -> dict[int, int]:
    """rank -> pid of each rank's worker: the child of its rank guard (found by RANK_ID / MS_ROLE), whatever it runs."""
    out = {}
    for p in procs:
        try:
            children = psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for c in children:
            try:
                env, parent = c.environ(), c.parent()
                guarded = parent is not None and "helpers.job.rank_guard" in " ".join(parent.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if env.get("MS_ROLE") == "MS_WORKER" and "RANK_ID" in env and guarded:
                out.setdefault(int(env["RANK_ID"]), c.pid)
    return out


def alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def exit_text(rec: dict) -> tuple[str, str]:
    """(kind, message) for a rank whose process ended without a failure record."""
    sig = rec.get("signal")
    if rec.get("reason") == "launcher_gone":
        return "interrupted", "ended because the launching process (notebook kernel) died"
    if sig == "SIGKILL":
        return "killed", ("was killed by SIGKILL, often the system's out-of-memory killer "
                          "(see `dmesg | grep -i kill`); no Python error was raised")
    if sig:
        return "killed", f"was killed by {sig}"
    return "crash", f"exited with code {rec['returncode']} without a failure record"


class JobWatch:
    """Polls a running job (``poll()``) and returns a ``Verdict`` once it has failed (``verdict()``)."""

    def __init__(self, cfg, run_dir: Path, procs, bar):
        self.cfg, self.run_dir, self.procs, self.bar = cfg, Path(run_dir), procs, bar
        self.tail = MetricsTail(run_dir, range(cfg.world_size))
        start = time.time()
        self.progress = {r: RankProgress(start) for r in range(cfg.world_size)}
        self.step_times: list[float] = []
        self.summaries: dict[int, dict] = {}
        self.failures: dict[int, dict] = {}
        self.exits: dict[str, dict] = {}
        self.pids: dict[int, int] = {}
        self.vanished: dict[int, float] = {}
        self.first_sign: float | None = None

    @property
    def started(self) -> bool:
        return any(p.event is not None for p in self.progress.values())

    def poll(self) -> None:
        for rec in self.tail.poll():
            ev, r = rec["event"], rec["rank"]
            step = rec.get("job_step", rec.get("step"))     # job_step: counted across a job's phases
            if ev in PROGRESS_EVENTS:
                self.progress[r] = RankProgress(rec["time"], ev, self.progress[r].step if step is None else step)
            if ev == "step":
                self.step_times.append(rec["step_s"])
                self.bar.update(r, step + 1, rec["loss"])
            elif ev == "summary":
                self.summaries[r] = rec
            elif ev == "failure":
                self.failures.setdefault(r, rec)
        for path in (self.run_dir / "metrics").glob("exit_*.json"):
            who = path.stem[len("exit_"):]
            if who not in self.exits:
                try:
                    self.exits[who] = json.loads(path.read_text())
                except (OSError, ValueError):
                    pass
        if len(self.pids) < self.cfg.local_workers:
            self.pids.update(worker_pids(self.procs))
        now = time.monotonic()
        for r, pid in self.pids.items():
            if r not in self.summaries and r not in self.failures and not alive(pid):
                self.vanished.setdefault(r, now)

    def rank_exits(self) -> dict[int, dict]:
        """Bad exits of ranks that had not finished (a rank dying in MindSpore's teardown after its summary
        did its work: it is not a failure of the job)."""
        return {int(w): rec for w, rec in self.exits.items() if w.isdigit() and int(w) not in self.summaries}

    def signs(self) -> bool:
        """Any sign that the job failed: a failure record, a rank or the scheduler exiting badly, a vanished rank."""
        return bool(self.failures or self.rank_exits() or "scheduler" in self.exits or any(
            time.monotonic() - t >= VANISH_GRACE_S for t in self.vanished.values()))

    def verdict(self, final: bool = False) -> Verdict | None:
        """The failure, once its signs have settled (``final``: the job's processes are gone, decide now)."""
        if not self.signs():
            return None if not final else self._without_records()
        if self.first_sign is None:
            self.first_sign = time.monotonic()
        if not final and time.monotonic() - self.first_sign < SETTLE_S:
            return None
        self.poll()
        return self._blame()

    def stall(self) -> Verdict | None:
        """A hang: ranks that made no progress for longer than their limit (``helpers.job.stall``)."""
        now = time.time()
        stalled = stalled_ranks(self.cfg.stall_s, self.cfg.compile_stall_s, self.progress, self.step_times, now)
        if not stalled:
            return None
        beats = {r: read_beat(self.run_dir, r) for r in self.progress}
        stuck, why = stuck_ranks(stalled, self.progress, beats, now)
        lines = [f"rank {r}: no progress for {now - self.progress[r].time:.0f} s, {self.progress[r].describe()}, "
                 f"now at {(beats.get(r) or {}).get('ours') or 'an unknown place (no heartbeat)'}" for r in stuck]
        rank = stuck[0] if len(stuck) < len(self.progress) else None
        return Verdict("hang", rank, f"ranks {stuck} stopped making progress ({why}):\n  " + "\n  ".join(lines))

    def _blame(self) -> Verdict:
        events = {}
        for r, rec in self.failures.items():
            events[r] = rec["time"]
        for r, rec in self.rank_exits().items():
            events[r] = min(events.get(r, rec["time"]), rec["time"])
        first_time = min(events.values(), default=time.time())
        first = min(events, key=events.get) if events else None
        if first in self.failures and self.failures[first]["time"] <= events[first]:
            return Verdict(self.failures[first]["kind"], first, self.failures[first]["error"])   # a Python error came first
        beats = {r: read_beat(self.run_dir, r) for r in self.progress}
        stopped = frozen_before(self.progress, beats, first_time)
        if stopped:
            return Verdict("hang", stopped[0], f"ranks {stopped} stopped making progress (their heartbeat stopped "
                           f"{first_time - beats[stopped[0]]['time']:.0f} s before the job failed; msrun's own "
                           "heartbeat then ended the job)")
        sched = self.exits.get("scheduler")
        if sched and not self.started:
            return Verdict("crash", None, f"msrun's scheduler exited (code {sched['returncode']}) before any worker "
                           "started: see the scheduler's log below")
        if events:
            r = first
            kind, message = exit_text(self.rank_exits()[r])
            return Verdict(failure_kind(self._tail(r)) if kind == "crash" else kind, r, f"rank {r} {message}")
        return self._without_records()

    def _without_records(self) -> Verdict | None:
        if not self.started:
            codes = [p.returncode for p in self.procs]
            return Verdict("crash", None, f"msrun exited (codes {codes}) before any worker started: see msrun's log below")
        for r, _since in sorted(self.vanished.items(), key=lambda kv: kv[1]):
            return Verdict(failure_kind(self._tail(r)), r, "worker process exited without finishing (no summary)")
        return None

    def _tail(self, rank: int) -> str:
        return log_tail(self.run_dir, rank)
