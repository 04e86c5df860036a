"""The batch script a Slurm job runs: a lease watcher, the first node's address and a free port, one msrun per node via srun."""

from __future__ import annotations

import shlex
from pathlib import Path

from helpers.core.config import JobConfig
from helpers.core.slurm_settings import cpus_per_node, sbatch_options
from helpers.job.msrun import msrun_command

LEASE_S = 30            # the notebook renews the lease every LEASE_RENEW_S; older than this, the job cancels itself
LEASE_CHECK_S = 5
LEASE_RENEW_S = 5.0
# the three msrun arguments only the job knows once it runs, and the shell variables that carry them
PER_NODE = {"--node_rank=": "$SLURM_NODEID", "--master_addr=": "$MASTER_ADDR", "--master_port=": "$MASTER_PORT"}
SLURM_SUBDIR = "slurm"  # <run_dir>/slurm: the script, the lease, each node's token, the batch log


def node_command(cfg: JobConfig, run_dir: Path, config_path: Path, msrun: str, worker: tuple[str, ...]) -> str:
    """One node's msrun as a shell line: the job's fixed arguments quoted, the per-node ones as variables."""
    cmd = msrun_command(cfg, config_path, run_dir / "logs" / "node0", msrun, worker)
    words = []
    for arg in cmd:
        key = next((k for k in PER_NODE if arg.startswith(k)), None)
        if key:
            words.append(f"{key}{PER_NODE[key]}")
        elif arg.startswith("--log_dir="):
            words.append(f"--log_dir={shlex.quote(str(run_dir / 'logs'))}/node$SLURM_NODEID")
        else:
            words.append(shlex.quote(arg))
    return " ".join(words)


def batch_script(cfg: JobConfig, run_dir: Path, config_path: Path, msrun: str, python: str, token: str,
                 worker: tuple[str, ...] = ()) -> str:
    """The whole ``sbatch`` script of a job (``cfg.slurm`` gives its options; ranks per node = local_workers)."""
    slurm_dir = run_dir / SLURM_SUBDIR
    q = shlex.quote
    asked = sbatch_options(cfg.slurm, cfg.local_workers, cfg.threads_per_rank, cfg.device_target)
    options = "\n".join(f"#SBATCH {o}" for o in [f"--job-name=course-{cfg.name}", *asked,
                                                  f"--output={slurm_dir}/batch-%j.log", "--no-requeue"])
    nodes = cfg.slurm.get("nodes", 1)
    cpus = cpus_per_node(cfg.slurm, cfg.local_workers, cfg.threads_per_rank)
    return f"""#!/bin/bash
{options}
# Written by helpers.job.launchers.slurm: {cfg.world_size} ranks = {nodes} node(s) x {cfg.local_workers}.
SLURM_DIR={q(str(slurm_dir))}
LEASE="$SLURM_DIR/lease"
lease_age() {{ echo $(( $(date +%s) - $(stat -c %Y "$LEASE" 2>/dev/null || echo 0) )); }}
# First thing: a job whose notebook died while it waited in the queue starts no rank (its lease is already old).
age=$(lease_age)
if [ "$age" -gt {LEASE_S} ]; then
  echo "lease not renewed for $age s when the job started: the notebook that submitted it is gone; no rank started" \
    | tee "$SLURM_DIR/lease_expired"
  exit 0
fi
# The notebook renews $LEASE every {LEASE_RENEW_S:.0f} s; when it stops (a dead kernel) the job cancels itself.
# Its sleep is waited for, so the TERM sent when the ranks are done ends it at once and leaves no sleep behind.
( trap 'kill $NAP 2>/dev/null; exit 0' TERM
  while :; do
    sleep {LEASE_CHECK_S} & NAP=$!; wait $NAP
    age=$(lease_age)
    if [ "$age" -gt {LEASE_S} ]; then
      echo "lease not renewed for $age s: the notebook that submitted this job is gone" > "$SLURM_DIR/lease_expired"
      scancel "$SLURM_JOB_ID"; exit 0
    fi
  done ) &
LEASE_WATCH=$!
# The master is the first node, by the address Slurm reaches it at (node names need not resolve).
FIRST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR=$(scontrol -o show node "$FIRST" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')
export MASTER_PORT=$({q(python)} -c 'from helpers.job.msrun import free_port; print(free_port())')
read -r -d '' NODE_SCRIPT <<'NODE'
# Every node: prove it sees the run directory (the notebook reads the token), then run its msrun.
if [ ! -f {q(str(config_path))} ]; then
  echo "node $(hostname) ($SLURMD_NODENAME) cannot see {config_path}: the run directory is not on a shared filesystem" >&2
  sleep 2   # let srun forward that line before the step ends (a loaded CI run's batch log lacked it)
  exit 3
fi
echo "{token} $SLURMD_NODENAME $(hostname)" > {q(str(slurm_dir))}/node_$SLURM_NODEID
cd {q(str(run_dir))}
exec {node_command(cfg, run_dir, config_path, msrun, worker)} > {q(str(run_dir))}/msrun$SLURM_NODEID.log 2>&1
NODE
# The step's task takes the node's whole share (srun of Slurm 22.05 does not inherit --cpus-per-task).
srun --nodes={nodes} --ntasks-per-node=1 --cpus-per-task={cpus} --kill-on-bad-exit=1 bash -c "$NODE_SCRIPT"
code=$?
kill $LEASE_WATCH 2>/dev/null
wait $LEASE_WATCH 2>/dev/null
# Ranks done: the job ends by itself with srun's exit code (0 when every msrun exited 0; sacct: COMPLETED).
exit $code
"""
