"""Stratified split vs MindSpore's DistributedSampler(shuffle=True) at ImageNet scale, labels only.

Prints one JSON object: the time to produce all shards with
:func:`helpers.train.stratified_split.stratified_shards` (one call yields every shard), the time to iterate
MindSpore's own sampler for the same shards, their ratio, and how far each split's worst shard is from the
global class mix (max TV). Iterating DistributedSampler costs ~0.1 ms per sample on 2 cores, so by default
one shard is iterated for real and the total is extrapolated (the JSON says so); the other shards' indices,
needed for max TV, come from the same sampler through the dataset's random access (also timed).

Goals: stratified at least 20x faster, all 8 shards in under 0.5 s, max TV <= 0.002.

    python benchmarks/sampler.py [--iterate-shards 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

os.environ.setdefault("GLOG_v", "3")


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--iterate-shards", type=int, default=1,
                        help="shards of DistributedSampler to iterate for real (the rest is extrapolated)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of the stratified split")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch-per-rank", type=int, default=32)
    return parser.parse_args()


def _time_stratified(labels, n: int, seed: int, repeats: int) -> dict:
    """All shards of the stratified split, timed ``repeats`` times, and one rank's sampler built once."""
    from helpers.train.sampler import StratifiedDistributedSampler
    from helpers.train.stratified_split import stratified_shards

    runs = [_timed(lambda: stratified_shards(labels, n, seed)) for _ in range(repeats)]
    _, rank_wall, _ = _timed(lambda: StratifiedDistributedSampler(labels, n, 0, seed=seed))
    return {"shards": runs[0][0], "wall": [r[1] for r in runs], "cpu": [r[2] for r in runs],
            "rank_wall": rank_wall}


def _time_distributed_shuffle(labels, n: int, seed: int, iterate_shards: int) -> dict:
    """MindSpore's shuffled DistributedSampler: ``iterate_shards`` shards iterated, the others looked up."""
    import numpy as np

    from helpers.train.sampler import shard_indices

    iterated, iter_times = [], []
    for k in range(iterate_shards):
        (shard,), t, _ = _timed(lambda: shard_indices("distributed_shuffle", labels, n, seed, shards=[k]))
        iterated.append(shard)
        iter_times.append(t)
    rest_ids = list(range(iterate_shards, n))
    rest, lookup_s, _ = _timed(lambda: shard_indices("distributed_shuffle", labels, n, seed, shards=rest_ids,
                                                     method="lookup"))
    check = shard_indices("distributed_shuffle", labels, n, seed, shards=[0], method="lookup")
    return {"shards": iterated + rest, "iter_times": iter_times, "rest": len(rest_ids), "lookup_s": lookup_s,
            "lookup_matches": bool(np.array_equal(check[0], iterated[0])) if iterated else None}


def main() -> dict:
    """Time the stratified split against iterating DistributedSampler shards; returns the results dict."""
    args = _arguments()

    import mindspore
    import numpy as np

    from helpers.topics.shard_stats import imagenet_shaped_labels, max_tv, step_coverage
    from helpers.train.sampler import shard_indices

    n, b = args.shards, args.batch_per_rank
    labels = imagenet_shaped_labels()
    strat = _time_stratified(labels, n, args.seed, args.repeats)
    dist = _time_distributed_shuffle(labels, n, args.seed, args.iterate_shards)
    iterate_all_s = statistics.mean(dist["iter_times"]) * n

    others = {k: shard_indices(k, labels, n) for k in ("contiguous", "distributed")}
    splits = {"stratified": strat["shards"], "distributed_shuffle": dist["shards"], **others}
    tv = {k: max_tv(v, labels) for k, v in splits.items()}
    cov = {k: step_coverage(v, labels, b) for k, v in splits.items()}
    stratified_s = statistics.median(strat["wall"])
    ratio = iterate_all_s / stratified_s
    counts = np.bincount(labels)
    return {
        "labels": {"n": int(labels.size), "classes": int(labels.max()) + 1,
                   "per_class_min": int(counts.min()), "per_class_max": int(counts.max())},
        "shards": n,
        "seed": args.seed,
        "stratified_all_shards_s": round(stratified_s, 4),
        "stratified_all_shards_s_min": round(min(strat["wall"]), 4),
        "stratified_all_shards_cpu_s": round(statistics.median(strat["cpu"]), 4),
        "stratified_runs": args.repeats,
        "stratified_one_rank_sampler_s": round(strat["rank_wall"], 4),
        "distributed_shuffle_iterate_s_per_shard": [round(t, 3) for t in dist["iter_times"]],
        "distributed_shuffle_shards_iterated": args.iterate_shards,
        "distributed_shuffle_iterate_all_shards_s": round(iterate_all_s, 3),
        "distributed_shuffle_all_shards_extrapolated": args.iterate_shards < n,
        "distributed_shuffle_lookup_s": {"shards": dist["rest"], "seconds": round(dist["lookup_s"], 3)},
        "lookup_matches_iteration": dist["lookup_matches"],
        "speedup_vs_iterating": round(ratio, 1),
        "max_tv": {k: round(v, 6) for k, v in tv.items()},
        "batch_per_rank": b,
        "min_classes_per_step": {k: v.min_classes for k, v in cov.items()},
        "mean_classes_per_step": {k: round(v.mean_classes, 2) for k, v in cov.items()},
        "goals": {"speedup_at_least_20x": ratio >= 20, "all_shards_under_0_5_s": stratified_s < 0.5,
                  "stratified_max_tv_at_most_0_002": tv["stratified"] <= 0.002},
        "environment": {"mindspore": mindspore.__version__, "numpy": np.__version__,
                        "python": platform.python_version(), "cpus": os.cpu_count(),
                        "load_avg_1min": round(os.getloadavg()[0], 2)},
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
