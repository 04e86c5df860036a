"""Precise BN in one process: a batch's statistics read from a training forward pass, the recalibrated running
statistics equal to the data's, pooled over batches and (simulated) ranks; the ranks' spread of batch means."""

import threading

import numpy as np
import pytest

from helpers.train import batchnorm


def _net(momentum: float):
    """BatchNorm on the images themselves (its statistics are the data's), then a convolution and a second one."""
    import mindspore as ms
    from mindspore import nn

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)

    class Tiny(nn.Cell):
        def __init__(self):
            super().__init__()
            self.bn0 = nn.BatchNorm2d(3, momentum=momentum)
            self.conv = nn.Conv2d(3, 4, 3, has_bias=False)
            self.bn1 = nn.BatchNorm2d(4, momentum=momentum)

        def construct(self, x):
            return self.bn1(self.conv(self.bn0(x)))

    return Tiny()


def _batches(k: int, n: int = 6, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)    # each batch its own centre, so the variance of the means counts
    return [rng.normal(rng.normal(0, 2, (1, 3, 1, 1)), 1.5, (n, 3, 5, 5)).astype(np.float32) for _ in range(k)]


def _moving(cell):
    return cell.moving_mean.asnumpy().astype(np.float64), cell.moving_variance.asnumpy().astype(np.float64)


@pytest.mark.parametrize("momentum", [0.9, 0.5])
def test_a_forward_pass_gives_the_batch_statistics_and_leaves_the_running_ones(momentum):
    net = _net(momentum)
    net.set_train(False)
    before = [_moving(c) for c in batchnorm.bn_cells(net)]
    x = _batches(1)[0]
    (logits, stats), = batchnorm.forward_statistics(net, [x])
    mean, var = stats[0]
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, x.var(axis=(0, 2, 3), ddof=1), rtol=1e-5)     # BatchNorm keeps n/(n-1)
    assert logits.shape == (6, 4, 5, 5) and len(stats) == 2      # "same" padding
    for (m0, v0), c in zip(before, batchnorm.bn_cells(net)):
        np.testing.assert_array_equal(_moving(c)[0], m0)
        np.testing.assert_array_equal(_moving(c)[1], v0)
    assert net.training is False


@pytest.mark.parametrize("momentum", [0.9, 0.5])
def test_recalibrated_statistics_are_the_datas(momentum):
    net = _net(momentum)
    batches = _batches(3)
    per_batch = [stats for _, stats in batchnorm.forward_statistics(net, batches)]
    assert batchnorm.recalibrate(net, batches) == {"images": 18}
    bn0, bn1 = batchnorm.bn_cells(net)
    pooled = np.concatenate(batches)
    # the first layer sees the images: its running statistics are now theirs, all batches pooled
    mean, var = _moving(bn0)
    np.testing.assert_allclose(mean, pooled.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    within = np.mean([b.var(axis=(0, 2, 3), ddof=1) for b in batches], axis=0)
    between = np.var([b.mean(axis=(0, 2, 3)) for b in batches], axis=0)
    np.testing.assert_allclose(var, within + between, rtol=1e-5)
    np.testing.assert_allclose(var, pooled.var(axis=(0, 2, 3)), rtol=0.02)     # up to the batches' n/(n-1)
    # a deeper layer: the batches' own statistics (each normalised by its batch above it), pooled the same way
    mean1, var1 = _moving(bn1)
    m1 = np.array([s[1][0] for s in per_batch])
    np.testing.assert_allclose(mean1, m1.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var1, np.mean([s[1][1] for s in per_batch], axis=0) + m1.var(axis=0), rtol=1e-5)


def test_one_batch_recalibrates_to_its_own_statistics_and_inference_uses_them():
    import mindspore as ms

    net = _net(0.9)
    x = _batches(1, seed=3)[0]
    batchnorm.recalibrate(net, [x])
    mean, var = _moving(batchnorm.bn_cells(net)[0])
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, x.var(axis=(0, 2, 3), ddof=1), rtol=1e-5)
    net.set_train(False)
    out = net.bn0(ms.Tensor(x)).asnumpy()      # gamma 1, beta 0: inference normalises by the recalibrated ones
    expected = (x - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_a_probe_batch_rides_along_and_stays_out_of_the_statistics():
    net = _net(0.9)
    probe, *batches = _batches(3, seed=5)
    (logits, _), = batchnorm.forward_statistics(net, [probe])
    done = batchnorm.recalibrate(net, batches, probe=probe)
    np.testing.assert_allclose(done["logits"], logits, rtol=1e-5, atol=1e-5)   # its own batch statistics
    assert done["images"] == 12 and done["spread"]["layers"] == [0.0, 0.0]       # one rank: nothing apart
    mean, var = _moving(batchnorm.bn_cells(net)[0])
    np.testing.assert_allclose(mean, np.concatenate(batches).mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)


def _as_ranks(fn, per_rank: list):
    """``fn(arg, reduce, world)`` on ``len(per_rank)`` threads whose ``reduce`` sums a vector over them."""
    world, box, lock = len(per_rank), {}, threading.Lock()
    barrier = threading.Barrier(world)

    def reduce(v):
        with lock:
            box.setdefault("round", []).append(np.asarray(v, np.float64))
        barrier.wait()
        total = np.sum(box["round"], axis=0)
        if barrier.wait() == 0:
            box.pop("round")
        barrier.wait()
        return total

    results = [None] * world

    def run(r):
        results[r] = fn(per_rank[r], reduce, world)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_pooled_over_ranks_equals_all_batches_of_all_ranks():
    rng = np.random.default_rng(1)
    ranks = [[[(rng.normal(r, 1, 4), rng.uniform(0.5, 2, 4))] for _ in range(2)] for r in range(3)]  # 3 ranks x 2 batches
    every = [layer for batches in ranks for b in batches for layer in b]
    means = np.array([m for m, _ in every])
    expect_var = np.mean([v for _, v in every], axis=0) + means.var(axis=0)
    for (mean, var), in _as_ranks(lambda b, red, w: batchnorm.pooled_statistics(b, red, w), ranks):
        np.testing.assert_allclose(mean, means.mean(axis=0))
        np.testing.assert_allclose(var, expect_var)


def test_rank_spread_is_zero_for_equal_ranks_and_measures_apart_ones():
    same = [[(np.ones(3), np.full(3, 4.0))] for _ in range(4)]
    for s in _as_ranks(batchnorm.rank_spread, same):
        assert s["layers"] == [0.0] and s["z"] == [0.0, 0.0, 0.0]
    # 2 ranks whose batch means sit at -1 and +1 with variance 3 each: pooled variance 3 + 1, spread 1 / 2
    apart = [[(np.full(2, -1.0), np.full(2, 3.0))], [(np.full(2, 1.0), np.full(2, 3.0))]]
    out = _as_ranks(batchnorm.rank_spread, apart)
    assert out[0]["layers"] == pytest.approx([0.5]) and out[0]["z"] == pytest.approx([-0.5, -0.5])
    assert out[1]["z"] == pytest.approx([0.5, 0.5])


def test_cross_entropy():
    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]))
    assert batchnorm.cross_entropy(logits, [0, 1]) == pytest.approx(-(np.log(0.5) + np.log(0.8)) / 2)


def test_two_sets_in_one_pair_of_reductions_equal_each_alone():
    rng = np.random.default_rng(2)
    ranks = [([[(rng.normal(r, 1, 3), rng.uniform(1, 2, 3))] for _ in range(2)],
              [(rng.normal(-r, 1, 3), rng.uniform(1, 2, 3))]) for r in range(3)]
    both = _as_ranks(lambda x, red, w: batchnorm._moments([x[0], [x[1]]], red, w), ranks)
    pooled = _as_ranks(lambda x, red, w: batchnorm.pooled_statistics(x[0], red, w), ranks)
    spread = _as_ranks(lambda x, red, w: batchnorm.rank_spread(x[1], red, w), ranks)
    for r in range(3):
        (c, b, w), probe = both[r]
        np.testing.assert_allclose(c[0], pooled[r][0][0])
        np.testing.assert_allclose(w[0] + b[0], pooled[r][0][1])
        got = batchnorm._spread(ranks[r][1], *probe)
        assert got["layers"] == pytest.approx(spread[r]["layers"]) and got["z"] == pytest.approx(spread[r]["z"])
