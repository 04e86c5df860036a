"""Chapter 00 executed with papermill (preset="ci"), then its recorded results asserted."""

import pytest

from helpers.multinode import netns_unavailable

from tests.notebooks.chapter_run import execute

pytestmark = pytest.mark.notebooks


def test_00_environment_setup(standin, tmp_path):
    r = execute("00_environment_setup", tmp_path)
    assert r["world_size"] == 8 and r["ranks_finished"] == 8
    assert r["weights_identical"] is True
    assert r["job_wall_s"] > 0
    assert r["rank_num_is_invalid"] is True
    if netns_unavailable() is None:
        assert r["multinode_world_size"] == 8 and r["multinode_weights_identical"] is True
    else:
        assert r["multinode_skipped"]
