"""A notebook cell run on every rank through a real Slurm cluster (``run_cell`` with launcher "slurm"):
the same per-rank results as a local job, the ranks spread over both nodes, nothing left."""

import time

import pytest

from helpers.cells.run import run_cell
from tests.job_marks import left, marker  # noqa: F401 (marker is a fixture)
from tests.jobs.test_cell_jobs import MAGIC, NET_CELL, net_returns

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]


def test_a_cell_on_two_nodes_returns_every_ranks_value(cluster, ci_config, tmp_path, marker):
    """A cell with its own GRAPH-mode net on 2 nodes x 2 ranks through Slurm: every finish() is back."""
    cfg = ci_config.replace(world_size=4, global_batch=32, timeout_s=400.0, launcher="slurm",
                            slurm={"nodes": 2})
    t0 = time.monotonic()
    res = run_cell(NET_CELL, cfg, {"scale": 0.5}, magic_line=MAGIC, progress="text", run_root=tmp_path)
    print(f"a cell on 2 x 2 ranks through Slurm: {time.monotonic() - t0:.1f} s")
    assert res.returns == net_returns(cfg, 0.5), res.returns
    assert all(len(res.steps[r]) == cfg.steps for r in range(4))
    assert sorted(p.parent.name for p in res.log_dir.rglob("worker_*.log")) == ["node0"] * 2 + ["node1"] * 2
    assert not cluster.our_jobs(), f"still in squeue: {cluster.our_jobs()}"
    assert not left(marker), f"{len(left(marker))} processes of the job left"
