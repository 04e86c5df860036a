"""Launchers: what starts a job's ranks (``local``: msrun here; ``slurm``: sbatch), chosen by ``JobConfig.launcher``."""

from __future__ import annotations


def make_launcher(cfg, launches: list[dict] | None = None, worker: tuple[str, ...] = (), bin_dir=None):
    """The launcher ``cfg.launcher`` names, ready to ``start`` (a ConfigError if it cannot run here)."""
    if cfg.launcher == "slurm":
        from helpers.job.launchers.slurm import SlurmLauncher

        return SlurmLauncher(cfg, worker=worker, bin_dir=bin_dir)
    from helpers.job.launchers.local import LocalLauncher

    return LocalLauncher(launches=launches, worker=worker, bin_dir=bin_dir)


def cancel_orphan(rec: dict) -> None:
    """End a job a dead launcher left elsewhere (a registry record with ``slurm_job_id``: scancel it)."""
    from helpers.job.slurm_queue import scancel

    scancel(rec["slurm_job_id"])
