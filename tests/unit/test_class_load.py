"""Chapter 01's reading cost per class: measured on the stand-in, predicted per split, said from the numbers."""

from helpers.conclusions.ch01 import _class_load_claim
from helpers.topics.class_load import EVEN_RATIO, class_load_md, class_load_rows, every_nth, measure_class_load


def load(ratio: float, contiguous: float) -> dict:
    predicted = {"contiguous": dict(step_max_over_mean=contiguous, shard_max_over_mean=contiguous, slowest_rank=7,
                                    steps=4),
                 "stratified": dict(step_max_over_mean=1.01, shard_max_over_mean=1.0, slowest_rank=0, steps=4)}
    return dict(cost_ratio=ratio, sample=10, predicted=predicted, class_ms={}, class_kb={})


def test_even_classes_are_said_to_make_no_rank_wait_and_uneven_ones_name_the_split_and_rank():
    even = class_load_md(load(EVEN_RATIO - 0.2, 1.04))
    assert "cost about the same" in even and "no split can make a rank wait" in even and "1.04x" in even
    uneven = class_load_md(load(6.0, 1.8))
    assert "6.00x the cheapest" in uneven and "under contiguous blocks the slowest rank" in uneven
    assert "1.80x the mean load per step (rank 7)" in uneven
    assert class_load_rows(load(6.0, 1.8))[0] == ("contiguous blocks", 1.8, 7)
    c = _class_load_claim(load(6.0, 1.8))
    assert c.holds is None and "6.00x" in c.text and "contiguous 1.80x" in c.text


def test_the_stand_in_is_measured_per_class_and_every_planned_split_is_predicted(ci_config):
    from helpers.chapters.load_imbalance import plan_splits
    from helpers.train.image_folder import scan_split

    index = scan_split(ci_config.data_dir, "train")
    plan = plan_splits(index.labels, ci_config.world_size, ci_config.seed, ci_config.global_batch)
    got = measure_class_load(ci_config, index.labels, plan.shards, "ci")
    assert set(got["class_ms"]) == set(index.classes) and all(v > 0 for v in got["class_ms"].values())
    assert set(got["predicted"]) == set(plan.shards) and got["cost_ratio"] >= 1.0
    assert all(p["steps"] == ci_config.steps for p in got["predicted"].values())


def test_progress_shows_every_nth_class_and_the_last():
    shown = []
    progress = every_nth(100, 250, shown.append)
    for k in range(250):
        progress(f"[{k + 1}/250]")
    assert shown == ["[100/250]", "[200/250]", "[250/250]"]
