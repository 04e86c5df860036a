"""The start-up settings the launcher gives every rank, and the log lines benchmarks.startup times init() by, are
MindSpore 2.10's own: pinned to the wheel's binaries."""

import pytest

from benchmarks.startup import ADDRESS_SLEEP, RANK_OUT_OF_BUILD, TOPOLOGY_BUILT
from helpers.core.config import job_config
from helpers.job.msrun import RETRY_INTERVAL_ENV, job_env
from tests.contract.wheel import assert_pinned

# The heartbeat that carries "every rank registered" to each rank reads both (compute_graph_node.cc, Heartbeat).
CLUSTER_LIB = "lib/libmindspore_cluster.so"


@pytest.mark.parametrize("name", RETRY_INTERVAL_ENV)
def test_the_heartbeat_interval_variables_are_the_wheels(name):
    assert_pinned(name, CLUSTER_LIB)


def test_every_rank_gets_a_one_second_heartbeat_unless_the_user_set_one():
    cfg = job_config("ci", world_size=2, global_batch=4)
    env = job_env(cfg, "job", base={"PATH": "/usr/bin"})
    assert [env[name] for name in RETRY_INTERVAL_ENV] == ["1", "1"]
    mine = job_env(cfg, "job", base={"PATH": "/usr/bin", RETRY_INTERVAL_ENV[0]: "2", RETRY_INTERVAL_ENV[1]: "4"})
    assert [mine[name] for name in RETRY_INTERVAL_ENV] == ["2", "4"]


@pytest.mark.parametrize("text, relpath", [TOPOLOGY_BUILT, RANK_OUT_OF_BUILD, ADDRESS_SLEEP])
def test_the_log_lines_the_startup_benchmark_reads_are_the_wheels(text, relpath):
    assert_pinned(text, relpath)
