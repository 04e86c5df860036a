import numpy as np
import pytest

import mindspore as ms
from mindspore import nn, ops

from helpers.core.im2col_shape import folds_batch
from helpers.train.im2col_conv import make_conv


def test_folds_batch_only_where_the_weight_outgrows_the_columns():
    # ResNet-18 x0.25 at 32 px: (out channels, kh*kw*in channels, output positions) of four of its convolutions
    assert not folds_batch(16, 3 * 9, 32 * 32)           # stem
    assert not folds_batch(16, 16 * 9, 32 * 32)          # layer1 3x3
    assert not folds_batch(64, 64 * 9, 8 * 8)            # layer3 3x3: 36864 < (64 + 576) * 64
    assert folds_batch(128, 128 * 9, 4 * 4)              # layer4 3x3: the weight copy per image is 8x the columns


class _SquareSum(nn.Cell):
    """``sum(net(x) ** 2)``: a cell, so GRAPH_MODE can differentiate it."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x):
        return (self.net(x) ** 2).sum()


def _grads(net, x):
    return ops.grad(_SquareSum(net), grad_position=0, weights=net.trainable_params())(x)


@pytest.mark.parametrize("mode", ["PYNATIVE_MODE", "GRAPH_MODE"])
@pytest.mark.parametrize("k, stride, cin, cout, size", [(3, 1, 8, 16, 2), (3, 2, 8, 16, 4), (1, 1, 8, 16, 2),
                                                        (1, 2, 8, 16, 4)])
def test_folded_batch_matches_native_outputs_and_gradients(mode, k, stride, cin, cout, size):
    ho = (size + 2 * (k // 2) - k) // stride + 1
    assert folds_batch(cout, cin * k * k, ho * ho), "the case must take the folded path"
    ms.set_context(mode=getattr(ms, mode))
    try:
        rng = np.random.default_rng(0)
        native = make_conv(cin, cout, k, stride, "native")
        fast = make_conv(cin, cout, k, stride, "im2col")
        fast.weight.set_data(native.weight.data.copy())
        x = ms.Tensor(rng.standard_normal((3, cin, size, size)).astype(np.float32))
        np.testing.assert_allclose(fast(x).asnumpy(), native(x).asnumpy(), atol=1e-4)
        gx_n, (gw_n,) = _grads(native, x)
        gx_f, (gw_f,) = _grads(fast, x)
        np.testing.assert_allclose(gx_f.asnumpy(), gx_n.asnumpy(), atol=1e-3)
        np.testing.assert_allclose(gw_f.asnumpy(), gw_n.asnumpy(), rtol=1e-4, atol=1e-3)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_the_benchmarks_switch_makes_every_layer_multiply_per_image(monkeypatch):
    from helpers.core.im2col_shape import FOLD_ENV

    assert make_conv(8, 16, 3, 1, "im2col")._fold
    monkeypatch.setenv(FOLD_ENV, "0")
    assert not make_conv(8, 16, 3, 1, "im2col")._fold


def test_a_folded_layer_compiles_in_an_amp_o1_train_step_in_graph_mode():
    """AMP O1 rewrites the network's source and MindSpore parses what ``construct`` calls into the graph (chapter
    04's amp_O1 job failed on a ``folds_batch`` that read os.environ)."""
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        from helpers.train.models import build_model

        net = build_model("resnet18", 4, 0.125, "small", "im2col")   # at 32 px its layer4 folds (4x4 positions)
        assert folds_batch(64, 64 * 9, 4 * 4), "the case must take the folded path"
        opt = nn.Momentum(net.trainable_params(), 0.1, 0.9)
        step = ms.amp.build_train_network(net, opt, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                                          level="O1")
        x = ms.Tensor(np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32))
        loss = step(x, ms.Tensor(np.array([0, 1, 2], np.int32)))
        assert np.isfinite(loss.asnumpy()).all()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_an_amp_train_step_takes_the_im2col_weight_gradient_in_float32():
    """O2 casts the network to float16: the weight's gradient must come back float32 to meet its decay term."""
    from helpers.core.config import job_config
    from helpers.train.models import build_model
    from helpers.train.recipe import build_loss, build_optimizer, build_train_step

    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        cfg = job_config("ci").replace(amp_level="O2", conv_impl="im2col")
        net = build_model(cfg.arch, 10, cfg.width, cfg.stem, "im2col")
        step = build_train_step(cfg, net, build_loss(cfg), build_optimizer(cfg, net.trainable_params()))
        step.set_train()
        rng = np.random.default_rng(0)
        step(ms.Tensor(rng.random((4, 3, 32, 32), dtype=np.float32)), ms.Tensor(rng.integers(0, 10, 4).astype(np.int32)))
    finally:
        ms.set_context(mode=previous)


def test_each_model_gets_its_own_shared_matmul_cell():
    from helpers.train.models import build_model

    a, b = (build_model("resnet18", 10, 0.125, "small", "im2col") for _ in range(2))
    assert a.stem[0].times is a.layer1[0].conv1.times and a.stem[0].times is not b.stem[0].times
