"""Gradient accumulation equals the full batch (one rank, no BatchNorm), frozen BatchNorm restores it, and the
built-in cells' factor K (``helpers.train.accumulation_check``, no processes started here)."""

import numpy as np
import pytest


def check_on_random_batch(seed: int, **model):
    """``check_local`` on 8 random 16 px images split into 4 micro-batches, on CPU."""
    import mindspore as ms

    from helpers.train.accumulation_check import check_local

    ms.set_device("CPU")
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 10, 8).astype(np.int32)
    return check_local(images, labels, k=4, **model)


@pytest.fixture(scope="module")
def local_check():
    return check_on_random_batch(0, arch=None, builtin=True)


def test_accumulated_gradient_equals_full_batch_without_batchnorm(local_check):
    r = local_check["no_bn"]
    assert local_check["micro_batch"] == 2 and local_check["accumulation_steps"] == 4
    assert r["max_abs_grad"] > 1e-3, "a real gradient, not zeros (the buffers were read before zeroing)"
    assert r["max_abs_diff"] <= 1e-6
    assert r["ratio"] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("which", ["nn.GradAccumulationCell", "parallel.nn.GradAccumulation"])
def test_builtin_cells_sum_the_micro_batch_losses(local_check, which):
    r = local_check["builtin"][which]
    assert "error" not in r, r.get("error")
    assert r["ratio"] == pytest.approx(4.0, rel=1e-4), "K micro-batch means added: K x the mean gradient"
    assert r["cosine"] == pytest.approx(1.0, abs=1e-6)


def test_accumulating_step_wants_k_micro_batches():
    import mindspore as ms
    from mindspore import nn

    from helpers.train.grad_accumulation import AccumulatingTrainStep
    from helpers.train.accumulation_check import small_net

    net = small_net()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    step = AccumulatingTrainStep(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.1, 0.9), 4)
    one = (ms.Tensor(np.zeros((2, 3, 8, 8), np.float32)), ms.Tensor(np.zeros(2, np.int32)))
    with pytest.raises(ValueError, match="expected 4 micro-batches"):
        step([one, one])


def test_compare_reports_difference_ratio_and_cosine():
    from helpers.train.accumulation_check import compare

    ref = [np.array([1.0, -2.0]), np.array([[0.5]])]
    doubled = [2 * g for g in ref]
    r = compare(ref, doubled)
    assert r["ratio"] == pytest.approx(2.0) and r["cosine"] == pytest.approx(1.0)
    assert r["max_abs_diff"] == pytest.approx(2.0) and r["max_abs_grad"] == pytest.approx(2.0)
    assert r["elements"] == 3


@pytest.fixture(scope="module")
def resnet_check():
    return check_on_random_batch(1, arch="resnet18", width=0.125, stem="small", builtin=False)


def test_batchnorm_in_training_mode_breaks_equivalence_and_frozen_batchnorm_restores_it(resnet_check):
    """Same ResNet, same weights, same micro-batches: only whether BatchNorm uses the micro-batch's statistics
    differs, so the frozen check isolates the cause of the BatchNorm gap."""
    bn, frozen = resnet_check["bn"], resnet_check["bn_frozen"]
    assert resnet_check["bn_frozen_layers"] == 20, "every BatchNorm of ResNet-18: stem, 2 per block x 8, 3 downsamples"
    assert bn["cosine"] < 0.99 and bn["max_rel_diff"] > 1e-3, "micro-batch statistics: a real difference"
    assert frozen["elements"] == bn["elements"], "the same network's gradient"
    assert frozen["max_abs_grad"] > 1e-3
    assert frozen["max_abs_diff"] <= 1e-6 and frozen["cosine"] == pytest.approx(1.0, abs=1e-9)


def test_flat_summary_records_the_frozen_check(resnet_check):
    from helpers.train.accumulation_check import flat_summary

    rec = flat_summary(resnet_check)
    assert rec["grad_max_abs_diff_bn_frozen"] == resnet_check["bn_frozen"]["max_abs_diff"]
    assert rec["grad_cosine_bn_frozen"] == resnet_check["bn_frozen"]["cosine"]
    assert rec["bn_frozen_layers"] == 20


def test_freeze_batchnorm_sets_every_batchnorm_to_running_statistics():
    from mindspore import nn

    from helpers.train.accumulation_check import freeze_batchnorm, small_net

    net = nn.SequentialCell([nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.BatchNorm2d(4)])
    assert freeze_batchnorm(net) == 2
    assert all(c.use_batch_statistics is False for _, c in net.cells_and_names() if isinstance(c, nn.BatchNorm2d))
    assert freeze_batchnorm(small_net()) == 0


def o2_accumulation_run() -> dict:
    """Two accumulated steps over the gpu8 recipe's AMP O2 network on a tiny ResNet-18, in graph mode (the worker's
    mode; in PyNative O2's im2col matmul fails on CPU): the recipe, the losses, and how many parameters moved."""
    import mindspore as ms

    from helpers.core.config import job_config
    from helpers.train.grad_accumulation import AccumulatingTrainStep
    from helpers.train.worker import _build_train_step

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    cfg = job_config("gpu8", rehearse=True, arch="resnet18", width=0.125, image_size=16)
    net, step = _build_train_step(cfg, 10)
    acc = AccumulatingTrainStep(step.network, step.optimizer, 2)
    before = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    rng = np.random.default_rng(0)
    micro = [(ms.Tensor(rng.standard_normal((2, 3, 16, 16)).astype(np.float32)),
              ms.Tensor(rng.integers(0, 10, 2).astype(np.int32))) for _ in range(2)]
    losses = [float(acc(micro)) for _ in range(2)]
    moved = sum(not np.allclose(p.asnumpy(), before[p.name]) for p in net.trainable_params())
    return dict(recipe=[cfg.amp_level, cfg.loss_scale], losses=losses, moved=int(moved), params=len(before))


def test_accumulation_trains_the_gpu8_recipes_o2_network():
    """Chapter 02 on a card accumulates over the gpu8 recipe's AMP O2 network (dynamic loss scale dropped: the
    accumulating step owns the update); the same code path on a tiny ResNet-18 (its rehearsal, ResNet-50 at
    224 px, runs nightly). In a fresh interpreter: graph mode and O2's casts stay out of this test process."""
    from helpers.core.fresh_python import call_fresh

    r = call_fresh("tests.unit.test_accumulation_check:o2_accumulation_run", timeout_s=300)
    assert r["recipe"] == ["O2", "dynamic"], "the gpu8 recipe this test stands for"
    assert all(np.isfinite(r["losses"])), r["losses"]
    assert r["moved"] == r["params"], f"{r['params'] - r['moved']} parameters not updated"
