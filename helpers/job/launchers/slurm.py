"""The Slurm launcher: one ``sbatch`` per job over ``slurm['nodes']`` nodes, its queue state while it waits, scancel to end it."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from pathlib import Path

import psutil

from helpers.core.config import JobConfig
from helpers.core.errors import ConfigError
from helpers.core.paths import LAUNCHER_PID_ENV
from helpers.core.slurm_settings import cpus_per_node, too_few_cpus
from helpers.job.msrun import find_msrun, job_env
from helpers.job.processes import JOB_ID_ENV, job_workers, kill_processes_with_env
from helpers.job.rank_guard import LAUNCHER_START_ENV
from helpers.job.slurm_queue import (hostnames, job_state, node_fields, node_trouble, partition_cpus, pending_jobs,
                                     queue_line, sbatch, scancel, slurm_unreachable)
from helpers.job.slurm_script import LEASE_RENEW_S, SLURM_SUBDIR, batch_script
from helpers.job.watch import RANK_GUARD, Verdict, node_log_tail, runs_module

QUERY_S = 1.0           # how often squeue / scontrol are asked (a room of notebooks polls one controller)
NODES_EVERY_S = 2.0     # how often the job's nodes' health is read
SHARED_FS_WAIT_S = 30.0  # running this long without every node's token: the run directory is not shared
END_WAIT_S = 120.0      # after scancel, how long to wait for Slurm to report the job ended
FINISH_WAIT_S = 60.0    # every summary written: how long the job may take to end by itself before scancel
FINISH_POLL_S = 0.3
# sbatch's words when a site enforces partition limits (EnforcePartLimits) and no node has the CPUs asked
CPU_REFUSALS = ("More processors requested than permitted", "Requested node configuration is not available",
                "CPU count per node can not be satisfied")

log = logging.getLogger(__name__)


def script_preview(cfg: JobConfig, run_dir: Path, worker: tuple[str, ...] = (), bin_dir=None) -> str:
    """The batch script ``run_job`` would submit for ``cfg`` into ``run_dir`` (no controller needed; token elided)."""
    cfg = cfg.replace(local_world_size=cfg.world_size // cfg.slurm.get("nodes", 1), node_rank=0)
    msrun = find_msrun(bin_dir)
    return batch_script(cfg, run_dir, run_dir / "config.json", msrun, str(Path(msrun).parent / "python"),
                        "<token>", worker)


class SlurmLauncher:
    """Submits the job with sbatch and follows it through squeue; ``procs`` is empty (no rank runs under this process)."""

    name = "slurm"

    def __init__(self, cfg: JobConfig, worker: tuple[str, ...] = (), bin_dir=None):
        reason = slurm_unreachable()
        if reason:
            raise ConfigError(f"launcher: 'slurm' cannot run here: {reason}")
        self.worker, self.msrun = worker, find_msrun(bin_dir)
        self.python = str(Path(self.msrun).parent / "python")
        self.procs: list = []
        self.job_id: str | None = None
        self.state = None
        self.nodes: list[str] = []
        self.local = cfg.world_size // cfg.slurm.get("nodes", 1)
        self.token = uuid.uuid4().hex
        self._asked = self._nodes_read = -1e9
        self._running_since: float | None = None
        self._lease_stop = threading.Event()
        self.queued_s = 0.0

    def place(self, cfg: JobConfig) -> JobConfig:
        """Ranks per node from the node count; each node's rank and the master come from Slurm when the job runs."""
        return cfg.replace(local_world_size=self.local, node_rank=0)

    def env(self, cfg: JobConfig, job_id: str) -> dict:
        env = job_env(cfg, job_id)
        for key in (LAUNCHER_PID_ENV, LAUNCHER_START_ENV):   # this process is not visible from other nodes:
            env.pop(key, None)                                # the lease ends the job when the notebook dies
        return env

    def record(self) -> dict:
        return {"slurm_job_id": self.job_id} if self.job_id else {}

    def start(self, cfg: JobConfig, run_dir: Path, config_path: Path, env: dict) -> None:
        self.cfg, self.run_dir, self.slurm_dir = cfg, run_dir, run_dir / SLURM_SUBDIR
        self._job_marker = env[JOB_ID_ENV]
        self.slurm_dir.mkdir(exist_ok=True)
        self.partition = cfg.slurm.get("partition")
        self.check_cpus(cfg)
        script = self.slurm_dir / "batch.sh"
        script.write_text(batch_script(cfg, run_dir, config_path, self.msrun, self.python, self.token, self.worker))
        (self.slurm_dir / "lease").touch()
        threading.Thread(target=self._renew_lease, daemon=True).start()
        self.submitted = time.monotonic()
        try:
            self.job_id = sbatch(str(script), env, run_dir)
        except RuntimeError as exc:                 # a site that enforces partition limits refuses at submit time
            if not any(text in str(exc) for text in CPU_REFUSALS):
                raise
            asked = cpus_per_node(cfg.slurm, cfg.local_workers, cfg.threads_per_rank)
            why = too_few_cpus(asked, self.partition or "(default)", [], cfg.slurm.get("nodes", 1))
            raise ConfigError(f"{why} ({str(exc).splitlines()[-1]})") from None

    def check_cpus(self, cfg: JobConfig) -> None:
        """Refuse, in one line, a job whose CPUs per node no node of its partition has (Slurm would keep it pending
        with reason PartitionConfig, or refuse it when the site enforces partition limits)."""
        partition, node_cpus = partition_cpus(self.partition)
        asked = cpus_per_node(cfg.slurm, cfg.local_workers, cfg.threads_per_rank)
        problem = too_few_cpus(asked, partition, node_cpus, cfg.slurm.get("nodes", 1)) if node_cpus else None
        if problem:
            raise ConfigError(problem)

    def _renew_lease(self) -> None:
        while not self._lease_stop.wait(LEASE_RENEW_S):
            try:
                os.utime(self.slurm_dir / "lease")
            except OSError:
                pass

    def _ask(self, force: bool = False):
        now = time.monotonic()
        if force or now - self._asked >= QUERY_S:
            self._asked = now
            self.state = job_state(self.job_id)
            if self.state and not self.nodes and not self.state.pending:
                self.nodes = hostnames(self.state.nodelist)
        return self.state

    def waiting(self, bar) -> bool:
        """True while the job is queued; shows its place in the queue and why it waits, read from one squeue call
        (two calls left the place out when the job moved between them)."""
        st = self._ask()
        if st is None or not st.pending:
            if self._running_since is None:
                self._running_since = time.monotonic()
                self.queued_s = self._running_since - self.submitted
            return False
        line = queue_line(self.job_id, pending_jobs(st.partition))
        if line is None:                        # it left the queue since: the next poll sees it running (or ended)
            self._ask(force=True)
            return True
        bar.queued(line)
        return True

    def check(self, watch, bar) -> Verdict | None:
        """Fill in the ranks' pids where they are visible; a lost node, an unshared run directory, an expired lease."""
        self._ask()
        if watch is not None and len(watch.pids) < self.cfg.world_size:
            watch.pids.update(self.visible_workers())
        if self.state and self.state.state == "NODE_FAIL":
            return self.lost_node(force=True) or Verdict(
                "node_lost", None, f"Slurm reports NODE_FAIL for job {self.job_id} on {self.nodes}",
                tail="\n".join(node_log_tail(self.run_dir, i, n) for i, n in enumerate(self.nodes)))
        lost = self.lost_node()
        if lost:
            return lost
        if (self.slurm_dir / "lease_expired").exists():
            return Verdict("interrupted", None, (self.slurm_dir / "lease_expired").read_text().strip())
        return self.unshared()

    def explain(self, verdict: Verdict) -> Verdict:
        """A crash without a rank (msrun killed before any worker: Slurm ends the step when one node fails) gets
        that node's own reason when it said it cannot see the run directory."""
        if verdict.kind == "crash" and verdict.rank is None:
            return self.unshared(crashed=True) or verdict
        return verdict

    def lost_node(self, force: bool = False) -> Verdict | None:
        """A node of the job that Slurm reports DOWN / NOT_RESPONDING, with that node's own log tail."""
        now = time.monotonic()
        if not self.nodes or (not force and now - self._nodes_read < NODES_EVERY_S):
            return None
        self._nodes_read = now
        for i, name in enumerate(self.nodes):
            trouble = node_trouble(node_fields(name))
            if trouble:
                return self.node_lost(i, f"Slurm reports it {trouble} (its slurmd stopped answering, or the node "
                                         "went down)")
        return None

    def node_lost(self, i: int, why: str) -> Verdict:
        name = self.nodes[i]
        return Verdict("node_lost", None, f"node {name} (ranks {i * self.local}-{(i + 1) * self.local - 1}) was lost: "
                       f"{why}", tail=node_log_tail(self.run_dir, i, name))

    def unshared(self, crashed: bool = False) -> Verdict | None:
        """Every node writes its token into the run directory; missing ones after a while (or once the job has
        ended, or ``crashed``: msrun died before any worker, and a node said it cannot see the run directory):
        the run directory is not on a filesystem every node sees."""
        ended = crashed or self.state is None or not self.state.active
        if (self._running_since is None and not crashed) or (
                not ended and time.monotonic() - self._running_since < SHARED_FS_WAIT_S):
            return None
        seen = {p.name for p in self.slurm_dir.glob("node_*") if self.token in p.read_text()}
        missing = [n for i, n in enumerate(self.nodes) if f"node_{i}" not in seen]
        if not missing:
            self._running_since = float("inf")          # checked once
            return None
        said = [line for p in self.slurm_dir.glob("batch-*.log") for line in p.read_text(errors="replace").splitlines()
                if "cannot see" in line]
        if not said and (crashed or not ended and time.monotonic() - self._running_since < 2 * SHARED_FS_WAIT_S):
            return None     # a node slow to start (a loaded machine) has not said why yet: wait for its own words
        return Verdict("crash", None, f"node(s) {', '.join(missing)} did not write their token into {self.run_dir}: "
                       "the run directory must be on a filesystem every node sees (set COURSE_HOME or run_root to a "
                       "shared path, such as a home directory on NFS)" + (f"\n  {said[0]}" if said else ""))

    def visible_workers(self) -> dict[int, int]:
        """rank -> pid of this job's workers that run on this machine (all of them on a one-server cluster)."""
        found = {}
        for p in job_workers(self._job_marker):
            try:
                env, parent = p.environ(), p.parent()
                if "RANK_ID" in env and parent is not None and runs_module(parent.cmdline(), RANK_GUARD):
                    found[int(env["RANK_ID"])] = p.pid
            except psutil.Error:
                continue
        return found

    def ended(self) -> bool:
        st = self._ask()
        return self.job_id is not None and (st is None or not st.active)

    def exit_text(self) -> str:
        st = self.state
        return f"Slurm job {self.job_id} ended ({st.state}, {st.reason})" if st else f"Slurm job {self.job_id} ended"

    def workers_running(self, job_id: str) -> bool:
        return not self.ended()

    def where(self, rank: int | None) -> str:
        if rank is None or not self.nodes:
            return ""
        return f"node {self.nodes[min(rank // self.local, len(self.nodes) - 1)]}"

    def finish(self, job_id: str, grace_s: float) -> None:
        """Every rank is done: let the job end by itself (exit 0, COMPLETED, not CANCELLED); scancel only a job that
        has not ended after FINISH_WAIT_S, or when interrupted while waiting."""
        try:
            deadline = time.monotonic() + FINISH_WAIT_S
            while not self._ended_now() and time.monotonic() < deadline:
                time.sleep(FINISH_POLL_S)
            if not self._ended_now():
                log.warning("Slurm job %s did not end %.0f s after its ranks finished: cancelled", self.job_id,
                            FINISH_WAIT_S)
        finally:
            self.stop(job_id, grace_s)

    def stop(self, job_id: str, grace_s: float) -> None:
        """scancel, then wait until Slurm reports the job ended; then end what of it is visible here."""
        self._job_marker = job_id
        self._lease_stop.set()
        if self.job_id is None:
            return
        deadline = time.monotonic() + END_WAIT_S
        if not self.ended():
            scancel(self.job_id)
        while not self._ended_now() and time.monotonic() < deadline:
            time.sleep(0.3)
        kill_processes_with_env(JOB_ID_ENV, job_id)   # a node whose slurmd died leaves its tasks running

    def _ended_now(self) -> bool:
        st = self._ask(force=True)
        return st is None or not st.active
