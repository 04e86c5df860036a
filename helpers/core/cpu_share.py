"""A rank's own CPU quota (a cgroup per rank): on a machine with fewer cores than ranks, each rank gets its share
of the cores, as a card server gives each rank cores of its own, so a rank with more to decode cannot borrow the
cores an idle rank leaves.

The rank joins ``<its cpu cgroup>/ms_course_<job id>/rank_<r>`` once and switches the quota on around the work
to be timed (``CpuShare.held``); the launcher removes the job's groups after the ranks end (``remove_job_groups``).
cgroup v1 (``cpu.cfs_quota_us``) and v2 (``cpu.max``) are both handled; without a writable cpu controller (not
root, macOS) ``join_rank_group`` raises ``CpuShareUnavailable`` saying why.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from helpers.core.footprint import tree

PERIOD_US = 20_000          # a short CFS period: the quota evens out within a step instead of in 100 ms bursts
PREFIX = "ms_course_"
QUIET = 0.25       # other work up to this fraction of the cores in every phase: the ranks got their shares


class CpuShareUnavailable(RuntimeError):
    """No per-rank CPU quota can be set on this machine (the reason is the message)."""


def cpu_cgroup(mountinfo: str | None = None, self_cgroup: str | None = None) -> tuple[Path, int]:
    """This process's cgroup directory with the cpu controller, and the cgroup version (1 or 2)."""
    mountinfo = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
    self_cgroup = Path("/proc/self/cgroup").read_text() if self_cgroup is None else self_cgroup
    mounts = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fstype, _, options = (right.split() + ["", "", ""])[:3]
        point = left.split()[4]
        if fstype == "cgroup" and "cpu" in options.split(","):
            mounts[1] = Path(point)
        elif fstype == "cgroup2":
            mounts.setdefault(2, Path(point))
    for line in self_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if 1 in mounts and "cpu" in controllers.split(","):
            return mounts[1] / path.lstrip("/"), 1
    if 2 in mounts:
        for line in self_cgroup.splitlines():
            if line.startswith("0::"):
                return mounts[2] / line[3:].lstrip("/"), 2
    raise CpuShareUnavailable("no cgroup cpu controller is mounted here")


class CpuShare:
    """One rank's cgroup: ``limit(share)`` caps it at ``share`` of one core (None: no cap)."""

    def __init__(self, group: Path, version: int):
        self.group, self.version = Path(group), version

    def limit(self, share: float | None) -> None:
        """Cap this group at ``share`` of one core, or lift the cap (``None``)."""
        quota = None if share is None else max(1000, int(share * PERIOD_US))
        if self.version == 1:
            (self.group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.group / "cpu.cfs_quota_us").write_text("-1" if quota is None else str(quota))
        else:
            (self.group / "cpu.max").write_text(f"{'max' if quota is None else quota} {PERIOD_US}")

    @contextmanager
    def held(self, share: float):
        """The cap on for the ``with`` block, lifted after it (also when the block raises)."""
        self.limit(share)
        try:
            yield self
        finally:
            self.limit(None)


def busy_seconds() -> float:
    """CPU seconds this machine's cores have been busy since boot (a hypervisor's steal included)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


def cpu_seconds(pids) -> float:
    """CPU seconds (user and system) the processes ``pids`` have used; one that has ended counts nothing."""
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(int(pid)).cpu_times()
            total += t.user + t.system
        except (psutil.Error, ValueError):
            pass
    return total


def group_seconds(job: Path) -> float:
    """CPU seconds the processes now in the job's rank groups have used."""
    return cpu_seconds(pid for procs in job.glob("rank_*/cgroup.procs") for pid in procs.read_text().split())


def own_seconds(root: int) -> float:
    """CPU seconds the processes now in ``root``'s tree (the launching kernel, msrun, the ranks) have used."""
    return cpu_seconds(p.pid for p in tree([root]))


class OtherWork:
    """How much of the cores work outside the course's job took while its ranks held their shares, per phase: a
    quota caps a rank but cannot give it the share another program (a second job, a test beside this one) is using.
    The job's own work is its launcher's process tree (``own_root``: the launching kernel, msrun, the ranks), or
    without one the job's rank groups."""

    def __init__(self, share: CpuShare, own_root: int | None = None):
        job = share.group.parent
        self.own = (lambda: own_seconds(own_root)) if own_root else (lambda: group_seconds(job))
        self.phases = {}

    @contextmanager
    def during(self, phase: str):
        """Count the block's wall seconds and the CPU seconds the machine spent outside the job toward ``phase``."""
        t0, busy0, own0 = time.monotonic(), busy_seconds(), self.own()
        try:
            yield
        finally:
            wall, other = self.phases.get(phase, (0.0, 0.0))
            self.phases[phase] = (wall + time.monotonic() - t0, other + busy_seconds() - busy0 - (self.own() - own0))

    def cores(self) -> dict:
        """Other work's mean cores over every held block and the most over one phase (None before any block)."""
        wall = sum(w for w, _ in self.phases.values())
        if not wall:
            return dict(other_cores=None, other_cores_max=None)
        return dict(other_cores=max(0.0, sum(o for _, o in self.phases.values()) / wall),
                    other_cores_max=max(max(0.0, o / w) for w, o in self.phases.values() if w))


def quiet(record: dict, cores: int) -> bool:
    """Whether work outside the job stayed within ``QUIET`` of the machine's cores in every phase of a ``cpu_share``
    record; True where it was not counted."""
    most = record.get("other_cores_max")
    return most is None or most <= QUIET * cores


def join_rank_group(job_id: str, rank: int, pid: int | None = None, base: tuple[Path, int] | None = None) -> CpuShare:
    """Move process ``pid`` (default this one, with all its threads) into the job's group for ``rank``, uncapped;
    ``base``: the parent cgroup directory and version (default this process's cpu cgroup)."""
    parent, version = base or cpu_cgroup()
    job = parent / f"{PREFIX}{job_id}"
    group = job / f"rank_{rank}"
    try:
        group.mkdir(parents=True, exist_ok=True)
        if version == 2:
            _enable_cpu(parent)
            _enable_cpu(job)
        share = CpuShare(group, version)
        share.limit(None)
        (group / "cgroup.procs").write_text(str(pid or os.getpid()))
    except OSError as e:
        raise CpuShareUnavailable(f"cannot set a CPU quota in {group}: {e.strerror or e}") from None
    return share


def _enable_cpu(group: Path) -> None:
    """cgroup v2: the cpu controller for ``group``'s children (already on: nothing to do)."""
    control = group / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        control.write_text("+cpu")


def remove_job_groups(job_id: str | None = None, base: tuple[Path, int] | None = None) -> int:
    """Remove the job's groups (every course job's with ``job_id`` None) whose processes have ended; the count
    removed. A group still holding a process stays."""
    try:
        parent, _ = base or cpu_cgroup()
    except (CpuShareUnavailable, OSError):
        return 0
    removed = 0
    for job in parent.glob(f"{PREFIX}{job_id or '*'}"):
        for group in [*sorted(job.glob("rank_*")), job]:
            if _remove(group):
                removed += 1
    return removed


def _remove(group: Path) -> bool:
    """rmdir a cgroup; False while it (or a child) holds a process."""
    try:
        group.rmdir()
        return True
    except OSError:
        return False


def fair_share(cfg, cores: int | None = None) -> float | None:
    """Each rank's share of this machine's cores (``cores / ranks here``) for a CPU job whose ranks outnumber the
    cores; None where each rank has cores of its own, or on cards."""
    cores = cores or os.cpu_count() or 1
    if cfg.device_target != "CPU" or cfg.launcher != "local" or cfg.local_workers <= cores:
        return None
    return cores / cfg.local_workers
