"""A job's Slurm settings (``JobConfig.slurm``): the keys accepted, their checks, and the ``#SBATCH`` lines they make."""

from __future__ import annotations

import re

LAUNCHERS = ("local", "slurm")
# key -> what it is; each becomes one sbatch option (``sbatch_options``)
SLURM_KEYS = {
    "nodes": "number of nodes (an int dividing world_size; ranks per node = world_size / nodes)",
    "partition": "the partition (queue) to submit to",
    "gres": "generic resources per node, e.g. 'gpu:8' (default on GPU: one card per rank of the node)",
    "cpus_per_node": "CPUs asked per node (default: ranks per node x threads_per_rank); fewer lets the ranks share them",
    "exclusive": "True: whole nodes for the job (sbatch --exclusive), whatever CPUs it asks",
    "time_limit": "wall-clock limit in Slurm's format, e.g. '00:30:00'",
    "account": "the account to charge (fair share)",
    "extra_args": "a list of further sbatch arguments, e.g. ['--exclusive', '--qos=workshop']",
}
SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^(UNLIMITED|INFINITE)$")
SLURM_WORD = re.compile(r"^[A-Za-z0-9_.:,=+@/-]+$")


def slurm_problem(slurm, world_size: int, launcher: str = "slurm") -> str | None:
    """What is wrong with a ``slurm`` settings dict, or None (an empty dict is fine for the local launcher)."""
    if not isinstance(slurm, dict):
        return f"must be a dict with keys from {sorted(SLURM_KEYS)}"
    unknown = sorted(set(slurm) - set(SLURM_KEYS))
    if unknown:
        return f"unknown keys {unknown}; known: " + "; ".join(f"{k}: {v}" for k, v in SLURM_KEYS.items())
    nodes = slurm.get("nodes", 1)
    if not (isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1):
        return "nodes must be a positive int"
    if isinstance(world_size, int) and world_size % nodes:
        return f"nodes={nodes} must divide world_size={world_size} (every node runs as many ranks)"
    for key in ("partition", "gres", "account"):
        if key in slurm and not (isinstance(slurm[key], str) and SLURM_WORD.match(slurm[key])):
            return f"{key} must be a plain word such as 'gpu' or 'gpu:8' (no spaces or quotes)"
    if "time_limit" in slurm and not (isinstance(slurm["time_limit"], str) and SLURM_TIME.match(slurm["time_limit"])):
        return "time_limit must be in Slurm's format: 'MM', 'HH:MM:SS' or 'D-HH:MM:SS'"
    cpus = slurm.get("cpus_per_node", 1)
    if not (isinstance(cpus, int) and not isinstance(cpus, bool) and cpus >= 1):
        return "cpus_per_node must be a positive int"
    if not isinstance(slurm.get("exclusive", False), bool):
        return "exclusive must be True or False"
    extra = slurm.get("extra_args", [])
    if not (isinstance(extra, (list, tuple)) and all(isinstance(a, str) and a.startswith("-") for a in extra)):
        return "extra_args must be a list of sbatch options, each starting with '-'"
    return None


def cpus_per_node(slurm: dict, ranks_per_node: int, threads_per_rank: int) -> int:
    """CPUs a node's share of the job takes: each rank's compute threads (OMP_NUM_THREADS, MindSpore's threads_num);
    dataset workers are threads of the rank that feed its step (map without python_multiprocessing), not counted."""
    return slurm.get("cpus_per_node") or ranks_per_node * threads_per_rank


def sbatch_options(slurm: dict, ranks_per_node: int = 1, threads_per_rank: int = 1, device_target: str = "CPU"
                   ) -> list[str]:
    """The sbatch options of a job: nodes, one task per node holding the node's CPUs (so jobs sharing a partition
    do not overbook a node), one card per rank on GPU, then the optional keys in a fixed order."""
    opts = [f"--nodes={slurm.get('nodes', 1)}", "--ntasks-per-node=1",
            f"--cpus-per-task={cpus_per_node(slurm, ranks_per_node, threads_per_rank)}"]
    gres = slurm.get("gres") or (f"gpu:{ranks_per_node}" if device_target == "GPU" else None)
    for flag, value in (("--partition", slurm.get("partition")), ("--gres", gres),
                        ("--time", slurm.get("time_limit")), ("--account", slurm.get("account"))):
        if value:
            opts.append(f"{flag}={value}")
    return opts + (["--exclusive"] if slurm.get("exclusive") else []) + list(slurm.get("extra_args", []))


def too_few_cpus(asked: int, partition: str, node_cpus: list[int], nodes: int) -> str | None:
    """The one-line refusal when fewer than ``nodes`` of the partition's nodes have ``asked`` CPUs, else None."""
    if sum(c >= asked for c in node_cpus) >= nodes:
        return None
    have = f"have at most {max(node_cpus)}" if node_cpus else "do not have that many (Slurm refused it)"
    return (f"slurm: the job asks {asked} CPUs on each of {nodes} node(s) (ranks per node x threads_per_rank) but "
            f"partition {partition}'s nodes {have}: lower threads_per_rank or the ranks per node, or set "
            f"slurm['cpus_per_node'] to what a node has (its ranks then share those CPUs)")


# A room's admin (or a course run, ``python -m helpers.course run --launcher slurm``) sets these for every notebook;
# a notebook's own ``launcher=`` / ``slurm=`` override wins.
LAUNCHER_ENV, SLURM_ENV = "COURSE_LAUNCHER", "COURSE_SLURM"


def launcher_defaults(environ=None) -> dict:
    """``launcher`` and ``slurm`` from ``COURSE_LAUNCHER`` and ``COURSE_SLURM`` (JSON), when set."""
    import json
    import os

    from helpers.core.errors import ConfigError

    environ = os.environ if environ is None else environ
    out = {"launcher": environ[LAUNCHER_ENV]} if environ.get(LAUNCHER_ENV) else {}
    if environ.get(SLURM_ENV):
        try:
            out["slurm"] = json.loads(environ[SLURM_ENV])
        except ValueError as exc:
            raise ConfigError(f"slurm: {SLURM_ENV} must be JSON such as '{{\"nodes\": 2, \"partition\": \"gpu\"}}' "
                              f"({exc}) (got {environ[SLURM_ENV]!r})") from None
    return out
