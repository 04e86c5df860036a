"""Per-rank metrics files: one JSON line per step, then a summary (or a failure) line.

Workers append to ``<run_dir>/metrics/rank_<r>.jsonl`` and flush every line; the launcher tails the files
while the job runs (``MetricsTail``) and the notebooks plot from them. Record kinds (field ``event``):
``start``, ``ready``, ``step``, ``profile_analysis``, ``trained``, ``summary``, ``failure`` (beside them:
``beat_<r>.json``, ``helpers.train.heartbeat``; ``exit_<r>.json``, ``helpers.job.rank_guard``). Nothing is ever parsed out of free-text logs but error tails.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def metrics_path(run_dir: str | Path, rank: int) -> Path:
    """The rank's metrics file: ``<run_dir>/metrics/rank_<rank>.jsonl``."""
    return Path(run_dir) / "metrics" / f"rank_{rank}.jsonl"


class MetricsWriter:
    """Appends records for one rank; each line is flushed and fsync'ed so a crash loses nothing written."""

    def __init__(self, run_dir: str | Path, rank: int):
        self.rank = rank
        path = metrics_path(run_dir, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")

    def write(self, event: str, **fields) -> None:
        rec = {"event": event, "rank": self.rank, "time": time.time(), **fields}
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
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
