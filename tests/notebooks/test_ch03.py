"""Chapter 03 executed with papermill (preset="ci"), then its recorded results asserted."""


import pytest

from tests.notebooks.chapter_run import execute

pytestmark = pytest.mark.notebooks


def test_03_hybrid_parallel(standin, tmp_path):
    r = execute("03_hybrid_parallel", tmp_path)
    assert r["layouts_run"] == ["8x1", "4x2"]
    assert r["max_param_diff_vs_reference"] <= 1e-5, r["param_diff_vs_reference_per_step"]
    assert r["max_loss_diff_vs_reference"] <= 1e-5
    bytes_ = r["classifier_param_bytes_per_rank"]
    assert set(bytes_) == {"dp", "hybrid"} and bytes_["hybrid"] * 2 == bytes_["dp"]
    assert r["merged_checkpoint_max_diff"] == 0.0
    assert r["resumed_on_layout"] == "2x4"
    assert r["bad_strategy_rejected"] is True
