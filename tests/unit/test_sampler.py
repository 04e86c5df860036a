"""The stratified sampler: its errors, and its use inside real (single-process) ``mindspore.dataset``
pipelines (the split's own properties: test_stratified_split.py). No msrun here: the 8-rank job test lives
with the chapter's job tests."""

import numpy as np
import pytest

from helpers.core.errors import ConfigError, DataError
from helpers.train.sampler import StratifiedDistributedSampler, shard_indices
from helpers.train.stratified_split import stratified_shards


# ------------------------------------------------------------------------------------------------ errors
def test_errors_say_what_is_wrong():
    labels = np.repeat(np.arange(3), [10, 10, 10])
    with pytest.raises(ConfigError, match=r"shard_id=8 is out of range: expected \[0, 7\]"):
        StratifiedDistributedSampler(labels, 8, 8)
    with pytest.raises(ConfigError, match="shard_id"):
        StratifiedDistributedSampler(labels, 8, -1)
    with pytest.raises(ConfigError, match="num_shards"):
        stratified_shards(labels, 0)
    with pytest.raises(DataError, match="must be integers.*float64.*astype"):
        stratified_shards(labels.astype(float), 2)
    with pytest.raises(DataError, match="must be integers"):
        stratified_shards(["a", "b"], 2)
    with pytest.raises(DataError, match="must be integers"):
        stratified_shards(np.array([True, False, True]), 2)
    with pytest.raises(DataError, match="empty"):
        stratified_shards([], 2)
    with pytest.raises(DataError, match="1-D"):
        stratified_shards(labels.reshape(3, 10), 2)
    with pytest.raises(DataError, match=">= 0"):
        stratified_shards([0, 1, -1], 1)
    with pytest.raises(ConfigError, match="remainder"):
        stratified_shards(labels, 2, remainder="wrap")
    with pytest.raises(ConfigError, match="small_class"):
        stratified_shards(labels, 2, small_class="ignore")
    with pytest.raises(ConfigError, match="global_batch=12 is not a multiple of num_shards=8"):
        stratified_shards(labels, 8, global_batch=12)


def test_a_class_smaller_than_the_shards_is_named_with_the_way_out():
    labels = np.repeat(np.arange(3), [20, 3, 20])
    with pytest.raises(DataError, match=r"class 1 \('n01443537'\) has 3.*small_class='drop'.*'repeat'"):
        StratifiedDistributedSampler(labels, 8, 0, class_names=["a", "n01443537", "c"])


# ------------------------------------------------------------------------------------- real pipelines
@pytest.fixture(scope="module")
def unequal_labels():
    return np.repeat(np.arange(5), [31, 27, 22, 17, 12]).astype(np.int32)   # class-sorted, 109 samples


def _column(data, name):
    return np.array([int(row[name]) for row in data.create_dict_iterator(num_epochs=1, output_numpy=True)])


def test_sampler_inside_numpy_slices_dataset(unequal_labels):
    import mindspore.dataset as ds

    labels = unequal_labels
    for shard_id in (0, 3):
        sampler = StratifiedDistributedSampler(labels, 4, shard_id, seed=7)
        expected = stratified_shards(labels, 4, seed=7)[shard_id]
        data = ds.NumpySlicesDataset({"index": np.arange(labels.size), "label": labels}, sampler=sampler)
        assert data.get_dataset_size() == len(sampler) == len(expected) == 28
        assert np.array_equal(_column(data, "index"), expected)
        assert np.array_equal(_column(data, "label"), labels[expected])


def test_sampler_inside_generator_dataset_reshuffles_each_epoch(unequal_labels):
    import mindspore.dataset as ds

    labels = unequal_labels

    class Source:                                        # random-access source: what GeneratorDataset needs
        def __getitem__(self, i):
            return np.int64(i), labels[i]

        def __len__(self):
            return labels.size

    sampler = StratifiedDistributedSampler(labels, 4, 1, seed=3, epoch=2)
    data = ds.GeneratorDataset(Source(), ["index", "label"], sampler=sampler)
    it = data.create_tuple_iterator(num_epochs=2, output_numpy=True)
    for epoch in (2, 3):                                 # the pipeline's reset() advances the epoch
        got = np.array([int(r[0]) for r in it])
        assert np.array_equal(got, stratified_shards(labels, 4, seed=3, epoch=epoch)[1])

    sampler.set_epoch(5)                                 # one iterator per epoch: set_epoch before each
    got = _column(ds.GeneratorDataset(Source(), ["index", "label"], sampler=sampler), "index")
    assert np.array_equal(got, stratified_shards(labels, 4, seed=3, epoch=5)[1])
    assert np.array_equal(sampler.indices(), got)


def test_sampler_from_image_folder_matches_the_reader(standin):
    """Labels from the folder listing (no decoding) line up with what ImageFolderDataset reads."""
    import mindspore.dataset as ds

    split = standin / "train"
    sampler = StratifiedDistributedSampler.from_image_folder(split, 8, 5, seed=1)
    data = ds.ImageFolderDataset(str(split), sampler=sampler, decode=False)
    got = _column(data, "label")
    assert np.array_equal(got, sampler.labels[sampler.indices()])
    assert len(got) == len(sampler) and len(np.unique(got)) == 10


def test_a_sampler_for_another_dataset_is_refused(unequal_labels):
    import mindspore.dataset as ds

    sampler = StratifiedDistributedSampler(unequal_labels[:100], 2, 0)
    data = ds.NumpySlicesDataset({"index": np.arange(unequal_labels.size)}, sampler=sampler)
    with pytest.raises(Exception, match="built for 100 labels but the dataset has 109"):
        _column(data, "index")


# ------------------------------------------------------------------------------ the strategies compared
def _real(n, num_shards, shard_id, shuffle):
    import mindspore.dataset as ds

    data = ds.NumpySlicesDataset({"index": np.arange(n)}, num_shards=num_shards, shard_id=shard_id,
                                 shuffle=shuffle)
    return _column(data, "index")


def test_distributed_matches_mindspore_and_shuffle_matches_a_worker():
    import mindspore.dataset as ds

    labels = np.repeat(np.arange(4), [9, 7, 5, 2])              # 23 samples, 4 shards: padding
    for k, s in enumerate(shard_indices("distributed", labels, 4)):
        assert np.array_equal(s, _real(23, 4, k, False))
    iterated = shard_indices("distributed_shuffle", labels, 4, seed=11)
    looked_up = shard_indices("distributed_shuffle", labels, 4, seed=11, method="lookup")
    before = ds.config.get_seed()
    try:
        ds.config.set_seed(11)                                   # what helpers.train.worker does
        worker = [_real(23, 4, k, True) for k in range(4)]
    finally:
        ds.config.set_seed(before)
    for a, b, c in zip(iterated, looked_up, worker):
        assert np.array_equal(a, b) and np.array_equal(a, c)
    assert len(np.unique(np.concatenate(iterated))) == 23
    other = shard_indices("distributed_shuffle", labels, 4, seed=12, shards=[0], method="lookup")
    assert not np.array_equal(other[0], iterated[0])


def test_contiguous_is_a_block_split():
    labels = np.repeat(np.arange(3), [5, 4, 2])
    blocks = shard_indices("contiguous", labels, 3)
    assert [b.tolist() for b in blocks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    with pytest.raises(ConfigError, match="kind"):
        shard_indices("round_robin", labels, 3)
