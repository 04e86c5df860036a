"""Launcher overhead: the same 8-rank no-op job through ``run_job`` and through the bare msrun CLI.

Alternates the two, ``--repeats`` times each, and prints the median wall times and their ratio as JSON.
Goal: run_job / msrun <= 1.10.

    python -m benchmarks.launch_overhead [--repeats 3] [--world-size 8]
"""

from __future__ import annotations

import argparse
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


def main(argv=None):
    """Alternate bare msrun and ``run_job`` of an empty job; print the times and their ratio as JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--world-size", type=int, default=8)
    args = ap.parse_args(argv)
    cfg = job_config("ci", name="noop", task="noop", world_size=args.world_size, global_batch=8 * args.world_size)
    times = {"run_job": [], "msrun": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for _ in range(args.repeats):
            times["msrun"].append(bare_msrun(cfg, root))
            times["run_job"].append(launcher(cfg, root))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"benchmark": "launch_overhead", "world_size": args.world_size, "repeats": args.repeats,
                      "seconds": times, "median_s": med, "ratio_run_job_over_msrun": med["run_job"] / med["msrun"],
                      "goal": "<= 1.10"}, indent=2))


if __name__ == "__main__":
    main()
