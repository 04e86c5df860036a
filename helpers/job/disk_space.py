"""Disk room for a job, checked before it writes: its run folder, the compile cache and the data it may make.

Each place's need is summed per disk (two places on one disk need their sum) and compared with that disk's free
space less ``MARGIN_MB`` (a disk filled to the last byte breaks more than the job). One ``DataError`` names every
short disk: the places on it, what they need, what is free, and the fix.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from helpers.core.errors import DataError
from helpers.core.paths import resolve

MIB = 2 ** 20
# Measured: a run folder holds logs and metrics (~0.2 MB a rank) and, for chapter 03's hybrid job, each rank's
# checkpoint slice (799 MB for 8 ranks); the compile cache grew to 409 MB over the whole course at ci.
RUN_MB_PER_RANK = 120.0
COMPILE_CACHE_MB = 200.0
DATA_MB = 100.0          # a data folder the job still has to make (the ci/cpu digits: 5.7 MB on disk)
MARGIN_MB = 512.0
COMPILE_CACHE_DIR = "runs/compile_cache"   # helpers.job.compile_cache's folder


def free_mb(path: Path) -> float:
    """Free space (MB) on the disk holding ``path`` (its nearest existing parent); inf when it cannot be read."""
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        return shutil.disk_usage(existing).free / MIB
    except OSError:
        return float("inf")        # cannot tell: the write itself will report the real problem


def disk_of(path: Path) -> int:
    """The device id of the disk holding ``path`` (its nearest existing parent)."""
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return os.stat(existing).st_dev


def needs(cfg, run_root) -> list[tuple[str, Path, float]]:
    """(what, folder, MB) for each place the job writes: run folder, compile cache, data to be made."""
    places = [("run folder", resolve(run_root), RUN_MB_PER_RANK * cfg.local_workers)]
    if cfg.compile_cache:
        places.append(("compile cache", resolve(COMPILE_CACHE_DIR), COMPILE_CACHE_MB))
    data = resolve(cfg.data_dir)
    if cfg.task == "train" and not data.exists():
        places.append(("data set (to be made)", data, DATA_MB))
    return places


def check_disk(cfg, run_root="runs") -> None:
    """Raise one ``DataError`` when any disk the job writes to lacks room for it (before anything is written)."""
    by_disk: dict[int, list] = {}
    for place in needs(cfg, run_root):
        by_disk.setdefault(disk_of(place[1]), []).append(place)
    short = []
    for places in by_disk.values():
        need, free = sum(mb for _, _, mb in places), free_mb(places[0][1])
        if need + MARGIN_MB > free:
            where = ", ".join(f"{what} {folder} ({mb:.0f} MB)" for what, folder, mb in places)
            short.append(f"{where}: needs {need:.0f} MB + {MARGIN_MB:.0f} MB to spare, {free:.0f} MB free")
    if short:
        raise DataError(f"{cfg.name}: not started, a disk it writes to is nearly full:\n  " + "\n  ".join(short)
                        + "\nFix: free space there (old runs under runs/<chapter>/, runs/compile_cache), or set "
                        "COURSE_HOME (or run_job's run_root) to a folder on a disk with room.")
