"""Chapters 00 and 01's claim builders: each claim's text follows what was measured, both ways."""

import copy

import numpy as np
import pytest

from helpers.core.card_settings import card_record
from helpers.topics.shard_stats import per_class_spread
from helpers.conclusions import as_records, failed
from helpers.conclusions.ch00 import (WEIGHTS_SHA256, WEIGHTS_SUM, chapter00_claims, conv_benchmark, seed_api_facts,
                                      two_node_comparison)
from helpers.conclusions.ch01 import chapter01_claims
from helpers.job.launch import JobResult
from helpers.topics.seen_classes import batch_classes, rank_step_spread, slowest_data_wait_ms


def by_id(claims):
    return {c.id: c for c in claims}


# ------------------------------------------------------------------------------------------ chapter 00
SEED_API = {"version": "2.10.0", "msrun_sets_device_id": True, "set_device_negotiates_under_msrun": True,
            "context_keys_accepted": ["parallel_mode", "gradients_mean", "device_num", "parameter_broadcast"],
            "context_keys_refused": [], "parameter_broadcast_read_back": True}


def ch00(**changes):
    r = dict(world_size=8, ranks_finished=8, steps=4, weights_identical=True, distinct_first_batches=8,
             conv_impl="im2col", conv_seconds_per_step={"native": 0.25, "im2col": 0.04}, device_target="CPU",
             multinode_skipped="", multinode_world_size=8, multinode_weights_identical=True,
             multinode_vs_single=dict(same_data=True, first_losses_equal=True, first_divergent_step=2,
                                      loss_diff_at_divergence=4.8e-7, same_checksum=False, param_sum_rel_diff=3e-5,
                                      steps=4),
             rank_num_is_invalid=True, seed_api=copy.deepcopy(SEED_API),
             averaging=dict(averaged=True, same_batches=True, vs_mean=4.1e-6, vs_sum=7.0,
                            worst_parameter="layer4.1.bn1.gamma", worst_parameter_vs_mean=2e-4))
    for key, value in changes.items():
        if value and isinstance(value, dict) and isinstance(r.get(key), dict):
            r[key] = {**r[key], **value}
        else:
            r[key] = value
    return r


def test_ch00_all_expectations_hold_on_the_measured_ci_values():
    claims = chapter00_claims(ch00())
    assert len(claims) >= 4 and not failed(as_records(claims))
    c = by_id(claims)
    assert "8 of 8 ranks ran all 4 steps" in c["ranks_finished"].text
    assert "8 different class mixes" in c["weights_identical"].text
    assert "to 4e-06 of its size" in c["gradients_averaged"].text and "7.0 sizes" in c["gradients_averaged"].text
    assert "native took 6.2x as long" in c["conv_impl"].text
    assert "first differ at step 2" in c["two_node_checksum"].text and "checksums differ" in c["two_node_checksum"].text


@pytest.mark.parametrize("changes, cid, words", [
    (dict(ranks_finished=7), "ranks_finished", "Only 7 of 8"),
    (dict(weights_identical=False), "weights_identical", "did not end with one parameter checksum"),
    (dict(distinct_first_batches=1), "weights_identical", "1 distinct first-step class mixes"),
    (dict(conv_impl="native"), "conv_impl", "although im2col was measured faster"),
    (dict(multinode_vs_single={"same_data": False}), "two_node_same_start", "same data: False"),
    (dict(multinode_vs_single={"first_losses_equal": False}), "two_node_same_start", "step-1 losses equal: False"),
    (dict(multinode_weights_identical=False), "two_node_same_start", "one checksum on all ranks: False"),
    (dict(multinode_vs_single={"same_checksum": True}), "two_node_checksum", "yet the final checksums are equal"),
    (dict(multinode_vs_single={"first_divergent_step": None}), "two_node_checksum",
     "bit-identical but the final checksums differ"),
    (dict(rank_num_is_invalid=False), "rank_num_invalid", "was accepted"),
    (dict(seed_api={"parameter_broadcast_read_back": False}), "parameter_broadcast", "was not accepted"),
    (dict(seed_api={"msrun_sets_device_id": False}), "device_id", "does not set DEVICE_ID"),
    (dict(averaging={"averaged": False, "vs_mean": 1.8, "worst_parameter": "stem.0.weight"}), "gradients_averaged",
     "1.8 sizes from one process's mean-gradient update"),
])
def test_ch00_each_claim_says_when_its_expectation_failed(changes, cid, words):
    c = by_id(chapter00_claims(ch00(**changes)))[cid]
    assert c.holds is False and words in c.text


def test_ch00_equal_checksums_with_identical_losses_hold():
    c = by_id(chapter00_claims(ch00(multinode_vs_single={"first_divergent_step": None, "same_checksum": True})))
    assert c["two_node_checksum"].holds is True and "final checksums are equal" in c["two_node_checksum"].text


def test_ch00_unchecked_averaging_is_an_observation_with_its_reason():
    c = by_id(chapter00_claims(ch00(averaging={"skipped": "the cell did not save it"})))
    assert c["gradients_averaged"].holds is None and "the cell did not save it" in c["gradients_averaged"].text


def test_ch00_skipped_two_node_demo_is_an_observation_with_its_reason():
    c = by_id(chapter00_claims(ch00(multinode_skipped="making a network namespace needs root")))
    assert c["two_node"].holds is None and "needs root" in c["two_node"].text
    assert "two_node_checksum" not in c


ASCEND_CARD = {"chip": "ascend910", "precision_mode": "must_keep_origin_dtype", "deterministic": True}


def test_ch00_card_settings_are_judged_on_a_card_only():
    assert "card_settings" not in by_id(chapter00_claims(ch00(card={"chip": "n/a", "precision_mode": "n/a",
                                                                     "deterministic": "n/a"})))
    ok = by_id(chapter00_claims(ch00(device_target="Ascend", card=dict(ASCEND_CARD))))["card_settings"]
    assert ok.holds is True and "chip ascend910" in ok.text and "must_keep_origin_dtype" in ok.text
    fp16 = dict(ASCEND_CARD, precision_mode="allow_fp32_to_fp16 (MindSpore's default on ascend910)")
    assert by_id(chapter00_claims(ch00(device_target="Ascend", card=fp16)))["card_settings"].holds is False
    noisy = dict(ASCEND_CARD, deterministic=False)
    c = by_id(chapter00_claims(ch00(device_target="Ascend", card=noisy)))["card_settings"]
    assert c.holds is False and "run-to-run noise" in c.text
    gpu = {"chip": "n/a", "precision_mode": "conv_allow_tf32=False", "deterministic": True}
    on_gpu = by_id(chapter00_claims(ch00(device_target="GPU", card=gpu)))["card_settings"]
    assert on_gpu.holds is True and "only the backward convolutions are pinned" in on_gpu.text
    assert "no GPU kernel reads set_deterministic" in on_gpu.text and "run-to-run noise" not in on_gpu.text
    tf32 = dict(gpu, precision_mode="conv_allow_tf32=True (MindSpore's default: TF32)")
    assert by_id(chapter00_claims(ch00(device_target="GPU", card=tf32)))["card_settings"].holds is False


def test_ch00_card_settings_follow_the_ranks_float32_verdict():
    """A 910A records float32 as not kept (its cube units take float16): no float32 claim, and the reason shown."""
    a910 = card_record("Ascend", {"deterministic": True}, "ascend910")
    c = by_id(chapter00_claims(ch00(device_target="Ascend", card=a910)))["card_settings"]
    assert c.holds is False and "float32 kept False (910A: its cube units take float16" in c.text
    b910 = card_record("Ascend", {"precision_mode": "must_keep_origin_dtype", "conv_allow_hf32": False,
                                  "matmul_allow_hf32": False, "deterministic": True}, "ascend910b")
    assert by_id(chapter00_claims(ch00(device_target="Ascend", card=b910)))["card_settings"].holds is True


@pytest.mark.parametrize("device, words", [("GPU", "one host to NCCL"), ("Ascend", "HCCL its own address")])
def test_ch00_two_node_demo_on_a_card_says_what_it_does_not_show(device, words):
    c = by_id(chapter00_claims(ch00(device_target=device, card=dict(ASCEND_CARD))))
    assert c["two_node_link"].holds is None and words in c["two_node_link"].text
    assert "not measured here" in c["two_node_link"].text
    assert "two_node_link" not in by_id(chapter00_claims(ch00()))


def test_ch00_native_on_gpu_has_no_timing_claim_to_fail():
    c = by_id(chapter00_claims(ch00(conv_impl="native", conv_seconds_per_step={}, device_target="GPU")))
    assert c["conv_impl"].holds is None and "on GPU" in c["conv_impl"].text


class Job:
    """The parts of a JobResult that two_node_comparison reads."""

    def __init__(self, losses, counts, checksum="a", psum=1.0):
        self.steps = {r: [{"loss": l, "labels": counts[r][i]} for i, l in enumerate(row)]
                      for r, row in enumerate(losses)}
        self.summaries = {r: {"result": {WEIGHTS_SHA256: checksum, WEIGHTS_SUM: psum}} for r in self.steps}

    ranks = property(lambda self: sorted(self.summaries))
    metric = JobResult.metric
    returns = JobResult.returns


def test_two_node_comparison_finds_the_first_divergent_step():
    counts = [[[[0, 2]], [[1, 2]], [[2, 2]]], [[[3, 2]], [[4, 2]], [[5, 2]]]]
    one = Job([[2.0, 1.5, 1.2], [2.1, 1.6, 1.3]], counts, "a", 100.0)
    two = Job([[2.0, 1.5, 1.2000001], [2.1, 1.6, 1.3]], counts, "b", 100.001)
    cmp = two_node_comparison(one, two)
    assert cmp["same_data"] and cmp["first_losses_equal"] and cmp["first_divergent_step"] == 3
    assert cmp["same_checksum"] is False and cmp["param_sum_rel_diff"] == pytest.approx(1e-5)
    assert cmp["loss_diff_per_step"][:2] == [0.0, 0.0] and cmp["loss_diff_per_step"][2] > 0
    same = two_node_comparison(one, Job([[2.0, 1.5, 1.2], [2.1, 1.6, 1.3]], counts, "a", 100.0))
    assert same["first_divergent_step"] is None and same["same_checksum"]
    other_data = copy.deepcopy(counts)
    other_data[1][2] = [[6, 2]]
    assert not two_node_comparison(one, Job([[2.0, 1.5, 1.2], [2.1, 1.6, 1.3]], other_data))["same_data"]


def test_seed_api_facts_read_from_the_installed_mindspore():
    facts = seed_api_facts()
    assert facts["msrun_sets_device_id"] and facts["set_device_negotiates_under_msrun"]
    assert "parameter_broadcast" in facts["context_keys_accepted"] and facts["parameter_broadcast_read_back"]
    from mindspore import context

    assert context.get_auto_parallel_context("parameter_broadcast") is False, "the probe resets the context"


def test_conv_benchmark_quotes_the_committed_ratios():
    bench = conv_benchmark()
    assert bench["cases"] >= 1 and 1.0 < bench["min_ratio"] <= bench["max_ratio"]


# ------------------------------------------------------------------------------------------ chapter 01
KINDS = ("contiguous", "distributed", "distributed_shuffle", "stratified")


def ch01(**changes):
    r = dict(steps=4, num_classes=10,
             max_tv=dict(zip(KINDS, (0.93, 0.73, 0.32, 0.067))),
             min_classes_per_step=dict(zip(KINDS, (7, 1, 10, 10))),
             mean_batch_classes=dict(zip(KINDS, (1.1, 1.0, 5.4, 5.9))),
             accuracy=dict(zip(KINDS, (0.108, 0.008, 0.083, 0.097))),
             loss_spread=dict(zip(KINDS, (0.33, 0.05, 0.09, 0.06))),
             step_time_spread=dict(zip(KINDS, (1.032, 1.031, 1.043, 1.008))),
             slowest_data_wait_ms=dict(zip(KINDS, (5.3, 3.9, 2.9, 11.9))),
             stratified_class_spread=0, contiguous_class_spread=132,
             imagenet_scale_max_tv={"stratified": 0.0015, "distributed_shuffle": 0.029},
             imagenet_scale_split_s=0.8, imagenet_shards_iterated=1, class_column_rejected=True)
    for key, value in changes.items():
        r[key] = {**r[key], **value} if isinstance(value, dict) else value
    return r


def test_ch01_all_expectations_hold_on_the_measured_ci_values():
    claims = chapter01_claims(ch01())
    assert len(claims) >= 4 and not failed(as_records(claims))
    c = by_id(claims)
    assert "holds the same number of images" in c["per_class_split"].text
    assert "as few as 1 class(es) of 10" in c["homogeneous_batches"].text
    assert "near chance (0.10)" in c["accuracy"].text
    same = by_id(chapter01_claims(ch01(accuracy=dict.fromkeys(KINDS, 0.25), num_classes=4)))["accuracy"]
    assert "accuracy is 0.25, near chance" in same.text, "one value, not a range of one"
    assert "no rank was slower for its classes" in c["step_time"].text
    assert "each contiguous rank's batch holds its own classes." in c["loss_spread"].text    # the probe says why


@pytest.mark.parametrize("changes, cid, words", [
    (dict(stratified_class_spread=3), "per_class_split", "differ by up to 3 images"),
    (dict(mean_batch_classes={"contiguous": 6.0}), "homogeneous_batches", "were not more homogeneous"),
    (dict(min_classes_per_step={"distributed": 10}), "homogeneous_batches", "were not more homogeneous"),
    (dict(max_tv={"stratified": 0.5}), "rank_mix", "was not closer to the global one"),
    (dict(imagenet_scale_max_tv={"stratified": 0.05}), "imagenet_scale", "was not closer"),
    (dict(class_column_rejected=False), "class_column", "accepted class_column"),
])
def test_ch01_each_mechanism_says_when_it_failed(changes, cid, words):
    c = by_id(chapter01_claims(ch01(**changes)))[cid]
    assert c.holds is False and words in c.text


def test_ch01_phases_of_one_job_must_start_from_one_state():
    assert "phases_same_start" not in by_id(chapter01_claims(ch01()))          # separate jobs: no such claim
    same = by_id(chapter01_claims(ch01(phases_of_one_job=True, phases_same_start=True)))["phases_same_start"]
    assert same.holds is True and "one launch" in same.text
    apart = by_id(chapter01_claims(ch01(phases_of_one_job=True, phases_same_start=False)))["phases_same_start"]
    assert apart.holds is False and "not on equal terms" in apart.text


def test_ch01_one_image_difference_per_class_still_holds():
    c = by_id(chapter01_claims(ch01(stratified_class_spread=1)))["per_class_split"]
    assert c.holds is True and "differ by at most 1 image" in c.text


def test_ch01_observations_follow_the_measurement_both_ways():
    slow = by_id(chapter01_claims(ch01(step_time_spread={"contiguous": 1.31})))["step_time"]
    assert slow.holds is None and "31.0% apart (other splits: 0.8-4.3%)" in slow.text
    waits = by_id(chapter01_claims(ch01(slowest_data_wait_ms={"contiguous": 40.0})))["step_time"]
    assert "slowest rank waited 40.0 ms per step for data (others: up to 11.9 ms)" in waits.text
    trained = by_id(chapter01_claims(ch01(accuracy=dict(zip(KINDS, (0.40, 0.55, 0.80, 0.85))))))["accuracy"]
    assert trained.holds is None and "the best was stratified, 45.0 points above the contiguous split, the worst contiguous" in trained.text
    flat = by_id(chapter01_claims(ch01(loss_spread={"contiguous": 0.01})))["loss_spread"]
    assert flat.holds is None and "not more than under the other splits" in flat.text


def test_ch01_figures_from_shards_and_step_records():
    labels = np.repeat(np.arange(3), 4)
    assert per_class_spread([np.arange(0, 12, 2), np.arange(1, 12, 2)], labels) == 0
    assert per_class_spread([np.arange(6), np.arange(6, 12)], labels) == 4

    class Result:
        steps = {0: [{"class_counts": [[0, 2]], "step_s": 9.0}, {"class_counts": [[0, 1], [1, 1]], "step_s": 1.0}],
                 1: [{"class_counts": [[2, 2]], "step_s": 9.0}, {"class_counts": [[2, 2]], "step_s": 1.5}]}
        summaries = {0: {"num_classes": 3}, 1: {"num_classes": 3}}
        metric = JobResult.metric

    assert batch_classes(Result()).tolist() == [[1, 2], [1, 1]]
    Result.steps[0][1]["data_s"], Result.steps[1][1]["data_s"] = 0.002, 0.004
    Result.steps[0][0]["data_s"] = Result.steps[1][0]["data_s"] = 1.0
    assert slowest_data_wait_ms(Result()) == pytest.approx(4.0)
    assert rank_step_spread(Result()) == pytest.approx(1.5)


def test_ch00_a_large_first_difference_is_not_called_rounding():
    c = by_id(chapter00_claims(ch00(multinode_vs_single={"loss_diff_at_divergence": 0.3})))["two_node_checksum"]
    assert c.holds is False and "more than float rounding" in c.text


def test_the_committed_conv_benchmark_is_read_from_the_code_not_the_course_home(tmp_path, monkeypatch):
    # a participant with COURSE_HOME set to an empty folder: chapter 00 failed with FileNotFoundError here
    from helpers.conclusions.ch00 import conv_benchmark

    monkeypatch.setenv("COURSE_HOME", str(tmp_path))
    bench = conv_benchmark()
    assert bench["cases"] >= 1 and bench["min_ratio"] <= bench["max_ratio"]


def verdict(rank=None, spread_s=0.004, method="data wait"):
    return dict(rank=rank, node="vm" if rank is not None else None, cause="data" if rank is not None else None,
                wait_s=0.21 if rank is not None else 0.0, wait_share=0.3 if rank is not None else 0.0, lead_s=0.2,
                last_share=1.0, spread_s=spread_s, spread_share=spread_s / 0.5, steps=3, method=method)


def test_ch01_time_verdict_per_split_both_outcomes():
    r = dict(ch01(), straggler={k: verdict(spread_s=0.001 * (i + 1)) for i, k in enumerate(KINDS)})
    c = by_id(chapter01_claims(r))["time_verdict"]
    assert c.holds is True and "at most 4.0 ms per step" in c.text and "from the data wait alone" in c.text
    slow = {k: verdict() for k in KINDS}
    slow["contiguous"] = verdict(rank=3, spread_s=0.2, method="split")
    c = by_id(chapter01_claims(dict(ch01(), straggler=slow)))["time_verdict"]
    assert c.holds is False and "contiguous: rank 3 on vm held the others back by 210.0 ms per step" in c.text
    assert "cause data" in c.text and "time compute and communication apart" in c.text
    assert "time_verdict" not in by_id(chapter01_claims(ch01()))      # recorded before the verdict existed


def test_ch01_with_seeds_judges_accuracy_over_them_not_one_run():
    """Issue 32: one run's accuracy named a best and a worst split. With seeds the payoff is the repeats'
    verdicts, and no sentence names a best split from one draw."""
    by_seed = {"contiguous": [0.706, 0.692, 0.475, 0.80, 0.60], "distributed": [0.097, 0.103, 0.153, 0.10, 0.12],
               "distributed_shuffle": [0.800, 0.869, 0.483, 0.70, 0.80], "stratified": [0.358, 0.694, 0.672, 0.70, 0.65]}
    r = {**ch01(steps=30, seeds=[1, 2, 3, 4, 5], phases_of_one_job=True, phases_same_start=True, chapter_s=420.0,
                job_s=360.0, lr_schedule="cosine"), "accuracy_by_seed": by_seed}
    claims = by_id(chapter01_claims(r))
    assert "accuracy" not in claims and not any("the best was" in c.text for c in claims.values())
    assert claims["shuffle_false_chance"].holds is True and claims["stratified_vs_shuffle"].holds is True
    assert "5 seeds ran as phases of one job" in claims["phases_same_start"].text
    assert "7.0 min" in claims["chapter_time"].text and claims["chapter_time"].holds is None


def heavy_load(contiguous_rank=7):
    """class_load with the contiguous split predicted uneven (its rank 7 reads 7.9x the mean), the others even."""
    shards = dict(zip(KINDS, (7.9, 1.0, 1.8, 1.2)))
    return {"sample": 10, "cost_ratio": 560.0,
            "predicted": {k: {"shard_max_over_mean": v, "step_max_over_mean": v,
                              "slowest_rank": contiguous_rank if k == "contiguous" else 0} for k, v in shards.items()}}


def test_ch01_time_verdict_against_the_predicted_heavy_rank_over_seeds():
    none = {k: [verdict(), verdict()] for k in KINDS}
    r = dict(ch01(), class_load=heavy_load(), straggler_by_seed={**none, "contiguous": [verdict(rank=7)] * 2})
    c = by_id(chapter01_claims(r))["time_verdict"]
    assert c.holds is True and "rank 7 held the others back for data on 2 of 2 seeds (210 ms per step, 30%" in c.text
    assert "under the stratified split no rank did" in c.text
    one_seed = dict(r, straggler_by_seed={**none, "contiguous": [verdict(rank=7), verdict()]})
    assert by_id(chapter01_claims(one_seed))["time_verdict"].holds is False
    wrong_rank = dict(r, straggler_by_seed={**none, "contiguous": [verdict(rank=3)] * 2})
    c = by_id(chapter01_claims(wrong_rank))["time_verdict"]
    assert c.holds is False and "predicted rank 7" in c.text and "contiguous: rank 3 on vm held" in c.text
    stratified_slow = dict(r, straggler_by_seed={**none, "contiguous": [verdict(rank=7)] * 2,
                                                 "stratified": [verdict(rank=2), verdict()]})
    assert by_id(chapter01_claims(stratified_slow))["time_verdict"].holds is False
    even = dict(r, class_load=heavy_load() | {"predicted": {k: {"shard_max_over_mean": 1.1, "step_max_over_mean": 1.1,
                                                                "slowest_rank": 0} for k in KINDS}})
    assert by_id(chapter01_claims(even))["time_verdict"].holds is False, "a straggler where none was predicted"


def test_ch01_step_time_over_seeds_says_whether_the_cores_are_shared():
    base = dict(ch01(), cores=2, world_size=8)
    same = by_id(chapter01_claims(dict(base, phase_step_s_by_seed={"contiguous": [0.50, 0.56],
                                                                   "stratified": [0.49, 0.55]})))["step_time"]
    assert "0.53 s under the contiguous split and 0.52 s" in same.text and "too wide to call either shorter" in same.text
    assert "8 ranks share 2 cores" in same.text and same.holds is None
    apart = by_id(chapter01_claims(dict(base, cores=16, phase_step_s_by_seed={"contiguous": [0.80, 0.82],
                                                                              "stratified": [0.50, 0.52]})))
    assert "stratified is shorter beyond the seeds' range" in apart["step_time"].text
    assert "share" not in apart["step_time"].text.split("range")[-1]
    refused = by_id(chapter01_claims(dict(base, cpu_share=dict(share=0.25, held=False, why="not root"),
                                          phase_step_s_by_seed={"contiguous": [0.8, 0.9], "stratified": [0.5, 0.6]})))
    assert "no per-rank CPU quota: not root" in refused["step_time"].text and refused["step_time"].holds is None


def test_ch01_step_time_is_a_verdict_when_each_rank_held_its_share_of_the_cores():
    held = dict(ch01(), cores=2, world_size=8, cpu_share=dict(share=0.25, held=True, why=None))
    shorter = by_id(chapter01_claims(dict(held, phase_step_s_by_seed={"contiguous": [1.5, 1.6],
                                                                      "stratified": [1.2, 1.3]})))["step_time"]
    assert shorter.holds is True and "0.25 of a core" in shorter.text and "stratified is shorter" in shorter.text
    tied = by_id(chapter01_claims(dict(held, phase_step_s_by_seed={"contiguous": [1.5, 1.6],
                                                                   "stratified": [1.2, 1.55]})))["step_time"]
    assert tied.holds is False and "not shorter beyond the seeds' range (0.35 s)" in tied.text


def test_ch01_step_time_over_more_seeds_is_judged_by_the_paired_interval():
    held = dict(ch01(), cores=2, world_size=8, cpu_share=dict(share=0.25, held=True, why=None))
    # one slow seed widens contiguous's range past the difference, but every seed's pair agrees: shorter
    drift = by_id(chapter01_claims(dict(held, phase_step_s_by_seed={"contiguous": [3.6, 3.1, 3.6, 2.5, 2.4],
                                                                    "stratified": [1.8, 2.0, 2.1, 1.9, 2.2]})))
    assert drift["step_time"].holds is True and "paired 95 % interval" in drift["step_time"].text
    mixed = by_id(chapter01_claims(dict(held, phase_step_s_by_seed={"contiguous": [2.0, 1.5, 2.2, 1.6, 2.1],
                                                                    "stratified": [1.8, 2.0, 1.7, 1.9, 2.2]})))
    assert mixed["step_time"].holds is False and "not shorter beyond the seeds' spread" in mixed["step_time"].text


def test_ch01_step_time_is_not_judged_when_other_work_took_the_ranks_shares():
    busy = dict(ch01(), cores=2, world_size=8, phase_step_s_by_seed={"contiguous": [1.8, 1.8], "stratified": [4.4, 2.4]},
                cpu_share=dict(share=0.25, held=True, why=None, other_cores=0.8, other_cores_max=1.1))
    c = by_id(chapter01_claims(busy))["step_time"]
    assert c.holds is None and "other work on this machine took up to 1.10 of them" in c.text
    assert "not judged here" in c.text and "1.80 s under the contiguous split" in c.text
    quiet = dict(busy, cpu_share=dict(busy["cpu_share"], other_cores_max=0.33))
    assert by_id(chapter01_claims(quiet))["step_time"].holds is False      # a quiet machine: judged, and false here
