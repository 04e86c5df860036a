"""Chapter 01 executed with papermill (preset="ci"), then its recorded results asserted."""


import json

import pytest

from helpers.core.cpu_share import quiet
from tests.notebooks.chapter_run import execute

pytestmark = pytest.mark.notebooks


def test_01_load_imbalance(standin, tmp_path):
    r = execute("01_load_imbalance", tmp_path)
    kinds = {"contiguous", "distributed", "distributed_shuffle", "stratified"}
    assert set(r["max_tv"]) == set(r["min_classes_per_step"]) == set(r["accuracy"]) == kinds
    assert r["job_with_cell"] is True, "the code cell's launch trained the splits (%%ranks ... --then experiment)"
    assert set(r["step_time_spread"]) == set(r["slowest_data_wait_ms"]) == set(r["mean_batch_classes"]) == kinds
    # The stratified sampler deals every class round robin: per class, ranks differ by at most one image.
    assert r["stratified_class_spread"] <= 1
    others = [v for k, v in r["max_tv"].items() if k != "stratified"]
    assert r["max_tv"]["stratified"] < min(others)
    # Stratified steps hold the global mix (all 10 classes in 64 images); class-sorted splits do not.
    assert r["min_classes_per_step"]["stratified"] == r["num_classes"]
    assert r["min_classes_per_step"]["stratified"] > r["min_classes_per_step"]["contiguous"]
    assert r["min_classes_per_step"]["distributed"] <= 2, "DistributedSampler(shuffle=False) steps see 1-2 classes"
    # A contiguous rank's batch comes from its own block of 1-2 classes.
    assert r["mean_batch_classes"]["contiguous"] <= 2 < r["mean_batch_classes"]["stratified"]
    assert all(0.0 <= a <= 1.0 for a in r["accuracy"].values())
    assert all(v >= 1.0 for v in r["step_time_spread"].values())
    assert all(v >= 0.0 for v in r["slowest_data_wait_ms"].values())
    # the heavy-class stand-in: classes 8 and 9 cost far more to read (data_prep.class_costs), the contiguous split
    # gives them all to rank 7, and the verdict names it (per seed), the stratified split none (Issue 42, items 1, 3)
    load = r["class_load"]
    assert set(load["predicted"]) == kinds and load["cost_ratio"] > 20
    assert load["predicted"]["contiguous"]["slowest_rank"] == 7 and load["predicted"]["contiguous"]["shard_max_over_mean"] > 4
    assert [v["rank"] for v in r["straggler_by_seed"]["contiguous"]] == [7, 7]
    assert all(v["cause"] == "data" for v in r["straggler_by_seed"]["contiguous"])
    assert [v["rank"] for v in r["straggler_by_seed"]["stratified"]] == [None, None]
    # with each rank held to its share of the cores (a quota where ranks outnumber cores) on a machine running
    # nothing else, the stratified step is shorter than the contiguous one beyond the seeds' range; without a quota,
    # or beside other work (the other pytest process's test, in the default run), the step time is an observation
    share = r["cpu_share"] or {}
    judged = share.get("held") and quiet(share, r["cores"])
    assert claims_of(r)["step_time"]["holds"] is (True if judged else None), claims_of(r)["step_time"]["text"]
    assert r["imagenet_scale_max_tv"]["stratified"] <= 0.002
    assert r["imagenet_scale_max_tv"]["stratified"] < r["imagenet_scale_max_tv"]["distributed_shuffle"]
    assert 0 < r["imagenet_scale_split_s"] < 5
    assert r["class_column_rejected"] is True
    # Issue 32: every split over the ci preset's seeds; the robust effect is a verdict even at ci, nothing ranked
    assert r["seeds"] == [1, 2] and all(len(v) == 2 for v in r["accuracy_by_seed"].values())
    assert set(r["accuracy_by_seed"]) == set(r["final_loss_by_seed"]) == kinds
    claims = {c["id"]: c for c in r["claims"]}
    assert claims["shuffle_false_chance"]["holds"] is True and claims["phases_same_start"]["holds"] is True
    assert claims["stratified_vs_shuffle"]["holds"] is None, "ci's 2 seeds and 4 steps cannot compare the fix"
    # Issue 42: accuracy judged on the weights (precise BN), the payoff answer first in its section; the ranks'
    # BatchNorm statistics side by side; nn.SyncBatchNorm's refusal on CPU from the run itself
    assert r["bn_recalibration_batches"] > 0 and claims["bn_rank_statistics"]["holds"] is True
    assert r["bn_rank_means"]["rank_spread"]["contiguous"] > r["bn_rank_means"]["rank_spread"]["stratified"]
    assert r["sync_batchnorm_error"].startswith("ValueError") and "refused on CPU" in claims["sync_batchnorm"]["text"]
    assert claims["payoff"]["text"].startswith("Judged on the weights")
    assert payoff_first(tmp_path) == claims["payoff"]["text"], "the payoff section opens with the measured answer"
    assert r["chapter_s"] > r["job_s"] > 0 and "min on this machine" in claims["chapter_time"]["text"]


def claims_of(r: dict) -> dict:
    """The recorded claims by id."""
    return {c["id"]: c for c in r["claims"]}


def payoff_first(out) -> str:
    """The first text the executed chapter shows after its payoff heading (section 3)."""
    cells = json.loads((out / "01_load_imbalance.ipynb").read_text(encoding="utf-8"))["cells"]
    at = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("## 3. Does the fix pay off"))
    outputs = next(c for c in cells[at + 1:] if c["cell_type"] == "code")["outputs"]
    return "".join(outputs[0]["data"]["text/markdown"]).strip()
