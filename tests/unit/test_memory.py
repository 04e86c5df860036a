"""The memory planner against the real MindSpore cells, against hand arithmetic, and against itself.

The planner walks the ResNet layout on paper; these tests build the cells it describes (no training, no
graph compile) to check parameter counts and feature-map shapes, and work one layer out by hand.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.core import memory_planner as memory
from helpers.topics import memory_scenarios as scenarios
from helpers.core.errors import ConfigError
from helpers.core.memory_planner import GIB, estimate, layer_walk, plan_accumulation

import mindspore as ms

from helpers.train import models


def test_layout_tables_match_the_models():
    assert memory.ARCHS == models.ARCHS
    assert memory.EXPANSION == models.EXPANSION
    assert memory.stage_widths is models.stage_widths      # one scaling rule for the planner and the cells


def test_planner_imports_no_mindspore():
    code = "import sys, helpers.core.memory_planner; sys.exit('mindspore' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("arch", sorted(memory.ARCHS))
def test_parameter_counts_match_the_cells(arch):
    net = models.build_model(arch, 1000)
    est = estimate(arch, 1, 224)
    assert est.param_count == models.count_parameters(net)
    buffers = models.count_parameters(net, trainable_only=False) - models.count_parameters(net)
    assert est.param_bytes == est.param_count * 4 + buffers * 4      # BatchNorm running statistics
    assert layer_walk(arch)[-3].out_shape == (net.feature_dim,)      # pooled features feed the classifier


def test_published_parameter_counts():
    assert memory.param_count("resnet50") == 25_557_032
    assert memory.param_count("resnet152") == 60_192_808


@pytest.mark.parametrize("arch,width,stem,classes,impl", [
    ("resnet18", 0.25, "small", 10, "native"),
    ("resnet18", 0.125, "small", 10, "im2col"),
    ("resnet50", 0.125, "imagenet", 100, "im2col"),
    ("resnet34", 0.3, "small", 7, "native"),          # rounding of odd widths, as in helpers.train.models
])
def test_small_models_match_the_cells(arch, width, stem, classes, impl):
    net = models.build_model(arch, classes, width, stem, impl)
    est = estimate(arch, 1, 32, num_classes=classes, width=width, stem=stem, conv_impl=impl)
    assert est.param_count == models.count_parameters(net)


@pytest.mark.parametrize("arch,width,stem,size", [("resnet18", 0.125, "small", 32),
                                                  ("resnet50", 0.0625, "imagenet", 40)])
def test_stage_output_shapes_match_a_forward_pass(arch, width, stem, size):
    import numpy as np

    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        net = models.build_model(arch, 10, width, stem, "im2col")
        x = ms.Tensor(np.zeros((1, 3, size, size), np.float32))
        shapes = {}
        for name in ("stem", "layer1", "layer2", "layer3", "layer4"):
            x = getattr(net, name)(x)
            shapes[name] = tuple(x.shape[1:])
    finally:
        ms.set_context(mode=mode)
    rows = scenarios.layer_table(arch, 1, size, by="stage", num_classes=10, width=width, stem=stem)
    planned = {r["name"]: r["out_shape"] for r in rows}
    for name, shape in shapes.items():
        assert planned[name] == shape, name


def test_one_conv_bn_relu_layer_by_hand():
    # Small stem of ResNet-18 at width 0.25: 3x3 conv 3 -> 16 channels, stride 1, 32x32 px.
    rows = {r.name: r for r in layer_walk("resnet18", 32, 10, 0.25, "small", "native")}
    assert rows["input"].saved_elements == 3 * 32 * 32               # the image: the conv's input
    assert rows["stem.conv"].saved_elements == 0                     # its input is the image, kept above
    assert rows["stem.conv"].params == 16 * 3 * 3 * 3
    assert rows["stem.bn"].saved_elements == 16 * 32 * 32            # BN input = conv output
    assert rows["stem.bn"].params == 2 * 16 and rows["stem.bn"].buffers == 2 * 16
    assert rows["stem.relu"].saved_elements == 16 * 32 * 32          # ReLU output
    # for a batch of 8 in fp32: (3*32*32 + 2 * 16*32*32) * 4 bytes * 8 images = 1,146,880 bytes
    stem = scenarios.layer_table("resnet18", 8, 32, by="block", num_classes=10, width=0.25, stem="small")[0]
    assert stem["name"] == "stem"
    assert stem["saved_mib"] * 2 ** 20 == (3 * 32 * 32 + 2 * 16 * 32 * 32) * 4 * 8 == 1_146_880

    # im2col: the conv keeps its columns (3*3*3 rows x 32*32 positions) and a per-image weight copy; a strided
    # 1x1 keeps its strided input (16 rows x 16*16 positions); a 1x1 stride-1 conv keeps only the weight copy.
    rows = {r.name: r for r in layer_walk("resnet18", 32, 10, 0.25, "small", "im2col")}
    assert rows["stem.conv"].saved_elements == 27 * 32 * 32 + 16 * 27
    assert rows["layer1.0.conv1"].saved_elements == 16 * 9 * 32 * 32 + 16 * 16 * 9
    assert rows["layer2.0.down.conv"].saved_elements == 16 * 16 * 16 + 32 * 16
    assert rows["layer2.0.down.conv"].workspace_elements == 32 * 16 * 16 + 16 * 32 * 32 + 16 * 16 * 16
    r50 = {r.name: r for r in layer_walk("resnet50", 64, 10, 0.25, "imagenet", "im2col")}
    assert r50["layer1.0.conv1"].saved_elements == 16 * 16


def test_strided_bottleneck_by_hand():
    # First block of ResNet-50's layer2 at 224 px: input 256x56x56, width 128, stride 2 on the 3x3.
    rows = {r.name: r for r in layer_walk("resnet50") if r.block == "layer2.0"}
    assert rows["layer2.0.conv1"].out_shape == (128, 56, 56)
    assert rows["layer2.0.conv2"].out_shape == (128, 28, 28)
    assert rows["layer2.0.conv3"].out_shape == (512, 28, 28)
    assert rows["layer2.0.down.conv"].out_shape == (512, 28, 28)
    kept = sum(r.saved_elements for r in rows.values())
    # BN inputs 128*56*56 + 128*28*28 + 512*28*28 + 512*28*28 (downsample); ReLU outputs 128*56*56 +
    # 128*28*28 + 512*28*28 (block output); the add keeps nothing.
    assert kept == 2 * 128 * 56 * 56 + 2 * 128 * 28 * 28 + 3 * 512 * 28 * 28


def test_activations_scale_with_batch_and_image_size():
    totals = [estimate("resnet50", b, 224).total_bytes for b in (1, 2, 4, 8, 64)]
    assert totals == sorted(totals) and len(set(totals)) == len(totals)
    one, many = estimate("resnet50", 1, 224), estimate("resnet50", 64, 224)
    assert many.activation_bytes == 64 * one.activation_bytes_per_image
    assert many.model_state_bytes == one.model_state_bytes
    per_image = [estimate("resnet50", 1, s).activation_bytes_per_image for s in (32, 64, 128, 224, 320)]
    assert per_image == sorted(per_image) and len(set(per_image)) == len(per_image)


def test_precision_and_optimizer():
    fp32 = estimate("resnet152", 64, 224)
    fp16 = estimate("resnet152", 64, 224, precision="fp16")
    mixed = estimate("resnet152", 64, 224, precision="mixed")
    assert fp16.activation_bytes < fp32.activation_bytes
    assert mixed.activation_bytes == fp16.activation_bytes < fp32.activation_bytes
    assert mixed.weight_copy_bytes == fp32.param_count * 2                  # fp16 working copy
    assert mixed.grad_bytes == fp32.grad_bytes and mixed.optimizer_bytes == fp32.optimizer_bytes
    assert fp16.total_bytes < mixed.total_bytes < fp32.total_bytes
    adam = estimate("resnet152", 64, 224, optimizer="adam")
    sgd = estimate("resnet152", 64, 224, optimizer="sgd")
    assert adam.optimizer_bytes == 2 * fp32.optimizer_bytes == 2 * fp32.param_count * 4
    assert sgd.optimizer_bytes == 0


def test_im2col_costs_more_than_native():
    kw = dict(num_classes=10, width=0.25, stem="small")
    native = estimate("resnet18", 16, 32, **kw)
    im2col = estimate("resnet18", 16, 32, conv_impl="im2col", **kw)
    assert im2col.param_count == native.param_count
    assert im2col.activation_bytes > 3 * native.activation_bytes


def test_accumulation_buffer_only_when_accumulating():
    assert estimate("resnet50", 32, 224).accumulation_bytes == 0
    est = estimate("resnet50", 32, 224, accumulation_steps=4)
    assert est.accumulation_bytes == est.grad_bytes


def test_plan_accumulation_picks_largest_fitting_divisor():
    full = estimate("resnet50", 128, 224)
    half = estimate("resnet50", 64, 224, accumulation_steps=2)
    assert half.total_bytes < full.total_bytes
    between = (half.total_bytes + full.total_bytes) / 2 / GIB
    assert plan_accumulation("resnet50", 1024, 8, capacity_gb=between) == (64, 2)
    assert plan_accumulation("resnet50", 1024, 8, capacity_gb=1000) == (128, 1)
    # per-card 96: the largest divisor of 96 that fits, not merely the largest batch that fits
    cap = estimate("resnet50", 40, 224, accumulation_steps=3).total_bytes / GIB
    micro, steps = plan_accumulation("resnet50", 96 * 8, 8, capacity_gb=cap)
    assert (micro, steps) == (32, 3)
    assert estimate("resnet50", 48, 224, accumulation_steps=2).total_bytes > cap * GIB


def test_plan_accumulation_errors():
    with pytest.raises(ConfigError, match="global_batch"):
        plan_accumulation("resnet50", 1000, 16, capacity_gb=40)
    with pytest.raises(ConfigError, match="world_size"):
        plan_accumulation("resnet50", 64, 0, capacity_gb=40)
    with pytest.raises(ConfigError, match="micro-batch 1"):
        plan_accumulation("resnet152", 512, 8, capacity_gb=0.5)


def test_fits_and_max_batch_agree():
    cap = 16
    best = memory.max_batch("resnet50", 224, capacity_gb=cap)
    assert memory.fits("resnet50", best, 224, capacity_gb=cap)
    assert not memory.fits("resnet50", best + 1, 224, capacity_gb=cap)


def test_bad_arguments_name_the_field():
    for kwargs, field in [(dict(arch="resnet9"), "arch"), (dict(stem="tiny"), "stem"),
                          (dict(precision="bf8"), "precision"), (dict(conv_impl="fft"), "conv_impl"),
                          (dict(optimizer="lion"), "optimizer"), (dict(batch=0), "batch"),
                          (dict(width=0), "width"), (dict(image_size=4), "image_size")]:
        args = dict(arch="resnet50", batch=8) | kwargs
        with pytest.raises(ConfigError, match=field):
            estimate(**args)


def test_classifier_param_bytes():
    fc = next(r for r in layer_walk("resnet50") if r.kind == "fc")
    assert memory.classifier_param_bytes(2048, 1000) == fc.params * 4 == 2049 * 1000 * 4
    assert memory.classifier_param_bytes(2048, 1000, model_parallel=8) == 125 * 2049 * 4
    assert memory.classifier_param_bytes(2048, 1000, model_parallel=3) == 334 * 2049 * 4   # ceil split
    assert memory.classifier_param_bytes(512, 10, bytes_per_param=2) == 513 * 10 * 2
    with pytest.raises(ConfigError, match="model_parallel"):
        memory.classifier_param_bytes(2048, 1000, model_parallel=0)


def test_agrees_with_published_figures():
    rows = scenarios.compare_published("all")
    for r in rows:
        if r["kind"] == "batch_fits":        # NVIDIA's recipe batch runs on that card: the planner agrees
            assert r["planner"] <= r["published"], r
        if r["kind"] == "features":          # same convention as convnet-burden: within 10%
            assert abs(r["planner"] / r["published"] - 1) < 0.10, r
        if r["kind"] == "slope":             # MXNet keeps more than the minimum; same order of magnitude
            assert 0.5 < r["planner"] / r["published"] < 1.0, r
    assert {r["kind"] for r in rows} == {"batch_fits", "features", "slope"}


def test_summary_is_plain_numbers():
    import json

    s = estimate("resnet152", 64, 224).summary()
    assert json.loads(json.dumps(s)) == s
    assert s["total_gib"] == pytest.approx(s["total_mib"] / 1024)


def test_onednn_ncsp_copies_by_hand():
    """The composite NCHW convolution books an NHWC copy of input and output of every conv except 1x1 stride 1."""
    rows = {r.name: r for r in layer_walk("resnet18", 32, 10, 0.25, "small")}
    assert (rows["stem.conv"].kernel, rows["stem.conv"].stride, rows["stem.conv"].in_elements) == (3, 1, 3 * 32 * 32)
    assert (rows["layer2.0.down.conv"].kernel, rows["layer2.0.down.conv"].stride) == (1, 2)   # strided 1x1: copies
    convs = [r for r in rows.values() if r.kind == "conv"]
    per_pass = sum(r.in_elements + r.out_shape[0] * r.out_shape[1] * r.out_shape[2] for r in convs)
    one = scenarios.onednn_ncsp_copy_bytes_per_image("resnet18", 32, 10, 0.25, "small")
    assert one == per_pass * 4
    # the stem alone: 3x32x32 in, 16x32x32 out
    assert rows["stem.conv"].in_elements + 16 * 32 * 32 == 19 * 1024
    assert scenarios.onednn_ncsp_copy_bytes_per_image("resnet18", 32, 10, 0.25, "small", composite_passes=2) == 2 * one
    assert scenarios.onednn_ncsp_copy_bytes_per_image("resnet18", 32, 10, 0.25, "small", composite_passes=0) == 0
    # ResNet-50: its 1x1 stride-1 convolutions run as a matmul without copies
    r50 = layer_walk("resnet50", 64)
    gemm = [r for r in r50 if r.kind == "conv" and r.kernel == 1 and r.stride == 1]
    assert gemm and scenarios.onednn_ncsp_copy_bytes_per_image("resnet50", 64) == 4 * sum(
        r.in_elements + r.out_shape[0] * r.out_shape[1] * r.out_shape[2]
        for r in r50 if r.kind == "conv" and r not in gemm)


def test_keep_scenarios_settle_the_35_gb_claim():
    rows = {s["account"]: s for s in scenarios.keep_scenarios("resnet152", 224, 64, target_gib=35.0)}
    plan = rows["planner (what backward must keep)"]
    assert plan["gib_at_batch"] == pytest.approx(estimate("resnet152", 64, 224).total_gib)
    assert 11 < plan["gib_at_batch"] < 12 and plan["gib_at_batch"] < 35
    # the first batch over 35 GiB is over it, the one before is not
    over = plan["batch_over_target"]
    assert estimate("resnet152", over, 224).total_gib > 35 >= estimate("resnet152", over - 1, 224).total_gib
    bn = rows["planner + every BatchNorm output kept"]
    mx = rows["MXNet measured (TITAN X), extrapolated"]
    assert bn["mib_per_image"] > plan["mib_per_image"]
    assert bn["gib_at_batch"] == pytest.approx(mx["gib_at_batch"], rel=0.05), "BN outputs kept: MXNet's measured slope"
    assert rows["planner + no reuse of backward workspaces"]["gib_at_batch"] > 35
    assert all(r["gib_at_double_batch"] > r["gib_at_batch"] for r in rows.values())
    assert scenarios.keep_scenarios(target_gib=28.0)[0]["batch_over_target"] < over
