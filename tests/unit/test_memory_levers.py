"""The memory levers (recomputation, AMP dtypes, optimizer sharding) against hand counts on ResNet-18 layouts, the
cells they describe, and the levers table built from them."""

from __future__ import annotations

import pytest

from helpers.core import memory_levers as levers
from helpers.core.errors import ConfigError
from helpers.core.memory_planner import estimate, layer_walk

# ResNet-18, width 0.25, small stem, 32 px, 10 classes: stages of 16/32/64/128 channels at 32/16/8/4 px
R18 = dict(arch="resnet18", image_size=32, num_classes=10, width=0.25, stem="small")
STAGE = {1: 16 * 32 * 32, 2: 32 * 16 * 16, 3: 64 * 8 * 8, 4: 128 * 4 * 4}     # one feature map per image
OUTSIDE = 3 * 32 * 32 + 2 * STAGE[1] + 128 + 10 + 10    # image, stem BN input + ReLU, pooled, logits, softmax


def rows(conv_impl="native", **kw):
    return layer_walk(**{**R18, **kw}, conv_impl=conv_impl)


def test_recompute_per_block_by_hand():
    outputs = 2 * sum(STAGE.values())                      # two blocks per stage keep their output
    # one block recomputed: its BN inputs, ReLU outputs and output (a native conv keeps nothing of its own); the
    # first block of stages 2-4 also has the downsample's BN
    first = {1: 4 * STAGE[1], 2: 5 * STAGE[2], 3: 5 * STAGE[3], 4: 5 * STAGE[4]}
    second = {s: 4 * STAGE[s] for s in STAGE}
    r = levers.recompute_elements_per_image(rows(), "block", "interleaved")
    assert r["kept"] == OUTSIDE + outputs
    assert r["recomputed_max"] == 4 * STAGE[1] and r["segments"] == 8
    assert r["peak"] == OUTSIDE + outputs + 4 * STAGE[1]
    assert r["recomputed_sum"] == sum(first.values()) + sum(second.values())
    plain = sum(x.saved_elements for x in rows())
    assert plain == OUTSIDE + r["recomputed_sum"]          # the plain step keeps every inside once
    eager = levers.recompute_elements_per_image(rows(), "block", "eager")
    assert eager["peak"] == plain + outputs                 # CPU's order: everything, and each output twice


def test_recompute_per_stage_and_off():
    r = levers.recompute_elements_per_image(rows(), "stage")
    assert r["kept"] == OUTSIDE + sum(STAGE.values()) and r["segments"] == 4
    assert r["recomputed_max"] == 8 * STAGE[1]               # layer1: two blocks of 4 maps each
    off = levers.recompute_elements_per_image(rows(), "none")
    assert off["peak"] == off["kept"] == sum(x.saved_elements for x in rows()) and off["segments"] == 0


def test_recompute_saves_most_where_the_columns_are():
    for impl in ("native", "im2col"):
        plain = sum(x.saved_elements for x in rows(impl))
        block = levers.recompute_elements_per_image(rows(impl), "block")["peak"]
        stage = levers.recompute_elements_per_image(rows(impl), "stage")["peak"]
        assert block < stage < plain
    assert (levers.recompute_elements_per_image(rows("im2col"), "block")["peak"] / sum(
        x.saved_elements for x in rows("im2col"))) < 0.35


def test_amp_o0_is_the_planners_fp32_count():
    for impl in ("native", "im2col"):
        plain = estimate(**R18, batch=1, conv_impl=impl).activation_bytes_per_image
        assert levers.amp_bytes_per_image(rows(impl), "O0") == plain


def test_amp_o2_by_hand_native():
    bn = STAGE[1] + 2 * 2 * STAGE[1] + sum(5 * STAGE[s] for s in (2, 3, 4))       # BatchNorm inputs, per image
    relu = STAGE[1] + sum(4 * STAGE[s] for s in STAGE)                           # ReLU outputs
    assert 3072 + bn + relu + 148 == sum(x.saved_elements for x in rows())
    # float16 image, ReLU outputs, pooled features and logits; float32 BatchNorm inputs and softmax; int32 labels
    assert levers.amp_bytes_per_image(rows(), "O2") == 3072 * 2 + bn * 4 + relu * 2 + 128 * 2 + 10 * 2 + 10 * 4 + 4


def test_amp_o2_halves_all_but_batchnorm_inputs_and_softmax():
    r = rows("im2col")
    half = sum(x.saved_elements for x in r if x.kind not in ("bn", "loss"))
    assert levers.amp_bytes_per_image(r, "O0") - levers.amp_bytes_per_image(r, "O2") == half * 2


def test_param_tensors_match_the_cells():
    from helpers.train.models import build_model

    net = build_model("resnet18", 10, 0.125, "small", "im2col")
    cells = sorted((int(p.size), p.shape[0]) for p in net.trainable_params())
    planned = sorted((n, d) for _, n, d in levers.param_tensors(rows(width=0.125)))
    assert planned == cells


def test_sharded_state_by_hand_on_the_ci_model():
    r = rows(width=0.125)
    total = sum(x.params for x in r)
    split = 64 * 32 * 9 + 3 * 64 * 64 * 9          # the four layer4 3x3 weights are >= 64 KB in fp32
    assert total == 176_402
    one = levers.sharded_state(r, 1)
    assert one["split_tensors"] == 0 and one["total"] == 3 * total * 4 == one["params"] * 3
    eight = levers.sharded_state(r, 8)
    assert (eight["split_tensors"], eight["split_params"]) == (4, split)
    part = (total - split) + split // 8
    assert eight["params"] == eight["optimizer"] == part * 4
    assert eight["gathered"] == split * 4 and eight["grads"] == total * 4          # level1 keeps whole gradients
    assert eight["total"] == 2 * part * 4 + split * 4 + total * 4
    two = levers.sharded_state(r, 2)
    assert two["total"] == one["total"]            # at 2 shards the gathered weights cancel what the split saves
    lv2 = levers.sharded_state(r, 8, "level2")
    assert lv2["grads"] == part * 4 and lv2["total"] < eight["total"]
    lv3 = levers.sharded_state(r, 8, "level3")
    assert lv3["gathered"] == 64 * 64 * 9 * 4      # only the largest gathered weight at a time
    assert levers.sharded_state(r, 3)["split_tensors"] == 0          # 64 output channels do not divide by 3
    assert levers.sharded_state(r, 8, threshold_kb=0)["split_tensors"] == 20 + 40     # every conv and BN tensor


def test_estimate_levers_applies_each_lever_to_its_part():
    kw = dict(num_classes=10, width=0.25, stem="small")
    base = estimate("resnet18", 16, 32, **kw)
    same = levers.estimate_levers("resnet18", 16, 32, **kw)
    assert same.summary() == base.summary()
    rec = levers.estimate_levers("resnet18", 16, 32, recompute="block", **kw)
    assert rec.activation_bytes == 16 * rec.activation_bytes_per_image < base.activation_bytes
    assert rec.model_state_bytes == base.model_state_bytes
    amp = levers.estimate_levers("resnet18", 16, 32, amp_level="O2", **kw)
    assert amp.precision == "mixed" and amp.activation_bytes_per_image == levers.amp_bytes_per_image(rows(), "O2")
    shard = levers.estimate_levers("resnet50", 1, 224, optimizer_shards=8)
    full = estimate("resnet50", 1, 224)
    assert shard.optimizer_bytes < full.optimizer_bytes / 7 and shard.grad_bytes == full.grad_bytes
    assert shard.param_bytes + shard.weight_copy_bytes > full.param_bytes        # the gathered weights


@pytest.mark.parametrize("call", [
    lambda: levers.recompute_elements_per_image(rows(), "layer"),
    lambda: levers.recompute_elements_per_image(rows(), "block", "lazy"),
    lambda: levers.amp_bytes_per_image(rows(), "O3"),
    lambda: levers.sharded_state(rows(), 0),
    lambda: levers.sharded_state(rows(), 2, "level4"),
    lambda: levers.estimate_levers("resnet18", 4, 32, recompute="block", amp_level="O2"),
])
def test_bad_lever_arguments_are_config_errors(call):
    with pytest.raises(ConfigError):
        call()
