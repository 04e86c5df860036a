"""The stratified split's promises (``helpers.train.stratified_split``) as properties over random labels."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.core.errors import DataError
from helpers.topics.shard_stats import max_tv
from helpers.train.stratified_split import stratified_shards

FAST = settings(max_examples=50, deadline=None)


@st.composite
def datasets(draw, min_per_class=None):
    """(labels, num_shards): 1..12 classes of random sizes (some class ids unused), class-sorted or
    shuffled, 1..9 shards."""
    num_shards = draw(st.integers(1, 9))
    low = num_shards if min_per_class is None else min_per_class
    sizes = draw(st.lists(st.integers(low, 60) | st.just(0), min_size=1, max_size=12)
                 .filter(lambda s: sum(s) > 0))
    labels = np.repeat(np.arange(len(sizes)), sizes)
    if draw(st.booleans()):
        labels = np.random.default_rng(draw(st.integers(0, 2**16))).permutation(labels)
    return labels, num_shards


seeds = st.integers(0, 2**32 - 1)
epochs = st.integers(0, 50)


def per_class(shards, labels):
    n = labels.max() + 1
    return np.stack([np.bincount(labels[s], minlength=n) for s in shards])


# ------------------------------------------------------------------------------------------- properties
@FAST
@given(datasets(), seeds, epochs, st.sampled_from(["pad", "drop"]))
def test_split_promises(data, seed, epoch, remainder):
    labels, n = data
    shards = stratified_shards(labels, n, seed, epoch, remainder=remainder)
    total = labels.size
    lengths = {len(s) for s in shards}
    assert lengths == {-(-total // n) if remainder == "pad" else total // n}, "equal shard lengths"

    hist = per_class(shards, labels)
    assert (hist.max(axis=0) - hist.min(axis=0)).max() <= 1, "a class differs by at most 1 between shards"

    seen = np.bincount(np.concatenate(shards), minlength=total)
    if remainder == "pad":
        assert seen.min() >= 1, "every sample is read"
        assert (seen - 1).sum() == n * lengths.pop() - total, "the only repeats are the padding"
        assert seen.max() <= 2
        for s in shards:                              # a copy never lands on its original's shard
            assert len(np.unique(s)) == len(s) or n == 1
    else:
        assert seen.max() <= 1, "drop never repeats"
        assert (seen == 0).sum() == total - n * lengths.pop(), "only the remainder is left out"


@FAST
@given(datasets(), seeds)
def test_very_unequal_classes_take_the_sort_path(data, seed):
    """The within-class shuffle has a second path for very unequal classes; force it here."""
    import helpers.train.stratified_split as split

    labels, n = data
    old = split.DENSE_CELLS, split.DENSE_WASTE
    split.DENSE_CELLS, split.DENSE_WASTE = 0, 0
    try:
        shards = stratified_shards(labels, n, seed)
    finally:
        split.DENSE_CELLS, split.DENSE_WASTE = old
    hist = per_class(shards, labels)
    assert (hist.max(axis=0) - hist.min(axis=0)).max() <= 1
    assert np.bincount(np.concatenate(shards), minlength=labels.size).min() >= 1
    assert len({len(s) for s in shards}) == 1


@FAST
@given(datasets(), seeds, epochs)
def test_deterministic_for_seed_and_epoch(data, seed, epoch):
    labels, n = data
    a = stratified_shards(labels, n, seed, epoch)
    b = stratified_shards(labels.copy(), n, seed, epoch)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


@FAST
@given(datasets(min_per_class=10), seeds, epochs)
def test_epochs_and_seeds_reshuffle(data, seed, epoch):
    labels, n = data
    if labels.size < 40:
        labels = np.concatenate([labels, labels])
    a = np.concatenate(stratified_shards(labels, n, seed, epoch))
    assert not np.array_equal(a, np.concatenate(stratified_shards(labels, n, seed, epoch + 1)))
    assert not np.array_equal(a, np.concatenate(stratified_shards(labels, n, (seed + 1) % 2**32, epoch)))


@FAST
@given(datasets(), seeds, st.integers(1, 6), st.sampled_from(["pad", "drop"]))
def test_global_batch_gives_whole_steps(data, seed, per_rank, remainder):
    labels, n = data
    if remainder == "drop" and labels.size < n * per_rank:
        with pytest.raises(DataError, match="cannot fill"):
            stratified_shards(labels, n, seed, global_batch=n * per_rank, remainder=remainder)
        return
    shards = stratified_shards(labels, n, seed, global_batch=n * per_rank, remainder=remainder)
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) % per_rank == 0
    hist = per_class(shards, labels)
    assert (hist.max(axis=0) - hist.min(axis=0)).max() <= 1


@FAST
@given(st.lists(st.integers(1, 40), min_size=2, max_size=10), st.integers(2, 8), seeds,
       st.sampled_from(["drop", "repeat"]))
def test_small_classes_dropped_or_repeated(sizes, n, seed, mode):
    labels = np.repeat(np.arange(len(sizes)), sizes)
    small = [c for c, k in enumerate(sizes) if k < n]
    if mode == "drop" and len(small) == len(sizes):
        with pytest.raises(DataError, match="empty"):
            stratified_shards(labels, n, seed, small_class=mode)
        return
    shards = stratified_shards(labels, n, seed, small_class=mode)
    hist = per_class(shards, labels)
    assert (hist.max(axis=0) - hist.min(axis=0)).max() <= 1
    seen = np.bincount(np.concatenate(shards), minlength=labels.size)
    for c in small:
        members = labels == c
        if mode == "drop":
            assert seen[members].sum() == 0
        else:
            assert hist[:, c].min() >= 1, "a repeated small class reaches every shard"
            assert seen[members].min() >= 1
    big = ~np.isin(labels, small)
    assert np.all(seen[big] >= 1)


def test_steps_mix_classes_and_shards_stay_close_to_the_global_mix():
    """Class-sorted, unequal classes: every global step holds (almost) all classes in proportion."""
    from helpers.topics.shard_stats import step_coverage

    labels = np.repeat(np.arange(10), [142, 137, 125, 120, 110, 102, 93, 83, 72, 66])
    for seed in range(5):
        shards = stratified_shards(labels, 8, seed)
        cov = step_coverage(shards, labels, batch_per_rank=16)       # global step of 128
        assert cov.min_classes == 10
        assert max_tv(shards, labels) < 0.02
