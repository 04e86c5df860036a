"""Chapter 04 executed with papermill (preset="ci"), then its recorded results asserted."""

from pathlib import Path

import pytest

from tests.notebooks.chapter_run import execute

pytestmark = pytest.mark.notebooks


def test_04_profiling(standin, tmp_path):
    r = execute("04_profiling", tmp_path)
    keys = {"baseline", "fused"}
    assert set(r["allreduce_per_step"]) == set(r["step_time_s"]) == set(r["comm_share"]) == keys
    assert r["allreduce_per_step"]["fused"] < r["allreduce_per_step"]["baseline"]
    assert r["allreduce_per_step"]["fused"] == 1 and r["allreduce_per_step"]["baseline"] >= 20
    assert r["cell_comm_fusion_allreduce_per_step"] == r["allreduce_per_step"]["baseline"]
    assert all(0.0 < r["comm_share"][k] < 1.0 for k in keys)
    assert r["comm_share"]["fused"] < r["comm_share"]["baseline"]
    assert all(0.0 < r["step_time_s"][k] < 60 for k in keys)
    assert r["step_time_s"]["fused"] < r["step_time_s"]["baseline"]
    assert 0.2 < r["profiler_overhead_ratio"] < 5   # 2 vs 2 steps on a shared machine: noisy
    assert set(r["amp_step_time_s"]) == {"O0", "O1", "O2", "O3"}
    assert all(0.0 < v < 60 for v in r["amp_step_time_s"].values())
    assert r["amp_cast_kernels_per_step"]["O0"] == 0 < r["amp_cast_kernels_per_step"]["O3"]
    assert r["o3_keeps_conv_bn_relu_kernels"] is True
    assert r["comm_fusion_module_exists"] is False
    assert Path(r["trace_path"]).name == "merged_trace.json" and Path(r["trace_path"]).exists()
