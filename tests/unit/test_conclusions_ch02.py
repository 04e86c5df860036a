"""Chapter 02's claims: each one's text follows the numbers, both when the expectation holds and when it does not."""

import copy

import pytest

from helpers.topics import memory_scenarios as scenarios
from helpers.conclusions import as_records, ch02, failed


@pytest.fixture(scope="module")
def base_record():
    """A ci-like record (numbers from a ci run on an AVX-512 CPU)."""
    return {
        "preset": "ci", "device_target": "CPU", "arch": "resnet18", "world_size": 2,
        "oom_reproduced": True, "oom_error_kind": "oom", "mem_cap_mb": 3535,
        "accumulation_succeeded": True, "batch_per_rank": 96, "micro_batch": 24, "accumulation_steps": 4,
        "accumulated_samples_per_step": 96, "conv_impl": "im2col",
        "memory_measured": "rss", "peak_mb": {"full_batch": 1420.9, "accumulated": 785.9},
        "peak_rss_mb": {"full_batch": 1420.9, "accumulated": 785.9},
        "activation_mb": {"full_batch": 1016.1, "accumulated": 374.1},
        "throughput_img_s": {"full_batch": 86.3, "accumulated": 198.2},
        "timed_step_s": {"full_batch": [2.20, 2.25], "accumulated": [0.96, 0.98]},
        "grad_check_ranks": 2, "grad_check_same_on_all_ranks": True,
        "grad_max_abs_diff_no_bn": 1.1e-8, "grad_max_abs_diff_bn": 0.32, "grad_max_rel_diff_bn": 2.08,
        "grad_cosine_bn": 0.7194, "grad_max_abs_diff_bn_frozen": 8.4e-9, "grad_max_rel_diff_bn_frozen": 1.8e-7,
        "grad_cosine_bn_frozen": 0.99999999999998, "bn_frozen_layers": 20,
        "builtin_cell_grad_ratio": 3.99999998, "builtin_parallel_grad_ratio": 3.99999998,
        "planner_slope_mib_per_image": 0.5706, "measured_slope_mib_per_image": 1.7752,
        "planner_vs_measured_slope_ratio": 0.5706 / 1.7752,
        "conv_kernels": {"backward_data": "jit_uni_ncsp:conv+ref:any", "backward_weights": "x64:gemm:jit",
                         "forward_training": "jit_uni_ncsp:conv+ref:any"},
        "ncsp_copy_mib_per_image": 2 * 0.6211,
        "published": scenarios.compare_published("fp32"),
        "blog_planner_gib": 11.54, "blog_activation_gib": 10.48, "blog_fits_40gb": True,
        "blog_scenarios": scenarios.keep_scenarios(target_gib=35.0),
        "blog_scenarios_28": scenarios.keep_scenarios(target_gib=28.0),
        "allocator_max_allocated_mb": 0.0,
        "model_has_gradient_accumulation_steps": False,
        "model_error": "TypeError: The key 'gradient_accumulation_steps' ... is not supported",
        "peak_host_mb": {"full_batch": 4147.0, "accumulated": 2901.0}, "host_budget_mb": 6144,
    }


def by_id(record):
    return {c.id: c for c in ch02.build(record)}


def changed(record, **values):
    r = copy.deepcopy(record)
    r.update(values)
    return by_id(r)


def test_a_ci_like_run_makes_at_least_four_claims_none_failed(base_record):
    claims = ch02.build(base_record)
    assert len(claims) >= 4 and len({c.id for c in claims}) == len(claims)
    assert failed(as_records(claims)) == []
    mechanisms = {"full_batch_oom", "accumulated_fits", "equivalent_without_bn", "batchnorm_is_the_cause",
                  "builtin_cells_sum", "model_has_no_accumulation_argument"}
    assert mechanisms <= {c.id for c in claims if c.holds is True}
    assert {c.id for c in claims if c.holds is None} == {"throughput", "planner_slope", "allocator_counter"}


def test_oom_claim_both_ways(base_record):
    c = by_id(base_record)["full_batch_oom"]
    assert c.holds and "3535 MB" in c.text and "failed with kind `oom`" in c.text
    c = changed(base_record, oom_reproduced=False, oom_error_kind=None)["full_batch_oom"]
    assert c.holds is False and "did not fail" in c.text and "no failure" in c.text
    c = changed(base_record, oom_reproduced=False, oom_error_kind="crash")["full_batch_oom"]
    assert "crash" in c.text


def test_fits_claim_both_ways(base_record):
    c = by_id(base_record)["accumulated_fits"]
    assert c.holds and "4 micro-batches of 24 trained on all 2 ranks" in c.text
    c = changed(base_record, accumulation_succeeded=False)["accumulated_fits"]
    assert c.holds is False and "did not finish" in c.text


def test_no_bn_equivalence_both_ways(base_record):
    c = by_id(base_record)["equivalent_without_bn"]
    assert c.holds and "1.1e-08" in c.text and "all 2 ranks" in c.text
    c = changed(base_record, grad_max_abs_diff_no_bn=3e-4)["equivalent_without_bn"]
    assert c.holds is False and "3.0e-04" in c.text and "tolerance 1e-05" in c.text
    c = changed(base_record, grad_check_same_on_all_ranks=False)["equivalent_without_bn"]
    assert c.holds is False and "same on all 2 ranks: False" in c.text


def test_batchnorm_cause_both_ways(base_record):
    c = by_id(base_record)["batchnorm_is_the_cause"]
    assert "2 groups of 96 images on 2 ranks" in c.text and "8 groups of 24" in c.text
    assert c.holds and "cosine 0.72" in c.text and "208%" in c.text and "20 BatchNorm layers frozen" in c.text
    assert "matches the full batch again" in c.text and "8.4e-09" in c.text
    c = changed(base_record, grad_cosine_bn_frozen=0.98, grad_max_abs_diff_bn_frozen=0.05)["batchnorm_is_the_cause"]
    assert c.holds is False and "still differs" in c.text and "not the whole cause" in c.text
    # a run whose training-mode BatchNorm happened not to differ says so instead of claiming a gap
    c = changed(base_record, grad_cosine_bn=0.9999999999)["batchnorm_is_the_cause"]
    assert "differs only by rounding" in c.text and "cosine 0.72" not in c.text


def test_builtin_cells_both_ways(base_record):
    c = by_id(base_record)["builtin_cells_sum"]
    assert c.holds and "4.000x and 4.000x" in c.text and "add the micro-batch means" in c.text
    c = changed(base_record, builtin_cell_grad_ratio=1.0, builtin_parallel_grad_ratio=1.0)["builtin_cells_sum"]
    assert c.holds is False and "1.000x" in c.text and "not the factor 4" in c.text
    c = changed(base_record, builtin_parallel_grad_ratio=None)["builtin_cells_sum"]
    assert c.holds and "n/ax" in c.text


def test_memory_claim_both_ways(base_record):
    c = by_id(base_record)["memory_saved"]
    assert c.holds and "fell from 1421 to 786 MB" in c.text and "0.37x" in c.text
    assert c.text.startswith("Peak RSS per rank") and "compilation leftovers" in c.text
    c = changed(base_record, peak_mb={"full_batch": 800.0, "accumulated": 900.0},
                activation_mb={"full_batch": 300.0, "accumulated": 400.0})["memory_saved"]
    assert c.holds is False and "did not lower the peak" in c.text and "1.33x" in c.text


def card_record(record: dict) -> dict:
    """The record of a gpu8 run on cards: device memory saved, while the host's RSS grew (it holds no activations)."""
    r = copy.deepcopy(record)
    r.update(device_target="GPU", preset="gpu8", arch="resnet152", mem_cap_mb=9000, memory_measured="device",
             peak_mb={"full_batch": 30500.0, "accumulated": 9800.0},
             activation_mb={"full_batch": 29000.0, "accumulated": 8300.0},
             peak_rss_mb={"full_batch": 5100.0, "accumulated": 5300.0})
    return r


def test_on_a_card_the_memory_claim_is_the_device_memory(base_record):
    claims = {c.id: c for c in ch02.build(card_record(base_record))}
    c = claims["memory_saved"]
    assert c.holds is True and c.text.startswith("Peak device memory per rank fell from 30500 to 9800 MB")
    assert "RSS" not in c.text and "compilation" not in c.text and "0.29x" in c.text
    assert "9000 MB of device memory per rank" in claims["full_batch_oom"].text
    assert "(GPU, DATA_PARALLEL)" in claims["builtin_cells_sum"].text
    assert not any("address space" in x.text or "(CPU" in x.text for x in claims.values())
    cpu = by_id(base_record)
    assert "3535 MB of address space" in cpu["full_batch_oom"].text and "(CPU, DATA_PARALLEL)" in cpu["builtin_cells_sum"].text


def test_throughput_text_follows_the_ratio(base_record):
    c = by_id(base_record)["throughput"]
    assert c.holds is None and "2.30x" in c.text and "was the slower job" in c.text
    assert "one run each; step-to-step spread ±1.6% (at least 2 steps a job), ranked beyond 5.0%" in c.text
    c = changed(base_record, throughput_img_s={"full_batch": 100.0, "accumulated": 98.0})["throughput"]
    assert "0.98x" in c.text and "within noise" in c.text and "does not rank them" in c.text
    c = changed(base_record, throughput_img_s={"full_batch": 100.0, "accumulated": 60.0})["throughput"]
    assert "0.60x" in c.text and "40% slower" in c.text


# two jobs whose steps moved by ~9 % (std over the median): differences under 2 x 9 % are within their noise
NOISY = {"full_batch": [1.0, 1.1, 1.2], "accumulated": [1.0, 1.1, 1.2]}


@pytest.mark.parametrize("acc, word", [(112.0, "within noise"), (88.0, "within noise"),
                                       (130.0, "was the slower job"), (70.0, "30% slower")])
def test_throughput_ranks_only_beyond_the_jobs_own_step_noise(base_record, acc, word):
    """12 % apart with steps varying by ~9 % is a tie (the fixed 5 % band ranked it); 30 % apart is ranked."""
    c = changed(base_record, throughput_img_s={"full_batch": 100.0, "accumulated": acc}, timed_step_s=NOISY)
    assert word in c["throughput"].text and c["throughput"].holds is None
    assert c["throughput"].figures["ranked"] is (word != "within noise")
    assert "step-to-step spread ±9.1%" in c["throughput"].text and "ranked beyond 18.2%" in c["throughput"].text


def test_throughput_with_one_timed_step_says_its_noise_was_not_measured(base_record):
    c = changed(base_record, throughput_img_s={"full_batch": 100.0, "accumulated": 104.0},
                timed_step_s={"full_batch": [1.0], "accumulated": [0.96]})["throughput"]
    assert "within noise" in c.text and "one timed step in a job, so the step-to-step spread was not measured" in c.text
    c = changed(base_record, throughput_img_s={"full_batch": 100.0, "accumulated": 120.0},
                timed_step_s={"full_batch": [1.0], "accumulated": [0.83]})["throughput"]
    assert "was the slower job" in c.text and "not measured, ranked beyond 5.0%" in c.text


def test_planner_slope_explained_by_composite_kernel_copies(base_record):
    c = by_id(base_record)["planner_slope"]
    assert c.holds is None and "0.32x" in c.text and "because oneDNN ran" in c.text
    assert c.figures["n"] == 2 and c.figures["fit"] == pytest.approx(1.02, abs=0.01)
    # copies that do not account for the gap: said so, no "because"
    c = changed(base_record, ncsp_copy_mib_per_image=0.1)["planner_slope"]
    assert "explain only part of the gap" in c.text and "because" not in c.text
    # a CPU without the composite kernel (AVX2): the planner alone must explain the slope
    direct = {"forward_training": "jit:avx2:any", "backward_data": "jit:avx2:any", "backward_weights": "jit:avx2:any"}
    c = changed(base_record, conv_kernels=direct, ncsp_copy_mib_per_image=0.0, measured_slope_mib_per_image=0.58)["planner_slope"]
    assert "no composite kernel, so nothing beyond" in c.text and "0.98x" in c.text
    c = changed(base_record, conv_kernels=direct, ncsp_copy_mib_per_image=0.0)["planner_slope"]
    assert "not explained" in c.text


def test_composite_passes():
    assert ch02.composite_passes({"forward_training": "jit_uni_ncsp:conv+ref:any", "backward_weights": "x64:gemm:jit"}) \
        == ["forward_training"]
    assert ch02.composite_passes({"forward_training": "jit_uni_ncsp:gemm:any"}) == []
    assert ch02.composite_passes({}) == []


def test_blog_claim_both_ways(base_record):
    c = by_id(base_record)["blog_35gb"]
    assert c.holds and "11.5 GiB" in c.text and "fits in 40 GB" in c.text
    plan = scenarios.keep_scenarios(target_gib=35.0)[0]["batch_over_target"]
    assert f"from batch {plan} on the planner's count" in c.text
    c = changed(base_record, blog_fits_40gb=False, blog_planner_gib=41.0)["blog_35gb"]
    assert c.holds is False and "does not fit in 40 GB, as the blog says" in c.text


def test_allocator_text_follows_the_counter(base_record):
    c = by_id(base_record)["allocator_counter"]
    assert "= 0 MB" in c.text and "documented: always 0 on CPU" in c.text
    c = changed(base_record, allocator_max_allocated_mb=512.0)["allocator_counter"]
    assert "512 MB" in c.text and "always 0" not in c.text


def test_model_argument_both_ways(base_record):
    c = by_id(base_record)["model_has_no_accumulation_argument"]
    assert c.holds and "raises TypeError" in c.text
    c = changed(base_record, model_has_gradient_accumulation_steps=True, model_error=None)["model_has_no_accumulation_argument"]
    assert c.holds is False and "must be revised" in c.text


def test_published_claim_both_ways(base_record):
    c = by_id(base_record)["planner_vs_published"]
    assert c.holds and "fits all 4 NVIDIA recipe batches" in c.text
    pub = copy.deepcopy(base_record["published"])
    next(r for r in pub if r["kind"] == "batch_fits")["planner"] = 99.0
    c = changed(base_record, published=pub)["planner_vs_published"]
    assert c.holds is False and "only 3 of 4" in c.text


def test_host_memory_within_and_over_the_budget_and_without_one(base_record):
    c = by_id(base_record)["host_memory_budget"]
    assert c.holds is True and "2 ranks" in c.text and "4147 MB" in c.text and "budget 6144 MB" in c.text
    over = changed(base_record, peak_host_mb={"full_batch": 7000.0, "accumulated": 2901.0})["host_memory_budget"]
    assert over.holds is False and "7000 MB" in over.text and "over the preset's budget" in over.text
    gpu = changed(base_record, host_budget_mb=None)["host_memory_budget"]
    assert gpu.holds is None and "none at this preset" in gpu.text
    assert changed(base_record, peak_host_mb={})["host_memory_budget"].holds is None


def test_the_memory_levers_are_an_observation_from_the_benchmark_the_chapter_shows(monkeypatch):
    from helpers.conclusions.ch02 import _levers
    from helpers.output import tables
    from helpers.topics.memory_levers import show_levers

    monkeypatch.setattr(tables, "show_table", lambda *a, **k: None)
    monkeypatch.setattr(tables, "show_md", lambda *a, **k: None)
    lv = show_levers("ci")
    assert lv["source"] == "benchmarks/results/memory_levers.json" and lv["measured_here"] is True
    (c,) = _levers({"memory_levers": lv})
    assert c.holds is None and f"{lv['recompute_time']:.2f}x its time" in c.text and "over 8 ranks" in c.text
    assert _levers({}) == []
    assert show_levers("gpu8")["measured_here"] is False        # the card's model, planned


def test_the_batchnorm_groups_claim_expects_large_groups_to_train_like_one_group():
    from tests.unit.test_bn_groups import fake_bench
    from helpers.topics.bn_groups import chapter_record

    (c,) = ch02._bn_groups({"bn_groups": chapter_record(fake_bench())})
    assert c.id == "batchnorm_groups_training" and c.holds is True
    assert "4 groups of 16 " in c.text and "within the seeds' spread" in c.text
    assert "16 groups of 4 +0.050" in c.text and "beyond the seeds' spread" in c.text
    assert "benchmarks/results/bn_groups.json" in c.text and "3 seeds, 60 updates of 64 images" in c.text
    rec = chapter_record(fake_bench())
    rec["groups"]["4"]["beyond_spread"] = True          # a group of 16 that trained differently: the claim fails
    (c,) = ch02._bn_groups({"bn_groups": rec})
    assert c.holds is False and "expected to train like the full batch, and did not" in c.text
    del rec["groups"]["4"]                              # no group of 16 or more to judge: an observation
    (c,) = ch02._bn_groups({"bn_groups": rec})
    assert c.holds is None and "as expected" not in c.text
    assert ch02._bn_groups({}) == []
