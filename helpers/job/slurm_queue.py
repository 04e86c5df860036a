"""What Slurm says about a job and its nodes (squeue, scontrol, sinfo), sbatch and scancel: thin calls and their parsing."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

# Slurm's job states (squeue %T) in which a job still holds or waits for nodes; any other state, or a job squeue no
# longer knows (after MinJobAge), has ended. From Slurm 22.05's squeue(1) "JOB STATE CODES".
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUED",
                 "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT",
                 "STOPPED")
SQUEUE_FORMAT = "%i|%T|%r|%N|%P"          # job id, state, reason, node list, partition
# Slurm's pending reasons (squeue %r, Slurm 22.05's squeue(1) "JOB REASON CODES") a course job meets, in short words
REASON_WORDS = {
    "None": "not yet looked at by the scheduler", "Resources": "waiting for free CPUs or nodes",
    "Priority": "jobs ahead of it in the queue", "PartitionConfig": "asks more than the partition's nodes hold",
    "PartitionNodeLimit": "asks more nodes than the partition allows",
    "PartitionTimeLimit": "asks more time than the partition allows", "Dependency": "waits for another job",
    "BeginTime": "its start time has not come", "JobHeldUser": "held by its user (scontrol release)",
    "JobHeldAdmin": "held by an administrator", "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "NodeDown": "a node it needs is down", "Reservation": "waits for a reservation",
    "BadConstraints": "its constraints match no node", "Licenses": "waits for licenses",
}
REASON_PREFIXES = {"QOS": "over a limit of its QOS", "Assoc": "over a limit of its account"}
NODE_TROUBLE = ("DOWN", "NOT_RESPONDING", "FAIL", "DRAIN")   # flags in scontrol's State= of a lost node
CALL_TIMEOUT_S = 20.0
COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "srun")


@dataclass(frozen=True)
class JobState:
    """One squeue row: the job's state, Slurm's reason (why it waits), its node list and partition."""
    job_id: str
    state: str
    reason: str
    nodelist: str
    partition: str

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"


def _call(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=CALL_TIMEOUT_S)


def slurm_unreachable() -> str | None:
    """None when Slurm's commands are here and a controller answers (``scontrol ping``), else why not."""
    missing = [c for c in COMMANDS if not shutil.which(c)]
    if missing:
        return f"Slurm's commands are not installed here ({', '.join(missing)} missing): apt-get install slurm-client"
    try:
        out = _call("scontrol", "ping")
    except subprocess.TimeoutExpired:
        return "scontrol ping timed out: no Slurm controller answers"
    if out.returncode or " is UP" not in out.stdout:
        return ("Slurm's commands are installed, but no controller answers `scontrol ping` here (none is "
                "configured, or it is down)")
    return None


def parse_sbatch(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` (``<id>`` or ``<id>;<cluster>``)."""
    first = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = first.split(";")[0]
    if not job_id.isdigit():
        raise ValueError(f"sbatch --parsable printed no job id: {stdout!r}")
    return job_id


def sbatch(script: str, env: dict, cwd) -> str:
    """Submit a batch script (a path); returns the job id, or raises RuntimeError with sbatch's message."""
    out = subprocess.run(["sbatch", "--parsable", script], capture_output=True, text=True, env=env, cwd=cwd,
                         timeout=CALL_TIMEOUT_S)
    if out.returncode:
        raise RuntimeError(f"sbatch refused the job: {(out.stderr or out.stdout).strip()}")
    return parse_sbatch(out.stdout)


def parse_squeue(stdout: str) -> dict[str, JobState]:
    """Rows of ``squeue -o SQUEUE_FORMAT`` by job id."""
    rows = {}
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 5 and parts[0]:
            rows[parts[0]] = JobState(*parts)
    return rows


def job_state(job_id: str) -> JobState | None:
    """The job's row (ended jobs too while the controller remembers them), None once Slurm has forgotten it."""
    out = _call("squeue", "-h", "-t", "all", "-j", job_id, "-o", SQUEUE_FORMAT)
    return parse_squeue(out.stdout).get(job_id)


def pending_jobs(partition: str) -> dict[str, JobState]:
    """The partition's pending jobs in Slurm's priority order, from one squeue call (so state and place agree)."""
    return parse_squeue(_call("squeue", "-h", "-t", "PENDING", "-p", partition, "--sort=-p,i",
                              "-o", SQUEUE_FORMAT).stdout)


def reason_words(reason: str) -> str:
    """Slurm's pending reason code in short words (``Resources`` -> waiting for free CPUs or nodes), code kept."""
    words = REASON_WORDS.get(reason) or next((w for p, w in REASON_PREFIXES.items() if reason.startswith(p)), None)
    if reason in ("None", ""):
        return words or REASON_WORDS["None"]
    return f"{words} ({reason})" if words else f"Slurm's reason: {reason}"


def queue_line(job_id: str, queue: dict[str, JobState]) -> str | None:
    """What a pending job shows: its place in its partition's queue and why it waits; None when not in ``queue``."""
    place = place_in(list(queue), job_id)
    if place is None:
        return None
    st = queue[job_id]
    return (f"Slurm job {job_id}: {st.state}, place {place[0]} of {place[1]} in partition {st.partition}: "
            f"{reason_words(st.reason)}")


def place_in(order: list[str], job_id: str) -> tuple[int, int] | None:
    """1-based place of ``job_id`` in ``order`` and the length of the queue (None: not in it)."""
    return (order.index(job_id) + 1, len(order)) if job_id in order else None


def hostnames(nodelist: str) -> list[str]:
    """``n[1-2]`` -> ``['n1', 'n2']`` (``scontrol show hostnames``, Slurm's own expansion)."""
    if not nodelist or nodelist.startswith("("):
        return []
    return _call("scontrol", "show", "hostnames", nodelist).stdout.split()


def parse_node(text: str) -> dict[str, str]:
    """``scontrol -o show node`` output (one node) as a dict of its ``Key=Value`` fields."""
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", text))


def node_fields(name: str) -> dict[str, str]:
    """A node's fields as Slurm's controller has them (``scontrol -o show node``)."""
    return parse_node(_call("scontrol", "-o", "show", "node", name).stdout)


def node_trouble(fields: dict[str, str]) -> str | None:
    """The trouble flags of a node's ``State=`` (``IDLE+NOT_RESPONDING``, ``DOWN*``), None when it is healthy."""
    state = fields.get("State", "")
    flags = [t for t in NODE_TROUBLE if t in state] + (["NOT_RESPONDING"] if state.endswith("*") else [])
    return state if flags else None


def parse_partition_cpus(stdout: str, partition: str | None) -> tuple[str, list[int]]:
    """``sinfo -h -N -o '%N|%c|%P'`` rows -> (the partition, its nodes' CPU counts); None: the default one (``*``)."""
    rows = [line.strip().split("|") for line in stdout.splitlines() if line.count("|") == 2]
    if partition is None:
        partition = next((p.rstrip("*") for _, _, p in rows if p.endswith("*")), "")
    cpus = {n: int(c) for n, c, p in rows if p.rstrip("*") == partition and c.isdigit()}
    return partition, list(cpus.values())


def partition_cpus(partition: str | None) -> tuple[str, list[int]]:
    """The partition's name and its nodes' CPU counts as sinfo reports them (empty when sinfo does not say)."""
    return parse_partition_cpus(_call("sinfo", "-h", "-N", "-o", "%N|%c|%P").stdout, partition)


def scancel(job_id: str) -> None:
    """Ask Slurm to end the job (SIGTERM to its steps, SIGKILL after the cluster's KillWait)."""
    _call("scancel", job_id)
