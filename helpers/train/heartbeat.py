"""A rank's heartbeat: a thread that rewrites ``metrics/beat_<rank>.json`` every few seconds with where its main thread is.

The launcher's stall detector (``helpers.job.stall``) reads it to tell a rank that is stuck (its main thread
somewhere else than its peers, or no beat at all: a stopped or frozen process) from ranks that wait for it
inside a collective. It only observes: it never touches the training thread.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

BEAT_S = 2.0
_HELPERS = str(Path(__file__).resolve().parents[1])   # the helpers package: frames of the course's code


def beat_path(run_dir: str | Path, rank: int) -> Path:
    """The rank's heartbeat file: ``<run_dir>/metrics/beat_<rank>.json``."""
    return Path(run_dir) / "metrics" / f"beat_{rank}.json"


def where(frame, mine: tuple[str, ...] = ()) -> dict:
    """The innermost frame of the course's own code (``helpers/``, or the files ``mine``: a notebook cell run on the
    ranks) and the innermost frame of all."""
    inner = frame
    ours = None
    while frame is not None:
        name = frame.f_code.co_filename
        if ours is None and (name.startswith(_HELPERS) or name in mine):
            ours = frame
        frame = frame.f_back
    fmt = lambda f: f"{Path(f.f_code.co_filename).name}:{f.f_lineno} {f.f_code.co_name}" if f else None  # noqa: E731
    return {"ours": fmt(ours), "inner": fmt(inner)}


class Heartbeat:
    """``with Heartbeat(run_dir, rank): ...`` (the thread is a daemon: it dies with the rank)."""

    def __init__(self, run_dir: str | Path, rank: int, every_s: float = BEAT_S, ours: tuple[str, ...] = ()):
        self.path, self.every_s, self.ours = beat_path(run_dir, rank), every_s, tuple(ours)
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="course-heartbeat", daemon=True)

    def beat(self) -> None:
        frame = sys._current_frames().get(self._main)
        rec = {"time": time.time(), **(where(frame, self.ours) if frame else {})}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        os.replace(tmp, self.path)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.beat()
            except OSError:
                pass

    def start(self) -> None:
        """Write the first beat and start the thread (again: nothing)."""
        if self._thread.ident is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.beat()
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def __enter__(self) -> "Heartbeat":
        self.start()
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False


def read_beat(run_dir: str | Path, rank: int) -> dict | None:
    """The rank's last heartbeat, or None when there is none or it cannot be read."""
    try:
        return json.loads(beat_path(run_dir, rank).read_text())
    except (OSError, ValueError):
        return None
