"""The local launcher: one msrun per entry of ``launches`` on this machine, each in its own session."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers.core.config import JobConfig
from helpers.job.msrun import find_msrun, job_env, msrun_command
from helpers.job.processes import job_workers, stop_job


def start_msrun(cfg: JobConfig, spec: dict, i: int, n: int, run_dir: Path, config_path: Path, msrun: str,
                env: dict, worker: tuple[str, ...] = ()) -> subprocess.Popen:
    """Start one msrun (node ``spec``) in its own session, its output in ``<run_dir>/msrun[i].log``."""
    node_cfg = cfg.replace(**{k: v for k, v in spec.items() if k not in ("prefix", "env")})
    log_dir = run_dir / "logs" / (f"node{node_cfg.node_rank}" if n > 1 else "")
    cmd = list(spec.get("prefix", [])) + msrun_command(node_cfg, config_path, log_dir, msrun, worker)
    with open(run_dir / f"msrun{i if n > 1 else ''}.log", "wb") as out:
        return subprocess.Popen(cmd, cwd=run_dir, env={**env, **spec.get("env", {})}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


class LocalLauncher:
    """msrun here (``launches``: one dict per msrun, see ``run_job``); ``procs`` are the msrun processes."""

    name = "local"

    def __init__(self, launches: list[dict] | None = None, worker: tuple[str, ...] = (), bin_dir=None):
        self.launches, self.worker, self.bin_dir = launches or [{}], worker, bin_dir
        self.msrun = find_msrun(bin_dir)            # a ConfigError before anything is written or started
        self.procs: list[subprocess.Popen] = []
        self.queued_s = 0.0                          # seconds the job waited before its ranks started

    def place(self, cfg: JobConfig) -> JobConfig:
        """The config as this launcher runs it (placement fields are the caller's here)."""
        return cfg

    def env(self, cfg: JobConfig, job_id: str) -> dict:
        return job_env(cfg, job_id, bin_dir=self.bin_dir)

    def record(self) -> dict:
        """What the job registry keeps about this launch besides the job id (nothing: processes carry the id)."""
        return {}

    def start(self, cfg: JobConfig, run_dir: Path, config_path: Path, env: dict) -> None:
        for i, spec in enumerate(self.launches):
            self.procs.append(start_msrun(cfg, spec, i, len(self.launches), run_dir, config_path, self.msrun, env,
                                          self.worker))

    def waiting(self, bar) -> bool:
        """Whether the job still waits for resources before its ranks start (never: msrun starts them now)."""
        return False

    def exit_text(self) -> str:
        return "msrun exited"

    def explain(self, verdict):
        """The watch's verdict as it stands: one machine has no other reason to give."""
        return verdict

    def check(self, watch, bar):
        """A failure only the launcher sees (none here: msrun's processes are the watch's)."""
        return None

    def ended(self) -> bool:
        return all(p.poll() is not None for p in self.procs)

    def workers_running(self, job_id: str) -> bool:
        return any(p.poll() is None for p in self.procs) and bool(job_workers(job_id))

    def where(self, rank: int | None) -> str:
        """Where ``rank`` ran, for a failure message ("" on one machine)."""
        return ""

    def finish(self, job_id: str, grace_s: float) -> None:
        """Every rank is done: end MindSpore's idle teardown now (msrun's SIGINT, then the sweep)."""
        self.stop(job_id, grace_s)

    def stop(self, job_id: str, grace_s: float) -> None:
        stop_job(self.procs, job_id, grace_s=grace_s)
