"""Balance measures on hand-checked cases, the ImageNet-shaped labels, and the chapter's claim that the
stratified split is the closest to the global class mix on class-sorted data with unequal classes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.topics.shard_stats import (class_histograms, global_mix, imagenet_shaped_counts, imagenet_shaped_labels,
                             max_tv, shard_tv, step_coverage, step_labels, summarize)
from helpers.core.errors import ConfigError, DataError
from helpers.train.sampler import shard_indices

FAST = settings(max_examples=50, deadline=None)


def test_histograms_and_tv_on_a_hand_made_split():
    labels = np.array([0, 0, 1, 1])
    disjoint = [np.array([0, 1]), np.array([2, 3])]
    mixed = [np.array([0, 2]), np.array([1, 3])]
    assert class_histograms(disjoint, labels).tolist() == [[2, 0], [0, 2]]
    assert global_mix(labels).tolist() == [0.5, 0.5]
    assert shard_tv(disjoint, labels).tolist() == [0.5, 0.5]
    assert max_tv(mixed, labels) == 0.0


def test_step_coverage_counts_distinct_classes_and_entropy():
    labels = np.array([0, 0, 1, 1, 2, 3, 2, 3])
    shards = [np.array([0, 1, 4, 5]), np.array([2, 3, 6, 7])]      # step 0: 0,0,1,1  step 1: 2,3,2,3
    assert step_labels(shards, labels, 2).tolist() == [[0, 0, 1, 1], [2, 3, 2, 3]]
    cov = step_coverage(shards, labels, 2)
    assert cov.distinct.tolist() == [2, 2] and cov.num_steps == 2
    assert np.allclose(cov.entropy_bits, [1.0, 1.0])
    one = step_coverage([np.array([0, 1, 2, 3])], labels, 4)       # one step of 0,0,1,1
    assert one.min_classes == 2 and np.isclose(one.mean_entropy_bits, 1.0)
    uneven = step_coverage([np.arange(8)], np.array([0, 0, 0, 1, 2, 2, 2, 2]), 4)
    p = np.array([3, 1]) / 4
    assert np.isclose(uneven.entropy_bits[0], -(p * np.log2(p)).sum()) and uneven.entropy_bits[1] == 0
    summary = summarize(shards, labels, 2)
    assert summary["min_classes_per_step"] == 2 and summary["steps"] == 2


@FAST
@given(st.lists(st.integers(0, 6), min_size=1, max_size=200), st.integers(1, 5), st.integers(1, 8))
def test_step_coverage_matches_a_plain_loop(values, n, b):
    labels = np.array(values)
    shards = [np.arange(k, labels.size, n) for k in range(n)]
    if min(len(s) for s in shards) < b:
        with pytest.raises(ConfigError, match="no complete step"):
            step_coverage(shards, labels, b)
        return
    cov = step_coverage(shards, labels, b)
    for i in range(cov.num_steps):
        step = np.concatenate([labels[s[i * b:(i + 1) * b]] for s in shards])
        _, counts = np.unique(step, return_counts=True)
        p = counts / counts.sum()
        assert cov.distinct[i] == len(counts)
        assert np.isclose(cov.entropy_bits[i], -(p * np.log2(p)).sum())


def test_bad_inputs():
    with pytest.raises(ConfigError, match="batch_per_rank"):
        step_coverage([np.arange(4)], np.zeros(4, dtype=int), 0)
    with pytest.raises(DataError, match="class ids"):
        max_tv([np.arange(2)], np.array([0.5, 1.5]))
    with pytest.raises(DataError, match="empty"):
        max_tv([np.arange(2), np.array([], dtype=int)], np.array([0, 1]))


def test_imagenet_shaped_labels():
    labels = imagenet_shaped_labels()
    counts = np.bincount(labels)
    assert labels.dtype == np.int32 and labels.size == 1_281_167
    assert counts.size == 1000 and counts.min() == 732 and counts.max() == 1300
    assert np.all(np.diff(labels) >= 0), "class-sorted, like the ImageNet reader"
    assert np.array_equal(labels, imagenet_shaped_labels(0))
    other = imagenet_shaped_counts(1)
    assert other.sum() == 1_281_167 and other.min() == 732 and not np.array_equal(other, counts)


@FAST
@given(st.lists(st.integers(20, 150), min_size=4, max_size=12, unique=True), st.integers(0, 1000))
def test_stratified_is_closest_to_the_global_mix(sizes, seed):
    """Class-sorted, unequal classes, 8 shards: stratified max TV at most DistributedSampler(shuffle=False)'s
    (both sit near the rounding floor) and far below the contiguous split's."""
    labels = np.repeat(np.arange(len(sizes)), sorted(sizes, reverse=True))
    tv = {k: max_tv(shard_indices(k, labels, 8, seed), labels) for k in ("contiguous", "distributed",
                                                                          "stratified")}
    assert tv["stratified"] <= tv["distributed"] + 1e-12
    assert tv["stratified"] < tv["contiguous"] / 5


def test_stratified_beats_every_strategy_on_the_standin_shape():
    """The stand-in's class counts, 8 shards, the real DistributedSampler(shuffle=True) included."""
    labels = np.repeat(np.arange(10), [142, 137, 125, 120, 110, 102, 93, 83, 72, 66])
    for seed in (1, 2):
        tv = {k: max_tv(shard_indices(k, labels, 8, seed, method="lookup"), labels)
              for k in ("contiguous", "distributed", "distributed_shuffle", "stratified")}
        assert tv["stratified"] == min(tv.values())
        assert all(tv["stratified"] < v for k, v in tv.items() if k != "stratified")
        cov = {k: step_coverage(shard_indices(k, labels, 8, seed, method="lookup"), labels, 8).min_classes
               for k in ("contiguous", "distributed", "stratified")}
        assert cov["stratified"] == 10 > cov["contiguous"] and cov["distributed"] <= 2
