"""Per-rank metrics files: one JSON line per step, then a summary (or a failure) line.

Workers append to ``<run_dir>/metrics/rank_<r>.jsonl`` and flush every line (step lines reach the disk within
``SYNC_EVERY_S``, every other line at once: ``MetricsWriter``); the launcher tails the files
while the job runs (``MetricsTail``) and the notebooks plot from them. Record kinds (field ``event``):
``start``, ``ready``, ``step``, ``profile_analysis``, ``trained``, ``summary``, ``failure`` (beside them:
``beat_<r>.json``, ``helpers.train.heartbeat``; ``exit_<r>.json``, ``helpers.job.rank_guard``). Nothing is ever parsed out of free-text logs but error tails.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path


def metrics_path(run_dir: str | Path, rank: int) -> Path:
    """The rank's metrics file: ``<run_dir>/metrics/rank_<rank>.jsonl``."""
    return Path(run_dir) / "metrics" / f"rank_{rank}.jsonl"


SYNC_EVERY_S = 1.0   # a step line reaches the disk (fsync) this long after it was written, at most
STEP_EVENT = "step"
FOLLOW_ON_EVENT = "follow_on"    # a rank starts a ``%%ranks --then`` job after its cell (a progress event)
MORE_SUMMARY_EVENT = "more_summary"   # a chain's further job ended on this rank: its summary (``FollowOn.more``)
THEN_ENV = "COURSE_CELL_THEN"    # "1" in a ``%%ranks ... --then JOB`` job: the ranks run its worker task after the cell


class MetricsWriter:
    """Appends records for one rank. Every line is flushed, so the launcher on this host reads it at once and a crash
    of the rank loses nothing written. A ``step`` line is fsync'ed by a background thread within ``sync_every_s``
    (what readers on other nodes of a shared filesystem wait for: the watchdog's progress), every other line before
    ``write`` returns; an fsync per step line took 3-14 ms of the step loop on a loaded 2-core machine (issue 31)."""

    def __init__(self, run_dir: str | Path, rank: int, sync_every_s: float = SYNC_EVERY_S):
        self.rank, self.sync_every_s = rank, sync_every_s
        path = metrics_path(run_dir, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._written = self._synced = 0     # lines written / lines known to be on disk
        self._syncer: threading.Thread | None = None

    def write(self, event: str, **fields) -> None:
        rec = {"event": event, "rank": self.rank, "time": time.time(), **fields}
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()
        self._written += 1
        if event != STEP_EVENT or self.sync_every_s <= 0:
            self.sync()
        elif self._syncer is None:
            self._syncer = threading.Thread(target=self._sync_loop, name="metrics-fsync", daemon=True)
            self._syncer.start()

    def sync(self) -> None:
        """fsync what has been written (flushed lines are in the kernel already: this puts them on the disk)."""
        with self._lock:
            written = self._written
            if not self._f.closed and written != self._synced:
                os.fsync(self._f.fileno())
                self._synced = written

    @property
    def unsynced(self) -> int:
        """Lines written but not yet fsync'ed."""
        return self._written - self._synced

    def _sync_loop(self) -> None:
        while not self._stop.wait(self.sync_every_s):
            try:
                self.sync()
            except OSError:   # the disk refused: the next write's flush raises in the training thread
                pass

    def close(self) -> None:
        self._stop.set()
        self.sync()
        with self._lock:
            self._f.close()


def read_records(path: str | Path) -> list[dict]:
    """All complete records of one file (a half-written last line is ignored)."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out


class MetricsTail:
    """Incrementally reads every rank's file; ``poll()`` returns the records that are new since last time."""

    def __init__(self, run_dir: str | Path, ranks):
        self._paths = {r: metrics_path(run_dir, r) for r in ranks}
        self._offsets = {r: 0 for r in ranks}

    def poll(self) -> list[dict]:
        new = []
        for rank, path in self._paths.items():
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets[rank])
                    chunk = f.read()
            except FileNotFoundError:
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self._offsets[rank] += end + 1
            for line in chunk[: end + 1].decode("utf-8").splitlines():
                new.append(json.loads(line))
        return new
