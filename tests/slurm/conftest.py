"""A real two-node Slurm cluster for the module's tests (``tests/slurm/cluster.py``); skipped with the reason without root or Slurm."""

import time

import pytest

from tests.slurm.cluster import slurm_unavailable, start_cluster, stop_cluster


@pytest.fixture(scope="session")
def slurm_cluster():
    """munged, slurmctld and slurmd n1, n2 (each in its own network namespace), idle; everything stopped at the end."""
    reason = slurm_unavailable()
    if reason:
        pytest.skip(reason)
    t0 = time.monotonic()
    cluster = start_cluster(2)
    print(f"Slurm cluster up in {time.monotonic() - t0:.1f} s: nodes {[(n.name, n.addr) for n in cluster.nodes]}")
    yield cluster
    stop_cluster(cluster)
    assert not cluster.workers_in_namespaces()


@pytest.fixture()
def cluster(slurm_cluster):
    """The session's cluster, with every node idle before the test and no job of ours left after it."""
    slurm_cluster.wait_idle()
    yield slurm_cluster
    assert not slurm_cluster.our_jobs(), f"Slurm jobs left in squeue: {slurm_cluster.our_jobs()}"
