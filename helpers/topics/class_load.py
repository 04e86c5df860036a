"""What each class of the chapter's data costs to read, and each split's predicted slowest rank from it.

Chapter 01 measures the class mix its splits give the ranks; whether a split also makes a rank *slower* depends on
what its classes cost to decode and resize (``data_prep.class_costs``): the same command a user runs on ImageNet.
"""

from __future__ import annotations

import numpy as np

from data_prep.class_costs import SPLIT_NAMES, class_costs, predict_splits
from helpers.core.paths import resolve

SAMPLE = {"ci": 10, "cpu": 20, "gpu8": 10}   # images read per class (gpu8: 1,000 classes, ~10,000 images)
REPEAT = 3              # each image's time is the best of this many runs: other ranks' load only adds time
EVEN_RATIO = 1.5        # costliest class under this many times the cheapest: the classes cost about the same


def measure_class_load(cfg, labels, shards: dict, preset: str, progress=None) -> dict:
    """Per-class decode + resize cost of ``cfg``'s train split and, for the chapter's planned ``shards``, each
    split's predicted slowest-rank load per step over its mean over ``cfg.steps`` steps (JSON-ready)."""
    report = class_costs(resolve(cfg.data_dir), sample=SAMPLE.get(preset, 10), size=cfg.image_size, stem=cfg.stem,
                         repeat=REPEAT, seed=cfg.seed, progress=progress)
    predicted = predict_splits(labels, report["class_cost_s"], ranks=cfg.world_size, batch=cfg.batch_per_rank,
                               seed=cfg.seed, steps=cfg.steps, shards=shards)
    cost = np.asarray(report["class_cost_s"])
    return dict(class_ms={r["name"]: round(r["decode_resize_s"] * 1e3, 4) for r in report["classes"]},
                class_kb={r["name"]: round(r["mean_bytes"] / 1024, 2) for r in report["classes"]},
                cost_ratio=float(cost.max() / cost.min()), sample=report["sample"], predicted=predicted)


def times(ratio: float) -> str:
    """A cost ratio as read: two decimals near 1, whole numbers with separators once it is large."""
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:,.0f}x"


def every_nth(n: int, total: int, show=print):
    """A ``progress`` callback that shows every ``n``-th line and the last of ``total`` (1,000 ImageNet classes)."""
    seen = [0]

    def progress(line: str) -> None:
        seen[0] += 1
        if seen[0] % n == 0 or seen[0] == total:
            show(line)
    return progress


def class_load_rows(load: dict) -> list[tuple]:
    """(split, predicted slowest rank's load per step / mean, the heaviest rank) per split."""
    return [(SPLIT_NAMES.get(k, k), round(p["step_max_over_mean"], 3), p["slowest_rank"])
            for k, p in load["predicted"].items()]


def class_load_md(load: dict) -> str:
    """One sentence from the numbers: whether this data's classes differ enough to make a split slow a rank."""
    worst = max(load["predicted"], key=lambda k: load["predicted"][k]["step_max_over_mean"])
    ratio, pred = load["cost_ratio"], load["predicted"][worst]["step_max_over_mean"]
    if ratio < EVEN_RATIO:
        return (f"The costliest class took {ratio:.2f}x the cheapest to decode and resize: the classes cost about "
                f"the same to read, so no split can make a rank wait for data here (worst prediction: "
                f"{SPLIT_NAMES[worst]}, {pred:.2f}x the mean per step). On ImageNet, where classes differ in file "
                "size, run `python -m data_prep.class_costs <your tree>`.")
    return (f"The costliest class took {times(ratio)} the cheapest to decode and resize: under {SPLIT_NAMES[worst]} "
            f"the slowest rank would read {pred:.2f}x the mean load per step (rank "
            f"{load['predicted'][worst]['slowest_rank']}).")
