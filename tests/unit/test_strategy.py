"""helpers.train.strategy_layout, strategy_file and helpers.topics.strategy: MindSpore strategy files for hybrid
layouts, their validation, slicing and checkpoints.

Everything runs in this one process on CPU: strategy files are read back with MindSpore's own reader and
per-rank checkpoints are merged/re-split with MindSpore's ``transform_checkpoints`` (no msrun needed).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.train import strategy_layout as SL
from helpers.train import strategy_file as SF
from helpers.topics import strategy as S
from helpers.core.errors import ConfigError, DataError

L81, L42, L24 = SL.Layout(8, 1), SL.Layout(4, 2), SL.Layout(2, 4)


@pytest.fixture(scope="module")
def net():
    from helpers.train.models import build_model

    return build_model("resnet18", num_classes=16, width=0.125, stem="small")


@pytest.fixture(scope="module")
def shapes(net):
    return SF.shapes_of(net)


@pytest.fixture(scope="module")
def full_params(shapes):
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


# ------------------------------------------------------------------------------------------- Layout


def test_layout_groups_follow_mindspore_rank_order():
    assert (L42.world, L42.name, L42.dev_matrix) == (8, "4x2", (4, 2))
    assert SL.Layout.parse("2x4") == L24
    assert L42.coords(5) == (2, 1)
    assert L42.mp_group(5) == (4, 5)
    assert L42.dp_group(5) == (1, 3, 5, 7)
    assert L24.mp_groups() == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert L24.dp_groups() == [(0, 4), (1, 5), (2, 6), (3, 7)]
    # the same coordinates MindSpore's own rank -> device-matrix mapping gives
    from mindspore.parallel._tensor import _rank_to_coordinate

    for r in range(8):
        assert tuple(int(c) for c in _rank_to_coordinate(r, [4, 2])) == L42.coords(r)


@pytest.mark.parametrize("bad", [(0, 2), (2, -1), (2.0, 1), (True, 2)])
def test_layout_rejects_bad_degrees(bad):
    with pytest.raises(ConfigError, match="Layout"):
        SL.Layout(*bad)


def test_layout_parse_rejects_garbage():
    with pytest.raises(ConfigError, match="4x2"):
        SL.Layout.parse("four by two")


# ---------------------------------------------------------------------------------- build_strategy


def test_build_strategy_splits_classifier_and_replicates_backbone(net, shapes):
    d = SF.strategy_to_dict(SF.build_strategy(net, L42))
    assert set(d) == set(shapes)                       # every parameter, BatchNorm statistics included
    assert d["fc.weight"]["dev_matrix"] == [4, 2]
    assert d["fc.weight"]["tensor_map"] == [0, -1]     # class rows on the mp axis (rightmost = 0)
    assert d["fc.bias"]["tensor_map"] == [0]
    assert d["layer4.1.conv2.weight"] == {
        "dev_matrix": [4, 2], "tensor_map": [-1, -1, -1, -1], "param_split_shape": [], "indices_offset": [],
        "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}


def test_build_strategy_records_classifier_operator_strategies(shapes):
    smap = SF.build_strategy(shapes, L24)
    ops = {i.node_name: [list(s.dim) for s in i.parallel_strategys.parallel_strategy]
           for i in smap.parallel_strategy_item}
    # keys as MindSpore's loader builds them: prim->name() + "_" + first parameter name (step_parallel.cc)
    assert ops == {"MatMul_fc.weight": [[2, 1], [4, 1]], "BiasAdd_fc.bias": [[2, 4], [4]]}


def test_operator_keys_follow_mindspores_rule_on_the_real_dense(net):
    """MindSpore's key (strategy_utils.cc ExtractStrategyAndInit, parallel_postprocessor.cc
    CheckpointStrategy): the primitive's name + "_" + the first Parameter among the op's inputs. nn.Dense calls
    self.matmul(x, self.weight) and self.bias_add(x, self.bias): the keys come from those, not scope paths."""
    fc = net.fc
    rule = {f"{fc.matmul.name}_{fc.weight.name}", f"{fc.bias_add.name}_{fc.bias.name}"}
    keys = {item.node_name for item in SF.build_strategy(net, L42).parallel_strategy_item}
    assert keys == rule == {"MatMul_fc.weight", "BiasAdd_fc.bias"}
    assert not any("/" in k for k in keys)


@pytest.mark.parametrize("suffix", [".ckpt", ".json"])
def test_mindspore_strategy_merge_reads_the_operator_entries(tmp_path, net, shapes, suffix):
    """mindspore.parallel.merge_pipeline_strategys is MindSpore's Python reader of parallel_strategy_item (it
    needs the items, takes the stage from the first, copies them by node_name): it accepts ours unchanged."""
    from mindspore.parallel import merge_pipeline_strategys
    from mindspore.train.node_strategy_pb2 import ParallelStrategyMap

    smap = SF.build_strategy(net, L24)
    SF.save_strategy(smap, tmp_path / "stages" / f"stage0{suffix}", shapes)
    dst = tmp_path / f"merged{suffix}"
    merge_pipeline_strategys(str(tmp_path / "stages"), str(dst))
    if suffix == ".json":
        items = json.loads(dst.read_text())["parallel_strategy_item"]
        got = {k: v["parallel_strategy"] for k, v in items.items()}
    else:
        merged = ParallelStrategyMap()
        merged.ParseFromString(dst.read_bytes())
        got = {i.node_name: [list(s.dim) for s in i.parallel_strategys.parallel_strategy]
               for i in merged.parallel_strategy_item}
    assert got == {"MatMul_fc.weight": [[2, 1], [4, 1]], "BiasAdd_fc.bias": [[2, 4], [4]]}


def test_build_strategy_can_split_the_last_stage_and_optimizer_state(shapes):
    with_state = dict(shapes, **{"moments.fc.weight": shapes["fc.weight"], "global_step": (1,)})
    d = SF.strategy_to_dict(SF.build_strategy(with_state, L42, split=("fc", "layer4")))
    assert d["layer4.1.conv2.weight"]["tensor_map"] == [0, -1, -1, -1]
    assert d["layer4.1.bn2.moving_mean"]["tensor_map"] == [0]
    assert d["moments.fc.weight"]["tensor_map"] == [0, -1]
    assert d["global_step"]["tensor_map"] == [-1]
    assert d["layer3.1.conv2.weight"]["tensor_map"] == [-1, -1, -1, -1]


def test_build_strategy_refuses_indivisible_classes_and_unknown_prefix():
    with pytest.raises(ConfigError, match=r"'fc.weight'.*dimension 0 of size 10.*split 4"):
        SF.build_strategy({"fc.weight": (10, 8), "fc.bias": (10,)}, L24)
    with pytest.raises(ConfigError, match="'head' matches no parameter"):
        SF.build_strategy({"fc.weight": (8, 8)}, L42, split=("head",))


# ------------------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("layout", [L81, L42, L24], ids=lambda lay: lay.name)
@pytest.mark.parametrize("suffix", [".ckpt", ".json"])
def test_round_trip_through_mindspore_reader(tmp_path, net, shapes, layout, suffix):
    from mindspore.train.node_strategy_pb2 import ParallelLayouts

    smap = SF.build_strategy(net, layout)
    path = SF.save_strategy(smap, tmp_path / f"strategy{suffix}", shapes)
    read = SF.read_strategy(path)                     # mindspore.parallel.build_searched_strategy
    assert all(isinstance(v, ParallelLayouts) for v in read.values())
    assert SF.strategy_to_dict(read) == SF.strategy_to_dict(smap)
    # the list form transform_checkpoints works from: [dev_matrix, tensor_map, param_split_shape, field, ...]
    from mindspore.parallel._parallel_serialization import _extract_layout_map

    assert _extract_layout_map(str(path))["fc.weight"][:2] == [[layout.dp, layout.mp], [0, -1]]


def test_json_has_the_fields_mindspore_writes(tmp_path, shapes):
    path = SF.save_strategy(SF.build_strategy(shapes, L42), tmp_path / "s.json", shapes)
    doc = json.loads(path.read_text())
    assert set(doc) == {"current_stage", "parallel_strategy_item", "parallel_layout_item"}
    assert doc["parallel_layout_item"]["fc.weight"] == {
        "dev_matrix": [4, 2], "tensor_map": [0, -1], "tensor_shape": [16, 64], "field": 0,
        "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}
    assert doc["parallel_strategy_item"]["MatMul_fc.weight"] == {"stage": 0, "parallel_strategy": [[4, 1], [2, 1]]}


def test_json_needs_shapes_and_read_dict_converts_to_protobuf(tmp_path, shapes):
    smap = SF.build_strategy(shapes, L42)
    with pytest.raises(ConfigError, match="tensor_shape"):
        SF.save_strategy(smap, tmp_path / "s.json")
    read = SF.read_strategy(SF.save_strategy(smap, tmp_path / "a.json", shapes))
    again = SF.read_strategy(SF.save_strategy(read, tmp_path / "b.ckpt"))
    assert SF.strategy_to_dict(again) == SF.strategy_to_dict(smap)


# ---------------------------------------------------------------------------- slicing conventions


@pytest.mark.parametrize("dev,tmap,shape", [
    ([4, 2], [0, -1], (16, 6)),
    ([2, 4], [0, -1], (16, 6)),
    ([2, 4], [1, 0], (4, 8)),
    ([2, 1, 4], [0, 1], (8, 6)),        # what MindSpore records for MatMul((2,1),(4,1)) with transpose_b
    ([8], [-1, -1, -1, -1], (4, 2, 3, 3)),
])
def test_shard_slice_matches_mindspore_load_tensor(dev, tmap, shape):
    from mindspore import Tensor
    from mindspore.parallel._tensor import _load_tensor

    full = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    world = int(np.prod(dev))
    shards = {}
    for r in range(world):
        ours = SL.shard_slice(full, (dev, tmap), r)
        np.testing.assert_array_equal(ours, _load_tensor(Tensor(full), dev, tmap, rank_id=r))
        shards[r] = ours
    np.testing.assert_array_equal(SL.merge_shards(shards, {"dev_matrix": dev, "tensor_map": tmap}), full)


def test_merge_shards_needs_every_block_and_can_check_replicas():
    full = np.arange(32, dtype=np.float32).reshape(8, 4)
    lay = ([4, 2], [0, -1])
    shards = {r: SL.shard_slice(full, lay, r) for r in range(8)}
    np.testing.assert_array_equal(SL.merge_shards({0: shards[0], 1: shards[1]}, lay), full)
    with pytest.raises(DataError, match=r"block \(1, 0\) is missing.*\[1, 3, 5, 7\]"):
        SL.merge_shards({0: shards[0], 2: shards[2]}, lay)
    shards[6] = shards[6] + 1e-3
    with pytest.raises(DataError, match="ranks 0 and 6"):
        SL.merge_shards(shards, lay, replica_atol=1e-6)


def test_shard_slice_refuses_indivisible_and_bad_rank():
    with pytest.raises(ConfigError, match="dimension 0 of size 10 is not divisible by its split 4"):
        SL.shard_slice(np.zeros((10, 3)), ([2, 4], [0, -1]), 0)
    with pytest.raises(ConfigError, match="outside device matrix"):
        SL.shard_slice(np.zeros((8, 3)), ([4, 2], [0, -1]), 8)


# -------------------------------------------------------------------------------------------- table


def test_strategy_table_rows(tmp_path, shapes):
    smap = SF.build_strategy(shapes, L42)
    pb_path = SF.save_strategy(smap, tmp_path / "s.ckpt")
    rows = {r["parameter"]: r for r in S.strategy_table(pb_path, 8, param_shapes=shapes)}
    fc = rows["fc.weight"]
    assert (fc["shape"], fc["dev_matrix"]) == ((16, 64), (4, 2))
    assert (fc["tensor_map"], fc["split"]) == ((0, -1), (2, 1))
    assert fc["shard_shape"] == (8, 64) and fc["shard_numel"] == 512
    assert fc["slices"] == {(0, 0): [0, 2, 4, 6], (1, 0): [1, 3, 5, 7]}
    conv = rows["layer4.1.conv2.weight"]
    assert conv["shard_shape"] == conv["shape"] and conv["slices"] == {(0, 0, 0, 0): list(range(8))}
    # protobuf files carry no shapes; JSON files do (tensor_shape)
    assert S.strategy_table(pb_path, 8)[0]["shape"] is None
    json_path = SF.save_strategy(smap, tmp_path / "s.json", shapes)
    assert {r["parameter"]: r["shard_shape"] for r in S.strategy_table(json_path, 8)}["fc.bias"] == (8,)
    with pytest.raises(ConfigError, match="world size is 4"):
        S.strategy_table(pb_path, 4)


# --------------------------------------------------------------------------------------- validation


@pytest.fixture()
def good_file(tmp_path, shapes):
    return SF.save_strategy(SF.build_strategy(shapes, L42), tmp_path / "good.ckpt")


def test_validate_accepts_a_matching_file(good_file, net):
    assert "fc.weight" in SF.validate_strategy(good_file, net, 8)


@pytest.mark.parametrize("name,content", [
    ("missing.ckpt", None),
    ("empty.ckpt", b""),
    ("corrupt.ckpt", b"\x00\x01 this is not a protobuf"),
    ("corrupt.json", b'{"parallel_layout_item": {"fc.weight": '),
    ("fields.json", b'{"parallel_layout_item": {"fc.weight": {"dev_matrix": [8]}}}'),
    ("nolayouts.json", b'{"current_stage": 0}'),
])
def test_validate_names_an_unreadable_file(tmp_path, shapes, name, content):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match=name):
        SF.validate_strategy(path, shapes, 8)


def test_validate_unknown_parameter(tmp_path, shapes):
    wrong = {("fc.weigth" if n == "fc.weight" else n): s for n, s in shapes.items()}
    path = SF.save_strategy(SF.build_strategy(wrong, L42), tmp_path / "s.ckpt")
    with pytest.raises(ConfigError, match=r"unknown parameter 'fc.weigth'.*did you mean 'fc.weight'"):
        SF.validate_strategy(path, shapes, 8)


def test_validate_shape_not_divisible(tmp_path, shapes):
    path = SF.save_strategy(SF.build_strategy(shapes, L24), tmp_path / "s.json", shapes)   # 16 classes / 4
    ten_classes = dict(shapes, **{"fc.weight": (10, 64), "fc.bias": (10,)})
    with pytest.raises(ConfigError) as info:
        SF.validate_strategy(path, ten_classes, 8)
    assert "'fc.weight': dimension 0 of size 10 is not divisible by its split 4" in str(info.value)
    assert len(info.value.problems) == 2                                 # weight and bias


def test_validate_world_size_mismatch(good_file, shapes):
    with pytest.raises(ConfigError, match=r"device matrix \[4, 2\] has product 8, but the world size is 4"):
        SF.validate_strategy(good_file, shapes, 4)


def test_validate_rank_mismatch_and_missing_parameters(tmp_path, shapes):
    flat = dict(shapes, **{"fc.weight": (16 * 64,)})
    path = SF.save_strategy(SF.build_strategy(flat, L42), tmp_path / "s.ckpt")
    with pytest.raises(ConfigError, match=r"'fc.weight': tensor_map \[0\] has 1 entries"):
        SF.validate_strategy(path, shapes, 8)
    partial = SF.save_strategy(SF.build_strategy({"fc.weight": (16, 64)}, L42), tmp_path / "p.ckpt")
    SF.validate_strategy(partial, shapes, 8)                               # like only_trainable_params files
    with pytest.raises(ConfigError, match="not in the file"):
        SF.validate_strategy(partial, shapes, 8, require_all=True)


# ------------------------------------------------------------------------------- GPU/Ascend context


def test_semi_auto_context_is_accepted_by_mindspore(tmp_path):
    import mindspore as ms

    kwargs = SF.semi_auto_context(L42, tmp_path / "strategy.ckpt", mode="save")
    assert kwargs == {"parallel_mode": "semi_auto_parallel", "device_num": 8, "gradients_mean": True,
                      "dataset_strategy": "data_parallel",
                      "strategy_ckpt_config": {"save_file": str(tmp_path / "strategy.ckpt"),
                                               "only_trainable_params": False}}
    load = SF.semi_auto_context(L24, "s.json", mode="load")["strategy_ckpt_config"]
    assert load["load_file"].endswith("s.json") and "save_file" not in load
    try:                                   # setting is accepted on CPU; only compiling under it is refused
        ms.set_auto_parallel_context(**kwargs)
        assert ms.get_auto_parallel_context("parallel_mode") == "semi_auto_parallel"
        assert ms.get_auto_parallel_context("device_num") == 8
        saved = ms.get_auto_parallel_context("strategy_ckpt_config")
        assert saved["save_file"] == str(tmp_path / "strategy.ckpt")
    finally:
        ms.reset_auto_parallel_context()
    with pytest.raises(ConfigError, match="mode"):
        SF.semi_auto_context(L42, "s.ckpt", mode="write")


def test_classifier_shard_strategies():
    from mindspore import nn

    assert SF.classifier_shard_strategy(L42) == ((4, 1), (2, 1))
    assert SF.classifier_bias_strategy(L24) == ((2, 4), (4,))
    dense = SF.shard_classifier(nn.Dense(8, 4), L42)
    assert dense.matmul.in_strategy == ((4, 1), (2, 1))
    assert dense.bias_add.in_strategy == ((4, 2), (2,))


# ---------------------------------------------------------------------- merge and re-split checkpoints


def test_merge_then_resplit_round_trip(tmp_path, shapes, full_params):
    s42 = SF.save_strategy(SF.build_strategy(shapes, L42), tmp_path / "s42.ckpt")
    s81 = SF.save_strategy(SF.build_strategy(shapes, L81), tmp_path / "s81.ckpt")
    s24 = SF.save_strategy(SF.build_strategy(shapes, L24), tmp_path / "s24.json", shapes)
    src = S.write_rank_checkpoints(full_params, s42, tmp_path / "run42")
    assert S.checkpoint_arrays(src[3])["fc.weight"].shape == (8, 64)          # hand-sharded like a 4x2 run

    merged = S.merge_rank_checkpoints(tmp_path / "run42", s42, tmp_path / "merged")
    got = S.checkpoint_arrays(merged)
    assert set(got) == set(full_params)
    assert max(float(np.abs(got[n] - full_params[n]).max()) for n in full_params) == 0.0

    for strategy_file, layout in ((s81, L81), (s24, L24)):
        outs = S.resplit_checkpoint(merged, strategy_file, tmp_path / f"resume{layout.name}", layout.world)
        read = SF.read_strategy(strategy_file)
        for r, path in enumerate(outs):
            shard = S.checkpoint_arrays(path)
            for n, full in full_params.items():
                np.testing.assert_array_equal(shard[n], SL.shard_slice(full, read[n], r), err_msg=f"{n} r{r}")
    assert S.checkpoint_arrays(outs[5])["fc.weight"].shape == (4, 64)         # 2x4: a quarter of 16 classes


def test_merge_and_resplit_errors(tmp_path, shapes, full_params):
    s42 = SF.save_strategy(SF.build_strategy(shapes, L42), tmp_path / "s42.ckpt")
    S.write_rank_checkpoints(full_params, s42, tmp_path / "run")
    (tmp_path / "run" / "rank_6" / "rank6.ckpt").unlink()
    with pytest.raises(DataError, match=r"no checkpoint for ranks \[6\]"):
        S.merge_rank_checkpoints(tmp_path / "run", s42, tmp_path / "out")
    with pytest.raises(ConfigError, match="over 8 ranks, not 4"):
        S.resplit_checkpoint(tmp_path / "run" / "rank_0" / "rank0.ckpt", s42, tmp_path / "out4", 4)
    with pytest.raises(DataError, match="does not exist"):
        S.resplit_checkpoint(tmp_path / "nope.ckpt", s42, tmp_path / "out8", 8)


def test_merge_refuses_sharded_parameter_missing_from_strategy(tmp_path, shapes, full_params):
    params = dict(full_params, **{"moments.fc.weight": full_params["fc.weight"] * 0.5})
    with_state = SF.save_strategy(SF.build_strategy(dict(shapes, **{"moments.fc.weight": (16, 64)}), L42),
                                 tmp_path / "with_state.ckpt")
    S.write_rank_checkpoints(params, with_state, tmp_path / "run")
    net_only = SF.save_strategy(SF.build_strategy(shapes, L42), tmp_path / "net_only.ckpt")
    with pytest.raises(DataError, match="'moments.fc.weight' is not in .*'fc.weight' is split"):
        S.merge_rank_checkpoints(tmp_path / "run", net_only, tmp_path / "bad")
    merged = S.checkpoint_arrays(S.merge_rank_checkpoints(tmp_path / "run", with_state, tmp_path / "good"))
    np.testing.assert_array_equal(merged["moments.fc.weight"], params["moments.fc.weight"])
