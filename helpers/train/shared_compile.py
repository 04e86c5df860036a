"""Ranks 1..n-1 of a one-machine data-parallel CPU job load rank 0's first compiled graph instead of compiling it.

MindSpore caches each rank's graphs in ``<cache>/rank_<r>/graph_cache/`` (compile_cache_manager.cc), keyed only by
the hash of the entry script; a data-parallel graph holds no rank id (same ``mccl_world_group`` on every rank). With
8 ranks compiling the same graph at once on a few cores, each takes ~8x as long; so every rank but 0 waits for rank
0's graph 0 (its ``.mindir`` and then its dependency hash are written read-only at the end of the front-end
compile, before rank 0 runs a collective), copies the two files and lets MindSpore load them. Graphs compiled later
(evaluation, split steps) each rank compiles itself.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

CACHE_ENABLE_ENV, CACHE_PATH_ENV = "MS_COMPILER_CACHE_ENABLE", "MS_COMPILER_CACHE_PATH"
ROLE_ENV = "MS_ROLE"      # a rank's role (msrun sets "MS_WORKER"), MindSpore's prefix of its cache file names
# where libmindspore_frontend.so / libmindspore_backend_common.so put graph n (tests/contract pins each part)
RANK_FOLDER, GRAPH_FOLDER, HASH_NAME = "/rank_", "graph_cache", "compile_dependency.hash"
GRAPH_PREFIX, GRAPH_SUFFIX = "compile_cache_", ".mindir"
LOADED_LOG = "Use the compilation cache and execute the backend actions only"   # a rank that loaded it logs this
SHARE_ENV = "COURSE_SHARE_GRAPH"   # "0": every rank compiles its own graph (benchmarks.shared_compile's baseline)
WAIT_S, POLL_S = 180.0, 0.2


def applies(cfg, rank: int, world: int, env=os.environ) -> bool:
    """Whether this rank should take rank 0's graph: CPU, data parallel (or alone), every rank on this machine,
    the compile cache on, not rank 0, and not turned off with ``COURSE_SHARE_GRAPH=0``."""
    return (rank != 0 and world > 1 and cfg.device_target == "CPU" and not cfg.strategy_file
            and cfg.local_workers == world and env.get(SHARE_ENV, "1") != "0" and env.get(CACHE_ENABLE_ENV) == "1"
            and bool(env.get(CACHE_PATH_ENV)))


def graph_files(cache: str, rank: int, role: str, n: int = 0) -> tuple[Path, Path]:
    """(graph ``n``, dependency hash) of ``rank`` in the cache folder ``cache``."""
    folder = Path(f"{cache}{RANK_FOLDER}{rank}") / GRAPH_FOLDER
    return folder / f"{role}{GRAPH_PREFIX}{n}{GRAPH_SUFFIX}", folder / f"{role}{HASH_NAME}"


def _written(path: Path) -> bool:
    """MindSpore writes a cache file with mode 0200 and makes it 0400 once closed."""
    try:
        return not path.stat().st_mode & stat.S_IWUSR
    except FileNotFoundError:
        return False


def take_leader_graph(cfg, rank: int, world: int, env=os.environ, wait_s: float = WAIT_S, n: int = 0,
                      gone=lambda: False) -> str:
    """Copy rank 0's graph ``n`` into this rank's cache once it is complete; returns what happened (for the record).
    ``gone()``: rank 0 has moved past graph ``n`` without writing it (stop waiting)."""
    if not applies(cfg, rank, world, env):
        return "not applicable"
    role = env.get(ROLE_ENV, "")
    mine, theirs = graph_files(env[CACHE_PATH_ENV], rank, role, n), graph_files(env[CACHE_PATH_ENV], 0, role, n)
    if mine[0].exists() and mine[1].exists():
        return "own cache"
    t0 = time.monotonic()
    while not (_written(theirs[1]) and _written(theirs[0])):
        if time.monotonic() - t0 > wait_s or gone():
            return f"compiled itself: rank 0's graph not written within {time.monotonic() - t0:.0f} s"
        time.sleep(POLL_S)
    mine[0].parent.mkdir(parents=True, exist_ok=True)
    for src, dst in zip(theirs, mine):        # the graph first, the hash (what MindSpore checks first) last
        if dst.exists() and dst is mine[1]:
            continue                           # this rank's own hash, written with its graph 0
        tmp = dst.with_name(dst.name + f".{os.getpid()}")
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o400)
        os.replace(tmp, dst)
    return f"loaded rank 0's graph after {time.monotonic() - t0:.1f} s"
