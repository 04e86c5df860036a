"""A real Slurm cluster on this machine for the tests: munged, slurmctld and one slurmd per node, each node in its own
network namespace with a veth pair to the host (chapter 00's two-node demo, ``helpers.job.multinode``, does the same
for msrun). Root only; everything started is stopped by pid (and by network namespace) at the end."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.job.multinode import free_subnet, host_routes

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "scontrol", "nsenter", "ip")
START_TIMEOUT_S = 60.0
# CPUs each node declares (SlurmdParameters=config_overrides: the nodes share this machine's cores anyway): the most
# ranks per node a test runs at one thread each
NODE_CPUS = 4


def slurm_unavailable() -> str | None:
    """None when a test cluster can be started here, else why not (the skip reason)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "a test Slurm cluster needs root (network namespaces, slurmd)"
    missing = [d for d in DAEMONS if not shutil.which(d, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def _run(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


@dataclass
class Node:
    """One Slurm node: its namespace, its veth ends and addresses."""
    name: str
    namespace: str
    host_if: str
    peer_if: str
    host_addr: str
    addr: str


@dataclass
class SlurmCluster:
    """``nodes`` slurmd nodes of NODE_CPUS CPUs; partitions ``course`` (all nodes), ``one`` (the first node, one job at
    a time) and ``plain`` (the first node, shared by jobs as its CPUs allow, as a site's partition usually is)."""
    nodes: list[Node] = field(default_factory=list)
    root: Path = None
    procs: list[subprocess.Popen] = field(default_factory=list)
    slurmd: dict = field(default_factory=dict)     # node name -> its slurmd Popen
    env: dict = field(default_factory=dict)        # SLURM_CONF for every Slurm command
    base_env: dict = field(default_factory=dict)   # the environment the daemons start with (not a test's markers)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def start_slurmd(self, node: Node, hide: Path | None = None) -> None:
        """Start (or restart) one node's slurmd inside its namespace (``nsenter --net``: ``ip netns exec``
        remounts /sys and slurmd then finds no cgroup filesystem); ``hide``: a folder this node does not see (an
        empty tmpfs over it in a mount namespace of its own), as on a node without the shared filesystem."""
        log = open(self.root / f"slurmd.{node.name}.out", "ab")
        cmd = ["nsenter", f"--net=/var/run/netns/{node.namespace}", "slurmd", "-D", "-N", node.name, "-f", str(self.conf)]
        if hide:
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   f"mount -t tmpfs none '{hide}' && exec " + " ".join(f"'{c}'" for c in cmd)]
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**self.base_env, **self.env})
        self.slurmd[node.name] = p
        self.procs.append(p)

    def restart_slurmd(self, node: Node, hide: Path | None = None) -> None:
        """Stop a node's slurmd (by pid) and start it again; returns once the node is idle."""
        old = self.slurmd[node.name]
        if old.poll() is None:
            old.terminate()
            old.wait(timeout=20)
        self.start_slurmd(node, hide)
        self.wait_idle()

    def sinfo(self) -> dict[str, str]:
        out = _run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def wait_idle(self, names=None, timeout: float = START_TIMEOUT_S) -> None:
        names = names or [n.name for n in self.nodes]
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.sinfo()
            if all(state.get(n) == "idle" for n in names):
                return
            time.sleep(0.3)
        raise RuntimeError(f"Slurm nodes not idle after {timeout:.0f} s: {self.sinfo()}\n"
                           + (self.root / "slurmctld.log").read_text(errors="replace")[-3000:])

    def our_jobs(self) -> list[str]:
        return [x for x in _run("squeue", "-h", "-o", "%i", check=False).stdout.split()]

    def completion(self, job_id: str) -> dict[str, str]:
        """The job's completion record (``sacct -c``, read from JobCompType=jobcomp/filetxt): State, ExitCode, Start,
        End; {} before Slurm wrote it."""
        fields = ("State", "ExitCode", "Start", "End")
        out = _run("sacct", "-c", "-n", "-P", "-j", job_id, "-o", ",".join(("JobID",) + fields), check=False).stdout
        rows = [line.split("|") for line in out.splitlines() if line.split("|")[0] == job_id]
        return dict(zip(fields, rows[-1][1:])) if rows else {}

    def workers_in_namespaces(self) -> list[int]:
        """Pids of every process in one of the nodes' network namespaces (slurmd, slurmstepd, the job's tasks)."""
        inodes = {os.stat(f"/var/run/netns/{n.namespace}").st_ino for n in self.nodes
                  if os.path.exists(f"/var/run/netns/{n.namespace}")}
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat(f"/proc/{pid}/ns/net").st_ino in inodes:
                    pids.append(int(pid))
            except OSError:
                continue
        return pids


def _make_network(cluster: SlurmCluster, count: int, tag: int) -> None:
    used = host_routes()
    _run("sysctl", "-w", "net.ipv4.ip_forward=1", check=False)
    for i in range(count):
        subnet = free_subnet(tag + i * 7, used)
        used.append(str(subnet))
        node = Node(f"n{i + 1}", f"slurm{tag}n{i + 1}", f"slh{tag % 10000}n{i + 1}", f"slp{tag % 10000}n{i + 1}",
                    str(subnet[1]), str(subnet[2]))
        cluster.nodes.append(node)
        _run("ip", "netns", "add", node.namespace)
        _run("ip", "link", "add", node.host_if, "type", "veth", "peer", "name", node.peer_if)
        _run("ip", "link", "set", node.peer_if, "netns", node.namespace)
        _run("ip", "addr", "add", f"{node.host_addr}/24", "dev", node.host_if)
        _run("ip", "link", "set", node.host_if, "up")
        ns = ["ip", "-n", node.namespace]
        _run(*ns, "addr", "add", f"{node.addr}/24", "dev", node.peer_if)
        _run(*ns, "link", "set", node.peer_if, "up")
        _run(*ns, "link", "set", "lo", "up")
        _run(*ns, "route", "add", "default", "via", node.host_addr)


SLURM_CONF = """ClusterName=course
SlurmctldHost={host}({ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=5
KillWait=5
InactiveLimit=0
MinJobAge=300
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
SlurmdParameters=config_overrides
MpiDefault=none
{nodes}
PartitionName=course Nodes={all_nodes} Default=YES MaxTime=INFINITE State=UP
PartitionName=one Nodes={first} MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
PartitionName=plain Nodes={first} MaxTime=INFINITE State=UP
"""


def _write_conf(cluster: SlurmCluster, munge_socket: Path) -> None:
    nodes = "\n".join(f"NodeName={n.name} NodeAddr={n.addr} NodeHostname={n.name} CPUs={NODE_CPUS} State=UNKNOWN"
                      for n in cluster.nodes)
    (cluster.root / "state").mkdir()
    for n in cluster.nodes:
        (cluster.root / "spool" / n.name).mkdir(parents=True)
    cluster.conf.write_text(SLURM_CONF.format(
        host=socket.gethostname(), ctld_addr=cluster.nodes[0].host_addr, ctld_port=_free_port(),
        slurmd_port=_free_port(), munge_socket=munge_socket, root=cluster.root, nodes=nodes,
        all_nodes=",".join(n.name for n in cluster.nodes), first=cluster.nodes[0].name))


def _start_munge(cluster: SlurmCluster) -> Path:
    key = cluster.root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = cluster.root / "munge" / "munge.socket"
    sock.parent.mkdir(mode=0o755)
    cluster.procs.append(subprocess.Popen(
        ["munged", "-F", "--force", f"--socket={sock}", f"--key-file={key}", f"--log-file={cluster.root}/munged.log",
         f"--pid-file={cluster.root}/munged.pid", f"--seed-file={cluster.root}/munged.seed"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    deadline = time.time() + 10
    while not sock.exists() and time.time() < deadline:
        time.sleep(0.05)
    return sock


def start_cluster(count: int = 2, tag: int | None = None) -> SlurmCluster:
    """Bring up munged, slurmctld and ``count`` slurmd nodes; returns when sinfo shows every node idle."""
    reason = slurm_unavailable()
    if reason:
        raise RuntimeError(reason)
    tag = os.getpid() % 100000 if tag is None else tag
    cluster = SlurmCluster(root=Path(tempfile.mkdtemp(prefix="course-slurm-")))
    cluster.root.chmod(0o755)
    try:
        _make_network(cluster, count, tag)
        munge = _start_munge(cluster)
        _write_conf(cluster, munge)
        cluster.env = {"SLURM_CONF": str(cluster.conf)}
        os.environ.update(cluster.env)             # every Slurm command of the test (and of its jobs) reads it
        cluster.base_env = dict(os.environ)
        cluster.procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(cluster.conf)],
                                              stdout=open(cluster.root / "slurmctld.out", "wb"),
                                              stderr=subprocess.STDOUT))
        for node in cluster.nodes:
            cluster.start_slurmd(node)
        cluster.wait_idle()
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def stop_cluster(cluster: SlurmCluster) -> None:
    """Cancel every job, stop every process this cluster started (by pid, then by namespace), remove the network."""
    if cluster.env:
        _run("scancel", "--full", "-u", "root", check=False)
    for p in reversed(cluster.procs):
        if p.poll() is None:
            p.terminate()
    for p in cluster.procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for pid in cluster.workers_in_namespaces():          # slurmstepd and tasks detach from slurmd
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    for n in cluster.nodes:
        _run("ip", "link", "del", n.host_if, check=False)
        _run("ip", "netns", "del", n.namespace, check=False)
    if os.environ.get("SLURM_CONF") == str(cluster.conf):
        del os.environ["SLURM_CONF"]
    shutil.rmtree(cluster.root, ignore_errors=True)
