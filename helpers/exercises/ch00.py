"""Chapter 00 exercises: ranks, msrun flags, a step without its reducer (public via ``helpers.exercises``)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from helpers.exercises.common import RUN_NAME, as_int, cell_run, checker, kind_of, say, tuple_error

EX00_WORLD_SIZE = 8                      # the notebook's job: 8 ranks
EX00_WORKER_ORDINAL = 6                  # "the 6th worker", counting from 1
EX00_NODES, EX00_WORKERS_PER_NODE = 2, 4  # two servers A and B, 4 cards each
EX00_SUM_KEY = "sum of weights"           # what each rank of the code cell returns in finish(...)


@checker
def check_00_rank_and_size(answer) -> bool:
    """(rank, group size) that ``get_rank()`` / ``get_group_size()`` return in the 6th worker of the job."""
    if answer is None:
        return say(None, "set answer = (rank, group_size) for the 6th worker of the 8-rank job")
    error = tuple_error(answer, "(rank, group_size)", 2)
    if error:
        return say(False, error)
    from helpers.core.config import job_config

    world = job_config("ci", world_size=EX00_WORLD_SIZE).world_size
    want_rank = list(range(world))[EX00_WORKER_ORDINAL - 1]   # msrun numbers the workers RANK_ID 0..world-1
    rank, size = (as_int(v) for v in answer)
    if (rank, size) == (want_rank, world):
        return say(True, f"rank {want_rank} of {world}: ranks run 0..{world - 1}, and the group size is the "
                          "whole job, whichever node a worker is on")
    if (rank, size) == (world, want_rank):
        return say(False, "the two are swapped: the tuple is (rank, group_size), the rank first")
    if size != world:
        return say(False, f"get_group_size() is the number of ranks in the whole job (the world group): "
                           f"{world}, not {size}")
    if rank == EX00_WORKER_ORDINAL:
        return say(False, f"off by one: ranks count from 0, so the {EX00_WORKER_ORDINAL}th worker has rank "
                           f"{want_rank}, not {rank}")
    return say(False, f"the {EX00_WORKER_ORDINAL}th worker has rank {want_rank}, not {rank} (ranks run "
                       f"0..{world - 1} in the order msrun starts the workers)")


def _two_nodes_hints(got: dict, want: dict) -> list[str]:
    """One hint per wrong msrun flag on server B, naming the usual confusion."""
    if (got["worker_num"], got["local_worker_num"]) == (want["local_worker_num"], want["worker_num"]):
        return ["worker_num and local_worker_num are swapped: worker_num counts the whole job, "
                "local_worker_num this server's cards"]
    hints = []
    if got["worker_num"] != want["worker_num"]:
        hints.append(f"worker_num counts the workers of the whole job on both servers ({want['worker_num']}), "
                     f"not {got['worker_num']}")
    if got["local_worker_num"] != want["local_worker_num"]:
        hints.append(f"local_worker_num counts only this server's cards ({want['local_worker_num']}), "
                     f"not {got['local_worker_num']}")
    if got["node_rank"] == want["node_rank"] + 1:
        hints.append(f"node_rank is off by one: servers count from 0 (A is 0), so B is {want['node_rank']}")
    elif got["node_rank"] == 0:
        hints.append(f"node_rank 0 is server A, the master; B is {want['node_rank']}")
    elif got["node_rank"] != want["node_rank"]:
        hints.append(f"node_rank is this server's index from 0: {want['node_rank']}, not {got['node_rank']}")
    return hints


@checker
def check_00_two_nodes(answer) -> bool:
    """The msrun flags on server B of 2 servers x 4 cards: a dict of ``worker_num``, ``local_worker_num``,
    ``node_rank`` (ints)."""
    if answer is None:
        return say(None, 'set answer = {"worker_num": ..., "local_worker_num": ..., "node_rank": ...} '
                          'for server B')
    if not isinstance(answer, dict):
        return say(False, f"the exercise asks for a dict of the three flags, got {kind_of(answer)}")
    from helpers.core.config import job_config
    from helpers.job.launch import msrun_command

    cfg = job_config("ci", world_size=EX00_NODES * EX00_WORKERS_PER_NODE,
                     local_world_size=EX00_WORKERS_PER_NODE, node_rank=EX00_NODES - 1)
    flags = dict(arg[2:].split("=", 1) for arg in msrun_command(cfg, Path("config.json"), Path("logs"))
                 if arg.startswith("--") and "=" in arg)
    want = {k: int(flags[k]) for k in ("worker_num", "local_worker_num", "node_rank")}
    missing = [k for k in want if k not in answer]
    if missing:
        return say(False, f"the dict lacks {', '.join(missing)}: give all three flags")
    for key in want:
        if as_int(answer[key]) is None:
            return say(False, f"{key} is a whole number (int), got {kind_of(answer[key])}")
    hints = _two_nodes_hints({k: as_int(answer[k]) for k in want}, want)
    if hints:
        return say(False, "; ".join(hints))
    return say(True, f"on B: msrun --worker_num={want['worker_num']} --local_worker_num="
                      f"{want['local_worker_num']} --node_rank={want['node_rank']} (same master address and "
                      "port as A)")


def _calls_reducer(tree: ast.AST) -> bool:
    """Whether the cell calls its gradient reducer (``reduce_grads``, or any name bound to a
    ``DistributedGradReducer(...)``) anywhere but where it builds it."""
    def called(node) -> str | None:
        func = node.func if isinstance(node, ast.Call) else None
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None

    def name(target) -> str | None:      # ``reducer`` or ``self.reduce_grads``
        return target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None

    reducers = {"reduce_grads"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and called(node.value) == "DistributedGradReducer":
            reducers |= {name(t) for t in node.targets} - {None}
    return any(isinstance(n, ast.Call) and name(n.func) in reducers for n in ast.walk(tree))


def _bool_error(answer) -> str | None:
    """Why ``answer`` is not True or False (a bool; numpy's too), or None."""
    if isinstance(answer, (bool, np.bool_)):
        return None
    if isinstance(answer, str) and answer.strip().lower() in ("true", "false", "yes", "no"):
        word = answer.strip().lower() in ("true", "yes")
        return f"the string {answer!r} is text, not a bool: write {word} without quotes"
    if as_int(answer) in (0, 1):
        return f"the exercise asks for True or False, got the int {answer!r}: write {bool(answer)}"
    got = f"the string {answer!r} (text)" if isinstance(answer, str) else f"a {type(answer).__name__} {answer!r}"
    return f"the exercise asks for True or False (a bool), got {got}"


@checker
def check_00_without_reducer(answer, run=None) -> bool:
    """Do all ranks end with the same sum of weights once the code cell steps with ``self.opt(grads)``? A bool, read
    from ``run``, the cell's ``JobResult`` (``on_ranks``)."""
    todo = "in the code cell, replace self.opt(self.reduce_grads(grads)) by self.opt(grads) and run the cell again"
    returns, tree, verdict = cell_run(run, (EX00_SUM_KEY,), todo)
    if returns is None:
        return verdict
    if _calls_reducer(tree):
        return say(None, f"the cell that made {RUN_NAME} still calls reduce_grads on the gradients: {todo}, then "
                          "answer")
    if answer is None:
        return say(None, "set answer = True or False: do all ranks still end with the same sum of weights?")
    error = _bool_error(answer)
    if error:
        return say(False, error)
    sums = [float(v[EX00_SUM_KEY]) for v in returns.values()]
    ranks, distinct = len(sums), len({f"{s:.9g}" for s in sums})   # as the cell's table shows them
    want, seen = distinct == 1, f"{RUN_NAME}.returns"
    if bool(answer) == want and not want:
        return say(True, f"False: the {ranks} ranks ended with {distinct} different sums of weights ({seen}). "
                          "Without the AllReduce each rank steps with its own shard's gradient, so the copies "
                          "drift apart from the first step: reduce_grads is what keeps them one model")
    if bool(answer) == want:
        return say(True, f"True: all {ranks} ranks ended with the same sum of weights, {sums[0]:.9g} ({seen})"
                          + ("; a one-rank job has no copies to drift apart" if ranks == 1 else ""))
    if not want:
        return say(False, f"the {ranks} ranks ended with {distinct} different sums of weights ({seen}): without "
                           "the AllReduce each rank applies only its own shard's gradient, and the copies drift "
                           "apart")
    return say(False, f"all {ranks} ranks ended with the same sum of weights, {sums[0]:.9g} ({seen})")
