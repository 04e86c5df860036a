"""The strategy-file format the course writes and reads (``helpers.train.strategy_file``), pinned to the installed
wheel: the protobuf fields in ``mindspore/train/node_strategy_pb2.py``'s descriptor, the JSON keys in MindSpore's
readers (``parallel/_parallel_serialization.py`` for the layouts, ``StrategyCheckpointInfo``'s JSON in
``lib/libmindspore_frontend.so`` for the rest)."""

import json

import pytest

from helpers.train import strategy_file as SF
from helpers.train.strategy_layout import Layout
from tests.contract.wheel import altered, assert_pinned

# message -> {field: the message type it holds, or None for a scalar}: what the course builds and reads
COURSE_FORMAT = {
    "ParallelStrategyMap": {"current_stage": None, "parallel_strategy_item": "ParallelStrategyItem",
                            "parallel_layout_item": "ParallelLayoutItem"},
    "ParallelLayoutItem": {"param_name": None, "parallel_layouts": "ParallelLayouts"},
    "ParallelLayouts": {"dev_matrix": "DevMatrix", "tensor_map": "TensorMap", "param_split_shape": "ParamSplitShape",
                        "indices_offset": "IndicesOffset", "field": None, "opt_weight_shard_step": None,
                        "opt_weight_shard_size": None},
    "ParallelStrategyItem": {"node_name": None, "parallel_strategys": "ParallelStrategys"},
    "ParallelStrategys": {"stage": None, "parallel_strategy": "ParallelStrategy"},
    **{name: {"dim": None} for name in ("DevMatrix", "TensorMap", "ParamSplitShape", "IndicesOffset",
                                        "ParallelStrategy")},
}
FIELDS = [(msg, name, held) for msg, fields in COURSE_FORMAT.items() for name, held in fields.items()]
# the JSON keys MindSpore's Python reader looks up (as quoted strings in its source); the rest only its C++ reads
PY_READER, CPP_READER = "parallel/_parallel_serialization.py", "lib/libmindspore_frontend.so"
PY_READ_KEYS = {"parallel_layout_item", "dev_matrix", "tensor_map", "param_split_shape", "indices_offset", "field",
                "opt_weight_shard_step", "opt_weight_shard_size"}


def wheel_field(message: str, name: str):
    """The wheel's descriptor of field ``name`` of ``message`` (None when the wheel has no such field)."""
    from mindspore.train import node_strategy_pb2

    desc = node_strategy_pb2.DESCRIPTOR.message_types_by_name.get(message)
    return desc.fields_by_name.get(name) if desc is not None else None


@pytest.mark.parametrize("message, name, held", FIELDS, ids=[f"{m}.{n}" for m, n, _ in FIELDS])
def test_each_field_the_course_uses_is_in_the_wheels_descriptor(message, name, held):
    field = wheel_field(message, name)
    assert field is not None, f"node_strategy_pb2.{message} has no field {name!r}: the strategy format changed"
    assert (field.message_type.name if field.message_type else None) == held
    assert wheel_field(message, altered(name)) is None, "the check must refuse an altered name"
    assert wheel_field(altered(message), name) is None


def course_files(tmp_path):
    """A strategy the course builds (``build_strategy``, a split classifier with a bias) and its JSON form."""
    shapes = {"stem.0.weight": (16, 3, 3, 3), "fc.weight": (12, 64), "fc.bias": (12,)}
    smap = SF.build_strategy(shapes, Layout(4, 2))
    doc = json.loads(SF.save_strategy(smap, tmp_path / "s.json", param_shapes=shapes).read_text())
    return smap, doc


def used_fields(message) -> set[tuple[str, str]]:
    """Every (message, field) set in a built protobuf message, recursively."""
    out = set()
    for field, value in message.ListFields():
        out.add((message.DESCRIPTOR.name, field.name))
        if field.message_type is not None:
            for sub in (value if hasattr(value, "__len__") and not hasattr(value, "ListFields") else [value]):
                out |= used_fields(sub)
    return out


def test_what_the_course_builds_uses_only_these_fields(tmp_path):
    smap, _ = course_files(tmp_path)
    used = used_fields(smap)
    assert used <= {(m, n) for m, n, _ in FIELDS}
    assert ("ParallelLayoutItem", "param_name") in used and ("ParallelStrategys", "parallel_strategy") in used


def test_the_json_the_course_writes_has_the_keys_mindspore_reads(tmp_path):
    _, doc = course_files(tmp_path)
    layout_keys = {k for item in doc["parallel_layout_item"].values() for k in item}
    op_keys = {k for item in doc["parallel_strategy_item"].values() for k in item}
    keys = set(doc) | layout_keys | op_keys
    assert keys == {"current_stage", "parallel_strategy_item", "parallel_layout_item", "dev_matrix", "tensor_map",
                    "tensor_shape", "field", "opt_weight_shard_step", "opt_weight_shard_size", "stage",
                    "parallel_strategy"}
    for key in sorted(keys):
        if key in PY_READ_KEYS:
            assert_pinned(f'"{key}"', PY_READER)
        assert_pinned(key, CPP_READER)
