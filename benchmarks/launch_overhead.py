"""Launcher overhead: the same 8-rank no-op job through ``run_job`` and through the bare msrun CLI, and (as root with
Slurm installed) through ``run_job`` on a two-node Slurm cluster started on this machine (2 nodes x 4 ranks).

Alternates them, ``--repeats`` times each, and prints the median wall times and their ratios as JSON.
Goals: run_job / msrun <= 1.10; Slurm run_job (2 x 4) / msrun <= 1.5.

    python -m benchmarks.launch_overhead [--repeats 3] [--world-size 8] [--no-slurm]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from helpers.core.config import job_config
from helpers.job.launch import find_msrun, free_port, job_env, msrun_command, run_job


def bare_msrun(cfg, root: Path) -> float:
    """Seconds of one msrun call of the job's config with nothing of ours around it."""
    run_dir = Path(tempfile.mkdtemp(dir=root))
    cfg = cfg.replace(master_port=free_port())
    config_path = cfg.save(run_dir / "config.json")
    cmd = msrun_command(cfg, config_path, run_dir / "logs", find_msrun())
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=run_dir, env=job_env(cfg, f"bench-{run_dir.name}"), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def launcher(cfg, root: Path) -> float:
    """Seconds of one ``run_job`` of the same config."""
    t0 = time.monotonic()
    run_job(cfg, progress="none", run_root=root)
    return time.monotonic() - t0


@contextlib.contextmanager
def slurm_cluster(wanted: bool):
    """The tests' two-node Slurm cluster (tests/slurm/cluster.py) for the Slurm row, or None with the reason."""
    from tests.slurm.cluster import slurm_unavailable, start_cluster, stop_cluster

    reason = "--no-slurm" if not wanted else slurm_unavailable()
    if reason:
        yield None, reason
        return
    cluster = start_cluster(2)
    try:
        yield cluster, ""
    finally:
        stop_cluster(cluster)


def main(argv=None):
    """Alternate bare msrun, ``run_job`` and ``run_job`` through Slurm of an empty job; print times and ratios as JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--no-slurm", action="store_true")
    args = ap.parse_args(argv)
    cfg = job_config("ci", name="noop", task="noop", world_size=args.world_size, global_batch=8 * args.world_size)
    times = {"run_job": [], "msrun": []}
    with tempfile.TemporaryDirectory() as tmp, slurm_cluster(not args.no_slurm) as (cluster, skipped):
        root = Path(tmp)
        if cluster:
            times["slurm_run_job"] = []
        for _ in range(args.repeats):
            times["msrun"].append(bare_msrun(cfg, root))
            times["run_job"].append(launcher(cfg, root))
            if cluster:
                times["slurm_run_job"].append(launcher(cfg.replace(launcher="slurm", slurm={"nodes": 2}), root))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"benchmark": "launch_overhead", "world_size": args.world_size, "repeats": args.repeats,
           "seconds": times, "median_s": med, "ratio_run_job_over_msrun": med["run_job"] / med["msrun"],
           "goal": "<= 1.10"}
    if cluster:
        out.update(ratio_slurm_over_msrun=med["slurm_run_job"] / med["msrun"], goal_slurm="<= 1.5",
                   slurm_layout="2 nodes x 4 ranks, slurmd per network namespace on this machine (tests/slurm)")
    else:
        out["slurm_skipped"] = skipped
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
