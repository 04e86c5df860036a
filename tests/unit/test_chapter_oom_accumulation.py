"""Chapter 02's steps without launching jobs: sizes per preset, the planner's tables, the cap, the grad-check
reduction over ranks, and the record the conclusions read (``helpers.chapters.oom_accumulation``)."""

from types import SimpleNamespace

import numpy as np
import pytest

from helpers.chapters import oom_accumulation as oa
from helpers.conclusions import ch02
from helpers.core.errors import JobFailed
from helpers.topics import memory_scenarios as scenarios

RECORD_KEYS = {
    "preset", "rehearsal", "device_target", "arch", "world_size", "oom_reproduced", "oom_error_kind", "mem_cap_mb",
    "accumulation_succeeded", "batch_per_rank", "micro_batch", "accumulation_steps", "accumulated_samples_per_step",
    "conv_impl", "peak_rss_mb", "activation_mb", "throughput_img_s", "grad_check_ranks", "grad_check_same_on_all_ranks",
    "grad_max_abs_diff_no_bn", "grad_max_abs_diff_bn", "grad_max_rel_diff_bn", "grad_cosine_bn",
    "grad_max_abs_diff_bn_frozen", "grad_max_rel_diff_bn_frozen", "grad_cosine_bn_frozen", "bn_frozen_layers",
    "builtin_cell_grad_ratio", "builtin_parallel_grad_ratio", "planner_slope_mib_per_image",
    "measured_slope_mib_per_image", "planner_vs_measured_slope_ratio", "conv_kernels", "ncsp_copy_mib_per_image",
    "composite_conv_passes", "published", "blog_planner_gib", "blog_activation_gib", "blog_fits_40gb",
    "blog_scenarios", "blog_scenarios_28", "allocator_max_allocated_mb", "model_has_gradient_accumulation_steps",
    "model_error"}


def summary(rank: int, **changes) -> dict:
    s = {f"grad_max_{w}_diff_{n}": 1e-7 for w in ("abs", "rel") for n in ("no_bn", "bn_frozen")}
    s.update(grad_max_abs_diff_bn=0.01 * (rank + 1), grad_max_rel_diff_bn=0.1, grad_cosine_bn=0.9 - 0.1 * rank,
             grad_cosine_bn_frozen=1.0, bn_frozen_layers=20, builtin_nn_GradAccumulationCell_ratio=4.0,
             builtin_parallel_GradAccumulation_ratio=4.0, **{f"grad_max_abs_{n}": 0.5 for n in ("no_bn", "bn", "bn_frozen")})
    s.update(changes)
    return s


def test_ci_sizes_and_overrides():
    s = oa.chapter_sizes("ci")
    assert (s.per_rank, s.k, s.micro, s.impl, s.margin) == (96, 4, 24, "im2col", 256)
    assert s.base.global_batch == 96 * s.base.world_size and s.base.amp_level == "O0" and s.base.steps == 3
    assert (s.base.image_size, s.model_image_size) == (64, 32), "the experiment outgrows a 1 GiB pool block"
    assert oa.chapter_sizes("ci", image_size=48).base.image_size == 48
    assert oa.chapter_sizes("gpu8", rehearse=True).base.image_size == 224
    t = oa.chapter_sizes("ci", sweep_batches=(8, 16), batch_per_rank=32, accumulation_steps=2, world_size=2)
    assert (t.per_rank, t.k, t.micro, t.base.world_size, t.base.global_batch) == (32, 2, 16, 2, 64)
    assert t.preset["sweep"]["batches"] == (8, 16) and oa.PRESETS["ci"]["sweep"]["batches"] == (16, 48, 96)


def test_gpu8_runs_resnet152_and_the_rehearsal_its_own_sizes():
    assert oa.chapter_sizes("gpu8").base.arch == "resnet152"
    r = oa.chapter_sizes("gpu8", rehearse=True)
    assert r.base.arch != "resnet152" and (r.per_rank, r.k) == (8, 4) and r.preset["grad_check_conv"] == "im2col"


def test_blog_case_fits_in_40_gib_by_the_planner():
    est, rows = oa.blog_rows()
    assert est["blog"].arch == "resnet152" and 11 < est["blog"].total_gib < 12
    assert [r[5] for r in rows] == ["yes", "yes"] and rows[0][6] > 64


def test_experiment_plan_both_convolutions_and_the_accumulation_row():
    plan, rows = oa.experiment_plan(oa.chapter_sizes("ci"), num_classes=10)
    assert len(plan) == 4 and len(rows) == 5
    full, micro = plan[("full batch", "im2col")], plan[("micro-batch x 4", "im2col")]
    assert full.batch == 96 and micro.batch == 24 and micro.activation_bytes < full.activation_bytes
    assert rows[-1][2] == "micro-batch x K = 24 x 4"


def test_cap_below_the_measured_run_on_cpu_and_three_quarters_of_the_plan_elsewhere():
    s = oa.chapter_sizes("ci")
    assert oa.cap_mb_for(s, {"max_vms_peak": 3000.4}, 0) == 2744
    gpu = oa.chapter_sizes("gpu8")
    assert oa.cap_mb_for(gpu, {"max_vms_peak": 1.0}, 4 * 2**30) == 3072


def test_grad_check_record_takes_the_worst_rank_and_compares_ranks():
    g = oa.grad_check_record([summary(0), summary(1)])
    assert g["grad_max_abs_diff_bn"] == pytest.approx(0.02) and g["grad_cosine_bn"] == pytest.approx(0.8)
    assert g["grad_check_same_on_all_ranks"] is True and g["builtin_errors"]["parallel_GradAccumulation"] == "ran"
    assert oa.grad_check_record([summary(0), summary(1, grad_max_abs_diff_no_bn=2e-7)])["grad_check_same_on_all_ranks"] is False
    rows = oa.grad_check_rows(g, "resnet18")
    assert [r[0] for r in rows][2] == "resnet18, BatchNorm frozen (20 layers)" and rows[0][4] == "—"


def test_model_has_no_accumulation_argument():
    a = oa.model_api_check()
    assert a["has_argument"] is False and a["model_error"].startswith(("TypeError", "ValueError"))


def fake_chapter() -> oa.OomChapter:
    """An ``OomChapter`` whose steps' numbers are set by hand (no job, no data)."""
    ch = object.__new__(oa.OomChapter)
    ch.preset, ch.rehearse, ch.s = "ci", False, oa.chapter_sizes("ci")
    ch.base = ch.s.base
    ch.oom_error, ch.cap_mb = JobFailed("oom", "Memory not enough"), 2744
    ch.acc = SimpleNamespace(summaries={r: {} for r in range(8)}, config=ch.base, weights_identical=True,
                             metric=lambda key: np.full((8, 3), 96))
    ch.peak, ch.act = {"full_batch": 3000.0, "accumulated": 2000.0}, {"full_batch": 1500.0, "accumulated": 500.0}
    ch.tp, ch.gc_ranks = {"full_batch": 50.0, "accumulated": 40.0}, 2
    ch.grad = oa.grad_check_record([summary(0), summary(1)])
    ch.pvm = {"planner_slope_mib_per_image": 0.57, "measured_slope_mib_per_image": 1.8,
              "planner_vs_measured_slope_ratio": 0.57 / 1.8}
    ch.conv_kernels = {"forward_training": "jit_uni_ncsp:conv+ref:any"}
    ch.composite, ch.copies_mib = ["forward_training"], 1.2
    ch.published, ch.blog = scenarios.compare_published("fp32"), oa.blog_rows()[0]["blog"]
    ch.blog_scenarios = {t: scenarios.keep_scenarios(target_gib=t) for t in (35.0, 28.0)}
    ch.allocator_mb, ch.api = 0.0, oa.model_api_check()
    return ch


def test_results_hold_every_key_the_conclusions_read():
    r = fake_chapter().results()
    assert set(r) == RECORD_KEYS
    assert r["oom_reproduced"] is True and r["accumulation_succeeded"] is True and r["accumulated_samples_per_step"] == 96
    claims = {c.id: c for c in ch02.build(r)}
    assert claims["full_batch_oom"].holds is True and claims["builtin_cells_sum"].holds is True
