import numpy as np
import pytest

import mindspore as ms
from mindspore import nn, ops

from helpers.train.im2col_conv import Im2ColConv2d, make_conv
from helpers.train.models import build_model, count_parameters


@pytest.mark.parametrize("arch, expected", [("resnet50", 25_557_032), ("resnet152", 60_192_808)])
def test_parameter_counts_match_the_reference(arch, expected):
    assert count_parameters(build_model(arch, 1000)) == expected


def test_conv_impl_changes_no_parameter():
    a = build_model("resnet18", 10, 0.25, "small", "native")
    b = build_model("resnet18", 10, 0.25, "small", "im2col")
    shapes = lambda net: [(n, tuple(p.shape)) for n, p in net.parameters_and_names()]  # noqa: E731
    assert shapes(a) == shapes(b)
    assert any(isinstance(c, Im2ColConv2d) for _, c in b.cells_and_names())
    assert not any(isinstance(c, nn.Conv2d) for _, c in b.cells_and_names()), "1x1 shortcuts are im2col too"


@pytest.mark.parametrize("k, stride, cin, cout", [(3, 1, 4, 6), (3, 2, 5, 8), (7, 2, 3, 4), (1, 1, 6, 5), (1, 2, 5, 7)])
def test_im2col_matches_native_outputs_and_gradients(k, stride, cin, cout):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    rng = np.random.default_rng(0)
    native = make_conv(cin, cout, k, stride, "native")
    fast = make_conv(cin, cout, k, stride, "im2col")
    fast.weight.set_data(native.weight.data.copy())
    x = ms.Tensor(rng.standard_normal((2, cin, 12, 12)).astype(np.float32))
    np.testing.assert_allclose(fast(x).asnumpy(), native(x).asnumpy(), atol=1e-4)
    grad = lambda net: ops.grad(lambda xx: (net(xx) ** 2).sum(), grad_position=0, weights=net.trainable_params())  # noqa: E731
    gx_n, (gw_n,) = grad(native)(x)
    gx_f, (gw_f,) = grad(fast)(x)
    np.testing.assert_allclose(gx_f.asnumpy(), gx_n.asnumpy(), atol=1e-3)
    np.testing.assert_allclose(gw_f.asnumpy(), gw_n.asnumpy(), rtol=1e-4, atol=1e-3)


def test_small_stem_keeps_32px_resolution_and_outputs_logits():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = build_model("resnet18", 10, 0.125, "small", "im2col")
    out = net(ms.Tensor(np.zeros((2, 3, 32, 32), np.float32)))
    assert out.shape == (2, 10)


def test_unknown_arch_and_conv_impl_are_rejected():
    with pytest.raises(ValueError, match="arch"):
        build_model("resnet77")
    with pytest.raises(ValueError, match="conv_impl"):
        make_conv(3, 4, 3, impl="winograd")
    assert isinstance(make_conv(3, 4, 1, impl="im2col"), Im2ColConv2d)


@pytest.mark.parametrize("level, marked", [("none", 0), ("block", 8), ("stage", 4)])
def test_set_recompute_marks_each_block_or_each_stage(level, marked):
    from helpers.train.models import set_recompute

    net = set_recompute(build_model("resnet18", 10, 0.125, "small"), level)
    stages = [net.layer1, net.layer2, net.layer3, net.layer4]
    cells = stages + [b for s in stages for b in s.cells()]
    on = [c for c in cells if getattr(c, "_recompute_cell", None) is not None]     # what Cell.recompute() sets
    assert len(on) == marked and all((c in stages) == (level == "stage") for c in on)
    with pytest.raises(ValueError, match="recompute"):
        set_recompute(net, "layer")


def test_no_helpers_module_shadows_a_mindspore_layer_module():
    """AMP O1 (mindspore.rewrite) imports a cell's module by its basename with the module's folder on sys.path:
    a helpers module named like one of mindspore/nn/layer/*.py (conv, normalization, ...) breaks it."""
    from pathlib import Path

    import mindspore.nn.layer as layer

    import helpers

    ours = {p.stem for p in Path(helpers.__file__).parent.rglob("*.py")}
    theirs = {p.stem for p in Path(layer.__file__).parent.glob("*.py")} - {"__init__"}
    assert not ours & theirs
