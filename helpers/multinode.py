"""Two "nodes" on one host: the second node's msrun in its own network namespace.

A real two-server job is two ``msrun`` invocations with the same ``--master_addr`` (server A's address),
``--worker_num=8 --local_worker_num=4`` and ``--node_rank`` 0 and 1. On one host that fails in a telling
way: msrun starts a scheduler whenever ``master_addr`` is one of *its own* addresses, so both invocations
start one and the second dies with 'MS_SCHED_PORT is occupied'. Putting node 1 in a network namespace
(a veth pair, its own address) makes it a separate host as far as networking goes: only node 0 sees the
master address as local. This needs root and ``ip`` (iproute2); ``netns_unavailable()`` says why not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class TwoNodeNet:
    namespace: str
    master_addr: str      # node 0 (this namespace's end of the veth pair)
    node1_addr: str       # node 1, inside ``namespace``

    @property
    def node1_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]


def netns_unavailable() -> str | None:
    """None when namespaces can be made here, otherwise the reason (shown as the skip message)."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "making a network namespace needs root (run as root, or use two real servers)"
    if not shutil.which("ip"):
        return "the 'ip' command (iproute2) is missing: apt-get install iproute2"
    return None


def _ip(*args, ns: str | None = None):
    cmd = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def two_node_network(tag: int | None = None):
    """Create namespace + veth pair with private addresses unique to this process; always remove them."""
    reason = netns_unavailable()
    if reason:
        raise RuntimeError(reason)
    tag = os.getpid() if tag is None else tag
    subnet = 1 + tag % 250
    net = TwoNodeNet(namespace=f"msnode{tag}", master_addr=f"10.251.{subnet}.1",
                     node1_addr=f"10.251.{subnet}.2")
    host_if, peer_if = f"msva{tag % 100000}", f"msvb{tag % 100000}"
    try:
        _ip("netns", "add", net.namespace)
        _ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        _ip("link", "set", peer_if, "netns", net.namespace)
        _ip("addr", "add", f"{net.master_addr}/24", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("addr", "add", f"{net.node1_addr}/24", "dev", peer_if, ns=net.namespace)
        _ip("link", "set", peer_if, "up", ns=net.namespace)
        _ip("link", "set", "lo", "up", ns=net.namespace)
        yield net
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", net.namespace], capture_output=True)


def run_two_node_job(cfg, progress: str = "auto"):
    """Run ``cfg`` (``world_size`` ranks) as 2 nodes x ``world_size/2`` workers; returns the JobResult."""
    from helpers.launch import run_job

    if cfg.world_size % 2:
        raise ValueError(f"world_size must be even for two nodes (got {cfg.world_size})")
    half = cfg.world_size // 2
    with two_node_network() as net:
        cfg = cfg.replace(master_addr=net.master_addr, local_world_size=half)
        launches = [dict(node_rank=0), dict(node_rank=1, prefix=net.node1_prefix)]
        return run_job(cfg, progress=progress, launches=launches)
