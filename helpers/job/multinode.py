"""Two "nodes" on one host: the second node's msrun in its own network namespace.

A real two-server job is two ``msrun`` invocations with the same ``--master_addr`` (server A's address),
``--worker_num=8 --local_worker_num=4`` and ``--node_rank`` 0 and 1. On one host that fails in a telling
way: msrun starts a scheduler whenever ``master_addr`` is one of *its own* addresses, so both invocations
start one and the second dies with 'MS_SCHED_PORT is occupied'. Putting node 1 in a network namespace
(a veth pair, its own address) makes it a separate host as far as networking goes: only node 0 sees the
master address as local. This needs root and ``ip`` (iproute2); ``netns_unavailable()`` says why not.
On a card host each node sees only its half of the cards and NCCL/HCCL are told which interface is its
node's; the private subnet is one that no route of the host already uses. Both namespaces keep the host's
hostname and boot id, which is what NCCL identifies a host by, so NCCL may still move data between the halves
over shared memory or peer access rather than the veth link (chapter 00 says what the demo shows).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class TwoNodeNet:
    """The veth pair and namespace that make node 1 a separate host: names and both nodes' addresses."""
    namespace: str
    master_addr: str      # node 0 (this namespace's end of the veth pair)
    node1_addr: str       # node 1, inside ``namespace``
    host_if: str = ""     # node 0's end of the veth pair
    peer_if: str = ""     # node 1's end, inside ``namespace``

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


def host_routes() -> list[str]:
    """The destinations of the host's IPv4 routes (``ip -4 route``), e.g. ``10.0.0.0/8``, ``default``."""
    out = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    kinds = {"unicast", "local", "broadcast", "multicast", "anycast", "blackhole", "unreachable", "prohibit", "throw"}
    words = [line.split() for line in out.splitlines() if line.strip()]
    return [w[1] if w[0] in kinds and len(w) > 1 else w[0] for w in words]


def free_subnet(tag: int, used: list[str]) -> ipaddress.IPv4Network:
    """A /24 under 10.251.0.0/16 (starting at ``tag``) that overlaps none of the ``used`` route destinations;
    a cluster network that already routes 10.251.x.0/24 (or all of 10/8) is never shadowed."""
    taken = []
    for dest in used:
        try:
            net = ipaddress.ip_network(dest, strict=False)
        except ValueError:               # "default", "broadcast", ...
            continue
        if net.prefixlen > 0:
            taken.append(net)
    for i in range(250):
        cand = ipaddress.ip_network(f"10.251.{1 + (tag + i) % 250}.0/24")
        if not any(cand.overlaps(t) for t in taken):
            return cand
    for i in range(250):
        cand = ipaddress.ip_network(f"172.31.{1 + (tag + i) % 250}.0/24")
        if not any(cand.overlaps(t) for t in taken):
            return cand
    raise RuntimeError("no free private /24 for the two-node demo: every candidate overlaps a host route")


# CANN's variables for HCCL's host socket (envvar reference, "HCCL_IF_IP" / "HCCL_SOCKET_IFNAME"): the address
# wins over the interface name; "=<name>" matches that interface exactly (a bare name is a prefix).
HCCL_IF_IP, HCCL_SOCKET_IFNAME = "HCCL_IF_IP", "HCCL_SOCKET_IFNAME"
# The NPUs' own RoCE ports, which HCCL uses between servers, get their addresses from the driver's hccn_tool;
# "hccn_tool -i <card> -ip -g" prints "ipaddr:<address>" when one is set.
HCCN_TOOL, HCCN_TOOL_DIR = "hccn_tool", "/usr/local/Ascend/driver/tools"
# What the bundled NCCL (lib/plugin/gpu11.x/libnccl.so.2) tells hosts apart by, besides the hostname: the kernel's
# boot id, unless NCCL_HOSTID is set. Both namespaces share them, so NCCL sees one host (chapter 00 says so).
NCCL_HOST_IDENTITY = ("/proc/sys/kernel/random/boot_id", "NCCL_HOSTID")
DEVICE_IP = re.compile(r"ipaddr\s*:\s*(\d+\.\d+\.\d+\.\d+)")


def node_env(device_target: str, node_rank: int, local_workers: int, interface: str, address: str) -> dict:
    """Variables for one simulated node: its own half of the cards and, for NCCL/HCCL, its own interface
    (HCCL also its own address, so each node reports its namespace's address as its host)."""
    if device_target == "CPU":
        return {}
    cards = ",".join(str(node_rank * local_workers + i) for i in range(local_workers))
    if device_target == "GPU":
        return {"CUDA_VISIBLE_DEVICES": cards, "NCCL_SOCKET_IFNAME": interface}
    return {"ASCEND_RT_VISIBLE_DEVICES": cards, HCCL_SOCKET_IFNAME: f"={interface}", HCCL_IF_IP: address}


def device_network_unconfigured(cards, which=shutil.which, run=subprocess.run) -> str | None:
    """None when every NPU in ``cards`` has a device IP (its RoCE port: HCCL's path between servers), else why not."""
    tool = which(HCCN_TOOL, path=os.pathsep.join(filter(None, [os.environ.get("PATH"), HCCN_TOOL_DIR])))
    if not tool:
        return (f"{HCCN_TOOL} (Ascend driver's network tool) is missing, so the NPUs' device network cannot be "
                "checked; HCCL between two nodes needs it configured")
    missing = []
    for card in cards:
        try:
            out = run([tool, "-i", str(card), "-ip", "-g"], capture_output=True, text=True, timeout=30)
            ok = out.returncode == 0 and DEVICE_IP.search(out.stdout or "")
        except (OSError, subprocess.SubprocessError):
            ok = False
        if not ok:
            missing.append(card)
    if missing:
        return (f"NPUs {missing} have no device IP ({HCCN_TOOL} -i <card> -ip -g): HCCL between two nodes runs "
                f"over the NPUs' own RoCE ports; set them with "
                f"{HCCN_TOOL} -i <card> -ip -s address <ip> netmask <mask>")
    return None


def two_node_unavailable(device_target: str, cards, which=shutil.which, run=subprocess.run) -> str | None:
    """None when the two-node demo can run here for ``device_target`` on ``cards``, else the reason to skip it."""
    reason = netns_unavailable()
    if reason or device_target != "Ascend":
        return reason
    return device_network_unconfigured(cards, which=which, run=run)


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
    subnet = free_subnet(tag, host_routes())
    host_if, peer_if = f"msva{tag % 100000}", f"msvb{tag % 100000}"
    net = TwoNodeNet(namespace=f"msnode{tag}", master_addr=str(subnet[1]), node1_addr=str(subnet[2]),
                     host_if=host_if, peer_if=peer_if)
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


def run_two_node_job(cfg, progress: str = "auto", **job):
    """Run ``cfg`` (``world_size`` ranks) as 2 nodes x ``world_size/2`` workers; returns the JobResult. ``job``:
    more ``run_job`` arguments (a cell's program: ``helpers.cells.run.cell_job``)."""
    from helpers.job.launch import run_job

    if cfg.world_size % 2:
        raise ValueError(f"world_size must be even for two nodes (got {cfg.world_size})")
    half = cfg.world_size // 2
    reason = two_node_unavailable(cfg.device_target, range(cfg.world_size))
    if reason:
        raise RuntimeError(reason)
    with two_node_network() as net:
        cfg = cfg.replace(master_addr=net.master_addr, local_world_size=half)
        env = [node_env(cfg.device_target, 0, half, net.host_if, net.master_addr),
               node_env(cfg.device_target, 1, half, net.peer_if, net.node1_addr)]
        launches = [dict(node_rank=0, env=env[0]), dict(node_rank=1, prefix=net.node1_prefix, env=env[1])]
        return run_job(cfg, progress=progress, launches=launches, **job)
