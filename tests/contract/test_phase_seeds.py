"""Chapter 01's seeds as phases rely on MindSpore's DistributedSampler reading the global dataset seed when it is
built (helpers.train.phases builds each seed's datasets right after ds.config.set_seed)."""

from helpers.train.phases import SAMPLERS_SOURCE, SEED_READ_AT_BUILD
from tests.contract.wheel import assert_pinned


def test_distributed_sampler_reads_the_dataset_seed_when_built():
    assert_pinned(SEED_READ_AT_BUILD, SAMPLERS_SOURCE)


def test_a_dataset_built_after_set_seed_shuffles_by_that_seed():
    import mindspore.dataset as ds
    import numpy as np

    def order(seed):
        ds.config.set_seed(seed)
        data = ds.NumpySlicesDataset({"i": np.arange(64)}, num_shards=2, shard_id=0, shuffle=True)
        ds.config.set_seed(99)          # changed after the build: must not matter
        return [int(r[0]) for r in data.create_tuple_iterator(num_epochs=1, output_numpy=True)]

    assert order(1) == order(1) and order(1) != order(2)
