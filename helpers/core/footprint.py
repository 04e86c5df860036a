"""A process tree's host memory at one moment, and its peak over a run: what the course measures per job and chapter.

Footprint = the private resident memory of every process (RSS less its file-backed and shared pages) plus the
largest shared part once (the same MindSpore libraries mapped in every rank): close to the sum of PSS (measured
2,523 vs 2,373 MB on a ci job) at the cost of a ``statm`` read per process; the plain RSS sum (which counts the
libraries once per process, 4,929 MB there) is kept beside it as ``peak_rss_sum_mb``, an upper bound.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

MIB = 2 ** 20


def footprint(procs) -> tuple[float, float]:
    """(footprint, RSS sum) of ``procs`` in MB, read at one moment (the module docstring says what each counts)."""
    private = rss = shared = 0
    for p in procs:
        try:
            mi = p.memory_info()
        except psutil.Error:
            continue
        private, rss, shared = private + mi.rss - mi.shared, rss + mi.rss, max(shared, mi.shared)
    return (private + shared) / MIB, rss / MIB


def tree(pids) -> list[psutil.Process]:
    """Processes ``pids`` and all their descendants (each once)."""
    found = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            found.update((p.pid, p) for p in [root] + root.children(recursive=True))
        except psutil.Error:
            continue
    return list(found.values())


class HostPeak:
    """The largest footprint of a process tree seen so far (``sample``; RSS sum beside it), and when it was seen."""

    def __init__(self):
        self.peak_mb, self.peak_rss_sum_mb, self.at, self.samples = 0.0, 0.0, None, 0

    def sample(self, pids) -> float:
        """Read the trees of ``pids`` now; returns their footprint (MB)."""
        now, rss = footprint(tree(pids))
        self.samples += 1
        self.peak_rss_sum_mb = max(self.peak_rss_sum_mb, rss)
        if now > self.peak_mb:
            self.peak_mb, self.at = now, time.time()
        return now

    def record(self) -> dict:
        return dict(peak_host_mb=round(self.peak_mb, 1), peak_rss_sum_mb=round(self.peak_rss_sum_mb, 1),
                    peak_at=self.at, samples=self.samples)

    def save(self, path: Path, **extra) -> None:
        Path(path).write_text(json.dumps({**self.record(), **extra}))


@contextmanager
def sampling(pids, every_s: float = 0.5):
    """Sample the trees of ``pids`` (a callable returning them, or a list) in a thread; yields the ``HostPeak``."""
    peak, stop = HostPeak(), threading.Event()

    def loop():
        while not stop.is_set():
            peak.sample(pids() if callable(pids) else pids)
            stop.wait(every_s)

    thread = threading.Thread(target=loop, name="host-memory", daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
