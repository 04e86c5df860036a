"""Watches a running job's records, exit files, heartbeats and rank CPU time: whether it failed, how, on which rank."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from helpers.train.heartbeat import read_beat
from helpers.core.metrics import FOLLOW_ON_EVENT, MetricsTail
from helpers.core.footprint import HostPeak
from helpers.job.stall import (CpuActivity, RankProgress, frozen_before, quiet_before_first_step, stalled_ranks,
                               stopped_ranks, stuck_ranks)
from helpers.core.errors import failure_kind

PROGRESS_EVENTS = ("start", "ready", "step", "profile_analysis", "trained", "evaluating", FOLLOW_ON_EVENT, "summary")
VANISH_GRACE_S = 2.0    # a worker gone without an exit file or summary: wait this long for its records
SETTLE_S = 1.0          # after the first sign of failure, wait this long for the other ranks' records
RANK_GUARD = "helpers.job.rank_guard"    # the module msrun runs on every rank (python -m ...), the worker's parent
CHILDREN_EVERY_S = 5.0  # how often a rank's child processes are listed again (their CPU counts as the rank's)


@dataclass
class Verdict:
    """How a job failed: ``kind`` (helpers.core.errors.FAILURE_KINDS), the rank to blame (None: no single rank)."""

    kind: str
    rank: int | None
    message: str
    tail: str | None = None     # the log lines to show; None: the blamed rank's (or msrun's) log_tail


# Lines MindSpore writes as ERROR that are no failure: ``mindspore.runtime.synchronize()`` on CPU logs this
# (mindspore/runtime/device.py ``_is_supported``) and returns; the course skips it on CPU, a learner's cell may not.
NOT_ERRORS = ("CPU device is not supported. Please use correct device",)


def reported(lines: list[str]) -> list[str]:
    """A log's lines without MindSpore's harmless ERROR lines (NOT_ERRORS), which would read as the failure."""
    return [line for line in lines if not any(text in line for text in NOT_ERRORS)]


def _tails(paths: list[Path], lines: int, named: bool) -> list[str]:
    text = []
    for path in paths:
        try:
            body = reported(path.read_text(errors="replace").strip().splitlines())[-lines:]
        except OSError:
            continue
        text += [f"[{path.name}]"] + body if named and body else body
    return text


def log_tail(run_dir: Path, rank: int | None, lines: int = 25) -> str:
    """Last lines of a rank's worker log (searched under logs/), or of msrun's output and its scheduler's log."""
    run_dir = Path(run_dir)
    if rank is None:
        candidates = sorted(run_dir.glob("msrun*.log")) + sorted((run_dir / "logs").rglob("scheduler.log"))
    else:
        candidates = sorted((run_dir / "logs").rglob(f"worker_{rank}.log"))
    return "\n".join(_tails(candidates, lines, len(candidates) > 1))


def node_log_tail(run_dir: Path, node: int, name: str, lines: int = 8) -> str:
    """What one node of a multi-node job wrote last (its ``msrun<node>.log`` and ``logs/node<node>/*.log``), or
    that nothing of it could be read here: the lost node's own words, not node 0's."""
    run_dir = Path(run_dir)
    logs = sorted((run_dir / "logs" / f"node{node}").glob("*.log"),
                  key=lambda p: (not p.stem.startswith("worker_"), len(p.stem), p.stem))
    paths = [p for p in [run_dir / f"msrun{node}.log", *logs] if p.exists()]
    text = "\n".join(f"[{p.relative_to(run_dir)}]\n" + "\n".join(_tails([p], lines, False)) for p in paths)
    return text or (f"nothing of node {name} could be read here (no msrun{node}.log or logs/node{node}/ in "
                    f"{run_dir}: the run directory is not shared, or the node never started its msrun)")


def worker_pids(procs) -> dict[int, int]:
    """rank -> pid of each rank's worker: the child of its rank guard (found by RANK_ID / MS_ROLE), whatever it runs.

    msrun's other children carry the same variables: the guards, and a ``tail -f`` of each worker log."""
    out = {}
    for p in procs:
        try:
            children = psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for c in children:
            try:
                env, parent = c.environ(), c.parent()
                guarded = parent is not None and runs_module(parent.cmdline(), RANK_GUARD)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if env.get("MS_ROLE") == "MS_WORKER" and "RANK_ID" in env and guarded:
                out.setdefault(int(env["RANK_ID"]), c.pid)
    return out


def runs_module(cmdline: list[str], module: str) -> bool:
    """True when ``cmdline`` is ``python [-options] -m module ...`` (msrun's own command line only names it)."""
    args = cmdline[1:]
    while args and args[0].startswith("-") and args[0] != "-m":
        args = args[1:]
    return args[:2] == ["-m", module]


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


class CpuMeter:
    """Each rank's CPU seconds so far (its worker process and that process's children, e.g. compile or data workers)
    and whether the worker is stopped by a signal, read with psutil from the launcher (no help from the rank)."""

    def __init__(self):
        self._procs: dict[int, psutil.Process] = {}
        self._kids: dict[int, tuple[float, list]] = {}
        self._cpu: dict[int, dict[int, float]] = {}       # rank -> pid -> the most CPU seconds seen for that pid

    def read(self, rank: int, pid: int, now: float) -> tuple[float, bool] | None:
        """(CPU seconds, stopped) of ``rank``'s worker ``pid``; None once the process is gone."""
        try:
            proc = self._procs.get(rank)
            if proc is None or proc.pid != pid:
                proc = self._procs[rank] = psutil.Process(pid)
            with proc.oneshot():
                stopped = proc.status() == psutil.STATUS_STOPPED
                seen = self._cpu.setdefault(rank, {})
                seen[pid] = max(seen.get(pid, 0.0), sum(proc.cpu_times()[:2]))
            listed, kids = self._kids.get(rank, (-1e18, []))
            if now - listed >= CHILDREN_EVERY_S:
                kids = proc.children(recursive=True)
                self._kids[rank] = (now, kids)
        except psutil.Error:
            return None
        for kid in kids:
            try:
                seen[kid.pid] = max(seen.get(kid.pid, 0.0), sum(kid.cpu_times()[:2]))
            except psutil.Error:
                pass
        return sum(seen.values()), stopped


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
        self.cpu, self.activity = CpuMeter(), CpuActivity()
        self.host = HostPeak()          # msrun, its scheduler and ranks: their footprint, sampled at each poll

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
                self.bar.update(r, step + 1, rec["loss"], rec)
            elif ev == FOLLOW_ON_EVENT and "more" in rec:     # another job of the launch: its own steps
                self.bar.job(r, rec.get("name") if rec["more"] else "after the cell", rec.get("steps", 0))
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
        self.host.sample([p.pid for p in self.procs])
        if len(self.pids) < self.cfg.local_workers:
            self.pids.update(worker_pids(self.procs))
        now, wall = time.monotonic(), time.time()
        for r, pid in self.pids.items():
            if r not in self.summaries and r not in self.failures and not alive(pid):
                self.vanished.setdefault(r, now)
            reading = self.cpu.read(r, pid, wall)
            if reading:
                self.activity.observe(r, wall, *reading)

    def rank_exits(self) -> dict[int, dict]:
        """Bad exits of ranks that had not finished (a rank dying in MindSpore's teardown after its summary
        did its work: it is not a failure of the job)."""
        return {int(w): rec for w, rec in self.exits.items() if w.isdigit() and int(w) not in self.summaries}

    def signs(self) -> bool:
        """Any sign that the job failed: a failure record, a rank or the scheduler exiting badly, a vanished rank."""
        scheduler = self.exits.get("scheduler", {}).get("reason") not in (None, "after_summary")
        return bool(self.failures or self.rank_exits() or scheduler or any(
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
        """A hang (``helpers.job.stall``): ranks without progress for longer than their limit, a rank process
        stopped by a signal, or, before the first step, every rank still there idle (no CPU, no record)."""
        now = time.time()
        idle = self.activity.idle_since(self.progress)
        stopped = [r for r in stopped_ranks(self.activity.stopped_since, now) if self.progress[r].event != "summary"]
        stalled = sorted(set(stalled_ranks(self.cfg.stall_s, self.cfg.compile_stall_s, self.progress,
                                           self.step_times, now))
                         | set(quiet_before_first_step(self.progress, idle, now)) | set(stopped))
        if not stalled or self._unsettled(stalled):
            return None
        beats = {r: read_beat(self.run_dir, r) for r in self.progress}
        stuck, why = stuck_ranks(stalled, self.progress, beats, now, idle, stopped)
        lines = [self._stuck_line(r, beats.get(r) or {}, idle, now) for r in stuck]
        rank = stuck[0] if len(stuck) < len(self.progress) else None
        return Verdict("hang", rank, f"ranks {stuck} stopped making progress ({why}):\n  " + "\n  ".join(lines))

    def _unsettled(self, stalled: list[int]) -> bool:
        """Ranks whose last progress (a step, an evaluation's) came less than ``stall_s / 2`` after the stalled ranks'
        last progress are neither stalled nor moving yet: under load one step's records land seconds apart, and the
        first ranks past the limit are not the ones that hold the job up (a Slurm run named the waiting ranks 0 and 3
        for hung rank 2; with the evaluation graphs shared, the ranks waiting in its AllReduce for a rank hung in
        the evaluation wrote their last record 0.1 s after it and 0.1 s before two others)."""
        last = max(self.progress[r].time for r in stalled)
        return any(p.event not in (None, "summary") and p.time < last + self.cfg.stall_s / 2
                   for r, p in self.progress.items() if r not in stalled)

    def _stuck_line(self, r: int, beat: dict, idle: dict[int, float], now: float) -> str:
        """One stuck rank: how long without a record, its CPU (or stopped process), where its main thread is."""
        cpu = (f"its process stopped {now - self.activity.stopped_since[r]:.0f} s ago"
               if r in self.activity.stopped_since else
               f"CPU idle for {now - idle[r]:.0f} s" if r in idle else "CPU not observed")
        place = beat.get("ours") or "an unknown place (no heartbeat)"
        if beat.get("inner") and beat.get("inner") != beat.get("ours"):
            place += f" (innermost: {beat['inner']})"
        return f"rank {r}: no progress for {now - self.progress[r].time:.0f} s, {self.progress[r].describe()}, " \
               f"{cpu}, now at {place}"

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
        held = sorted(r for r, t in self.activity.stopped_since.items() if t <= first_time)
        if held:
            return Verdict("hang", held[0], f"ranks {held} stopped making progress (their process was stopped by a "
                           "signal before the job failed; msrun's own heartbeat then ended the job)")
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
            return Verdict(failure_kind(self._tail(r), self.cfg.caps_address_space) if kind == "crash" else kind, r,
                           f"rank {r} {message}")
        return self._without_records()

    def _without_records(self) -> Verdict | None:
        if not self.started:
            codes = [p.returncode for p in self.procs]
            return Verdict("crash", None, f"msrun exited (codes {codes}) before any worker started: see msrun's log below")
        for r, _since in sorted(self.vanished.items(), key=lambda kv: kv[1]):
            return Verdict(failure_kind(self._tail(r), self.cfg.caps_address_space), r,
                           "worker process exited without finishing (no summary)")
        return None

    def _tail(self, rank: int) -> str:
        return log_tail(self.run_dir, rank)
