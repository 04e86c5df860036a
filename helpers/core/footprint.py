"""A process tree's host memory at one moment, and its peak over a run: what the course measures per job and chapter.

The peak is the sum of PSS (each resident page split between the processes that map it: the MindSpore libraries
every rank maps, and the copy-on-write pages a rank shares with the children it forks, e.g. the profiler's
analysis, are counted once). PSS costs a ``smaps_rollup`` walk (~3 ms per 760 MB rank), so ``HostPeak`` reads it
only when the cheap figure (``footprint``: RSS less file-backed pages, plus the largest shared part once, from
``statm``) has grown since the last reading, or every ``PSS_EVERY_S``. The cheap figure counts a forked child's
copy-on-write pages again (a profiled ResNet-18 rank: 1,480-1,933 MB against 676-731 MB of PSS); it stays the
registry's conservative view of a running job, and the plain RSS sum is kept as ``peak_rss_sum_mb``.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

MIB = 2 ** 20
PSS_EVERY_S = 5.0     # PSS read at least this often while the cheap figure stays flat
PSS_ON_GROWTH = 1.03  # ... and whenever the cheap figure has grown by this factor since the last PSS reading


def footprint(procs) -> tuple[float, float]:
    """(cheap footprint, RSS sum) of ``procs`` in MB, from ``statm`` (the module docstring says what it counts)."""
    private = rss = shared = 0
    for p in procs:
        try:
            mi = p.memory_info()
        except psutil.Error:
            continue
        private, rss, shared = private + mi.rss - mi.shared, rss + mi.rss, max(shared, mi.shared)
    return (private + shared) / MIB, rss / MIB


def pss_mb(procs) -> float:
    """The sum of the PSS of ``procs`` (MB): every resident page counted once, split between its sharers."""
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            continue
    return total / MIB


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
    """The largest PSS sum of a process tree seen so far (``sample``), when it was seen, and the cheap figures."""

    def __init__(self):
        self.peak_mb, self.peak_rss_sum_mb, self.at, self.samples = 0.0, 0.0, None, 0
        self.peak_cheap_mb, self.pss_reads, self.pss_s = 0.0, 0, 0.0
        self.last_mb, self._last_read = 0.0, None     # the last PSS sum read; (monotonic time, cheap MB) then

    def _read_pss_now(self, cheap: float) -> bool:
        if self._last_read is None:
            return True
        at, base = self._last_read
        return cheap > base * PSS_ON_GROWTH or time.monotonic() - at >= PSS_EVERY_S

    def sample(self, pids) -> float:
        """Read the trees of ``pids`` now; returns the latest PSS sum read (MB)."""
        procs = tree(pids)
        cheap, rss = footprint(procs)
        self.samples += 1
        self.peak_rss_sum_mb, self.peak_cheap_mb = max(self.peak_rss_sum_mb, rss), max(self.peak_cheap_mb, cheap)
        if self._read_pss_now(cheap):
            t0 = time.monotonic()
            now = pss_mb(procs)
            self.pss_s += time.monotonic() - t0
            self.pss_reads += 1
            self._last_read = (t0, cheap)
            if now > self.peak_mb:
                self.peak_mb, self.at = now, time.time()
            self.last_mb = now
        return self.last_mb

    def record(self) -> dict:
        return dict(peak_host_mb=round(self.peak_mb, 1), peak_cheap_mb=round(self.peak_cheap_mb, 1),
                    peak_rss_sum_mb=round(self.peak_rss_sum_mb, 1), peak_at=self.at, samples=self.samples,
                    pss_reads=self.pss_reads, pss_read_s=round(self.pss_s, 3))

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
