"""Every graph a data-parallel CPU worker compiles, not only its first, compiled once: ranks 1..n-1 load rank 0's.

MindSpore numbers a process's cached graphs in compile order (``helpers.train.shared_compile``), so graph ``n`` of
rank 0 is graph ``n`` of every rank that runs the same code: the worker's evaluation graphs, precise BN's and the
time split's come after the train step. Before each fresh compile (MindSpore's ``_set_compile_cache_dep_files``
call, made only when a graph is not compiled yet) rank 0 writes what it compiles (the cell or function and its
arguments' shapes) to ``<run_dir>/graph_share/<n>.key``; another rank compiling the same thing as its graph ``n``
copies rank 0's file once written, and compiles itself when rank 0 compiled something else, moved on without
writing one, or the wait runs out. The worker uses it, also as a ``%%ranks --then`` cell's follow-on once every rank
has compiled as many graphs in the cell as rank 0.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

from helpers.train.shared_compile import POLL_S, WAIT_S, applies, take_leader_graph

KEY_FOLDER = "graph_share"
HOOKED = "_set_compile_cache_dep_files"    # graph/api.py: called right before a fresh compile (contract-pinned)


def graph_key(name: str, args) -> str:
    """What a compile compiles, the same on every rank: the cell or function and its arguments' shapes and types."""
    def one(a):
        shape = getattr(a, "shape", None)
        return f"{tuple(shape)}:{getattr(a, 'dtype', '')}" if shape is not None else type(a).__name__
    return f"{name}({', '.join(one(a) for a in args)})"


def key_path(run_dir: Path, n: int) -> Path:
    """Where rank 0 says what its graph ``n`` is."""
    return Path(run_dir) / KEY_FOLDER / f"{n}.key"


def publish(run_dir: Path, n: int, key: str) -> None:
    """Rank 0: graph ``n`` is ``key`` (written whole, then renamed)."""
    path = key_path(run_dir, n)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(key)
    os.replace(tmp, path)


def take(cfg, rank: int, world: int, run_dir: Path, n: int, key: str, env=os.environ, wait_s: float = WAIT_S) -> str:
    """Another rank before compiling ``key`` as its graph ``n``: rank 0's graph ``n`` when it is the same one."""
    path, t0 = key_path(run_dir, n), time.monotonic()
    while not path.exists():
        if time.monotonic() - t0 > wait_s:
            return f"compiled itself: rank 0 compiled no graph {n} within {wait_s:.0f} s"
        time.sleep(POLL_S)
    theirs = path.read_text()
    if theirs != key:
        return f"compiled itself: rank 0's graph {n} is {theirs}, this one {key}"
    return take_leader_graph(cfg, rank, world, env, wait_s - (time.monotonic() - t0), n,
                             gone=lambda: key_path(run_dir, n + 1).exists())


_hooks: dict = {}      # this process's hooks, once installed: the count of fresh compiles and what to do at each


def count_compiles() -> dict:
    """Install the hooks (once per process): from now on every fresh compile is counted, and shared once armed."""
    if _hooks:
        return _hooks
    from mindspore.graph import api

    _hooks.update(n=0, key="", share=None)

    def keep_key(compile_, name_of):
        @functools.wraps(compile_)
        def compile(self, first, *args, **kwargs):
            _hooks["key"] = graph_key(name_of(self, first), args)
            return compile_(self, first, *args, **kwargs)
        return compile

    def hooked(original):
        @functools.wraps(original)
        def deps(self, *args, **kwargs):
            n, _hooks["n"] = _hooks["n"], _hooks["n"] + 1
            if _hooks["share"]:
                _hooks["share"](n, _hooks["key"])
            return original(self, *args, **kwargs)
        return deps

    cells, jits = api._CellGraphExecutor, api._JitExecutor
    cells.compile = keep_key(cells.compile, lambda _, obj: type(obj).__qualname__)
    jits.compile = keep_key(jits.compile, lambda self, method: f"{getattr(self.fn, '__qualname__', method)}")
    for cls in (cells, jits):
        setattr(cls, HOOKED, hooked(getattr(cls, HOOKED)))
    return _hooks


def same_start(run_dir: Path, rank: int, n: int, wait_s: float = WAIT_S) -> bool:
    """After a ``%%ranks --then`` cell: whether this rank has compiled as many graphs as rank 0 (rank 0 writes its
    count, the others compare theirs), so that its next graph has rank 0's number."""
    path = Path(run_dir) / KEY_FOLDER / "start"
    if rank == 0:
        path.parent.mkdir(exist_ok=True)
        path.with_name("start.tmp").write_text(str(n))
        os.replace(path.with_name("start.tmp"), path)
        return True
    t0 = time.monotonic()
    while not path.exists():
        if time.monotonic() - t0 > wait_s:
            return False
        time.sleep(POLL_S)
    return path.read_text() == str(n)


def share_every_graph(cfg, rank: int, world: int, run_dir: Path, write, env=os.environ) -> bool:
    """From the next compile on, rank 0 publishes each graph and the other ranks take it (the module's docstring);
    ``write(result=, graph=)`` records what a rank but 0 did for each graph. After a ``%%ranks`` cell (its hooks
    installed before the cell ran), only the ranks that compiled as many graphs in the cell as rank 0 take part
    (``same_start``). Returns whether this rank shares."""
    if not applies(cfg, 1, world, env):      # the job's ranks would share: rank 0 takes part by publishing
        return False
    after_cell = bool(_hooks)
    hooks = count_compiles()
    if after_cell and not same_start(run_dir, rank, hooks["n"]):
        return False

    def share(n: int, key: str) -> None:
        if rank == 0:
            publish(run_dir, n, key)
        else:
            write(result=take(cfg, rank, world, run_dir, n, key, env), graph=n)

    hooks["share"] = share
    return True
