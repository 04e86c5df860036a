"""Each chapter notebook executed with papermill (preset="ci"), then its recorded results asserted."""

from pathlib import Path

import pytest

from helpers.course import run_chapter
from helpers.multinode import netns_unavailable

pytestmark = pytest.mark.notebooks
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def execute(stem: str, tmp_path: Path) -> dict:
    run = run_chapter(NOTEBOOKS / f"{stem}.ipynb", "ci", tmp_path)
    assert run.ok, f"{stem} failed: {run.error} (executed notebook: {run.notebook})"
    page = Path(run.html).read_text(encoding="utf-8")
    assert "data:image/png;base64" in page, "the HTML handout embeds the chapter's figures"
    assert (tmp_path / "results" / f"{stem}.json").exists()
    return run.results


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


def test_01_load_imbalance(standin, tmp_path):
    r = execute("01_load_imbalance", tmp_path)
    kinds = {"contiguous", "distributed", "distributed_shuffle", "stratified"}
    assert set(r["max_tv"]) == set(r["min_classes_per_step"]) == set(r["accuracy"]) == kinds
    others = [v for k, v in r["max_tv"].items() if k != "stratified"]
    assert r["max_tv"]["stratified"] < min(others)
    assert r["min_classes_per_step"]["stratified"] > r["min_classes_per_step"]["contiguous"]
    assert r["min_classes_per_step"]["distributed"] <= 2, "DistributedSampler(shuffle=False) steps see 1-2 classes"
    assert all(0.0 <= a <= 1.0 for a in r["accuracy"].values())
    assert r["imagenet_scale_max_tv"]["stratified"] <= 0.002
    assert r["imagenet_scale_max_tv"]["stratified"] < r["imagenet_scale_max_tv"]["distributed_shuffle"]
    assert 0 < r["imagenet_scale_split_s"] < 5
    assert r["class_column_rejected"] is True


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



def test_02_oom_gradient_accumulation(standin, tmp_path):
    r = execute("02_oom_gradient_accumulation", tmp_path)
    assert r["oom_reproduced"] is True, "the full batch under the cap must fail with kind 'oom'"
    assert r["accumulation_succeeded"] is True
    assert r["grad_max_abs_diff_no_bn"] <= 1e-6
    assert 1e-4 < r["grad_max_abs_diff_bn"] < 1.0, "BatchNorm micro-batch statistics: a real, bounded difference"
    assert set(r["peak_rss_mb"]) == set(r["throughput_img_s"]) == {"full_batch", "accumulated"}
    assert r["peak_rss_mb"]["accumulated"] < r["peak_rss_mb"]["full_batch"]
    assert r["activation_mb"]["accumulated"] < 0.6 * r["activation_mb"]["full_batch"]
    assert all(v > 0 for v in r["throughput_img_s"].values())
    assert r["throughput_img_s"]["accumulated"] > 0.3 * r["throughput_img_s"]["full_batch"]   # shared machine: noisy
    # the planner counts what backward keeps; a composite oneDNN kernel ("conv+ref", picked on AVX-512 Xeons) also
    # holds reordered copies that grow with the batch (measured 0.32 there, 0.99 on an AVX2 EPYC)
    composite = any("+" in k for k in r["conv_kernels"].values())
    assert r["conv_kernels"], "oneDNN's convolution kernels are read from its verbose output"
    assert (0.2 if composite else 0.75) <= r["planner_vs_measured_slope_ratio"] <= 1.25
    assert r["builtin_cell_grad_ratio"] == pytest.approx(r["accumulation_steps"], rel=1e-3)
    assert r["builtin_parallel_grad_ratio"] == pytest.approx(r["accumulation_steps"], rel=1e-3)
    assert r["grad_check_same_on_all_ranks"] is True and r["grad_check_ranks"] >= 2, "compared across ranks, after the AllReduce"
    assert r["accumulated_samples_per_step"] == r["batch_per_rank"], "K micro-batches make the per-rank batch"
    assert r["blog_fits_40gb"] is True and 11 < r["blog_planner_gib"] < 12
    assert r["model_has_gradient_accumulation_steps"] is False
