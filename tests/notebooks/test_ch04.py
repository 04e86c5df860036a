"""Chapter 04 executed with papermill (preset="ci"), then its recorded results asserted."""

import math
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
    # The profiler's overhead is recorded, not bounded: 2 profiled vs 2 unprofiled steps of one job on a shared
    # 2-core machine, where another engineer's job moves a step by more than the profiler does (compare the
    # runs in benchmarks/results/comm_fusion.json). Only what holds at any scale is asserted.
    assert math.isfinite(r["profiler_overhead_ratio"]) and r["profiler_overhead_ratio"] > 0
    assert set(r["amp_step_time_s"]) == {"O0", "O1", "O2", "O3"}
    assert all(0.0 < v < 60 for v in r["amp_step_time_s"].values())
    assert r["amp_cast_kernels_per_step"]["O0"] == 0 < r["amp_cast_kernels_per_step"]["O3"]
    assert r["o3_keeps_conv_bn_relu_kernels"] is True
    assert r["comm_fusion_module_exists"] is False
    assert Path(r["trace_path"]).name == "merged_trace.json" and Path(r["trace_path"]).exists()
    # the kernels counted as convolution are the ones that ran them (im2col: unfold + MatMul kernels)
    assert r["conv_impl"] in ("native", "im2col")
    assert r["conv_kernel_types"][0] == ("Conv2D" if r["conv_impl"] == "native" else "Im2Col")
    assert r["amp_kernels_per_step"]["O0"][r["conv_kernel_types"][0]] > 0, "the counted convolution kernels ran"
    claims = {c["id"]: c for c in r["claims"]}
    for mechanism in ("fusion_cuts_allreduce_calls", "fusion_cuts_comm_share", "cell_fusion_ids_alone_change_nothing",
                      "no_ops_comm_fusion_module", "amp_adds_cast_kernels", "o3_fuses_nothing"):
        assert claims[mechanism]["holds"] is True, claims[mechanism]["text"]
    for observation in ("profiler_overhead", "reduction_cost_without_profiler", "amp_speed_here", "before_after_here"):
        assert claims[observation]["holds"] is None
    # the first look: the job's own split steps and its straggler verdict, recorded and stated
    assert r["first_look_steps"] >= 3 and 0.0 < r["first_look_comm_share"] < 1.0 and r["first_look_spread"] >= 0
    assert r["first_look_job"] == "profiler-code"      # the code cell's launch ran it (%%ranks ... --then look_job)
    assert r["jobs_from_code_cell"] == ["baseline", "no_reduce", "fused_auto", "cell_ids_only"], "and, on CPU, these"
    assert set(r["first_look_verdict"]) >= {"rank", "cause", "wait_s", "spread_s", "steps", "method"}
    assert r["first_look_verdict"]["method"] == "split" and len(r["first_look_split"]) == 8
    assert {"first_look_agrees_with_profiler", "first_look_verdict", "comm_wait_vs_collective"} <= set(claims)
    w = r["first_look_comm_wait"]       # the AllReduce's time: waiting for the last rank + the collective's own
    assert w["comm_s"] == pytest.approx(w["wait_s"] + w["collective_s"]) and w["collective_s"] > 0
    # the baseline trace: AllReduces issued between backward kernels, none overlapping them on CPU
    o = r["comm_overlap"]
    assert o["comm_ms"] > 0 and o["backward_after_first_comm"] > 0 and "allreduce_overlap" in claims
