"""Chapter 02 executed with papermill (preset="ci"), then its recorded results asserted."""


import pytest

from tests.notebooks.chapter_run import execute

pytestmark = pytest.mark.notebooks


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
