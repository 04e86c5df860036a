"""Strategy files in MindSpore's own format: build, save, read and validate them before launch.

One file drives both hybrid paths: ``SEMI_AUTO_PARALLEL`` loads it on GPU/Ascend (``semi_auto_context``,
``shard_classifier``), and the CPU path cuts the classifier by it. The format is ``ParallelStrategyMap`` of
``mindspore/train/node_strategy_pb2.py``; MindSpore's ``build_searched_strategy`` reads it back. A ``.json`` path is
JSON, anything else protobuf (``_build_searched_strategy`` tests ``[-5:] == ".json"``). MindSpore is imported inside
the functions that need it.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from helpers.core.errors import ConfigError, DataError
from helpers.train.strategy_layout import Layout, layout_to_dict, tensor_split


def shapes_of(net_or_shapes) -> dict[str, tuple[int, ...]]:
    """``{parameter name: shape}`` of a Cell (every parameter, BatchNorm statistics included) or a mapping."""
    if hasattr(net_or_shapes, "parameters_and_names"):
        return {name: tuple(int(d) for d in p.shape) for name, p in net_or_shapes.parameters_and_names()}
    if isinstance(net_or_shapes, Mapping):
        try:
            return {str(k): tuple(int(d) for d in v) for k, v in net_or_shapes.items()}
        except TypeError:
            raise ConfigError("param_shapes values must be shapes (sequences of ints)") from None
    raise ConfigError("expected a mindspore Cell or a {name: shape} mapping, "
                      f"got {type(net_or_shapes).__name__}")


# How MindSpore's optimizers name the state they keep per parameter (Momentum: ``moments.<param>``,
# Adam: ``moment1./moment2.``, ...): a strategy built from network + optimizer shapes splits the state
# exactly like its parameter, so optimizer checkpoints merge and re-split too.
OPTIMIZER_STATE_PREFIXES = ("moments", "moment1", "moment2", "accum", "accu_grads", "adam_m", "adam_v")


def _matches(name: str, prefixes: Sequence[str]) -> bool:
    head, _, rest = name.partition(".")
    names = (name, rest) if head in OPTIMIZER_STATE_PREFIXES and rest else (name,)
    return any(n == p or n.startswith(p + ".") for n in names for p in prefixes)


def _pb2():
    from mindspore.train import node_strategy_pb2

    return node_strategy_pb2


def classifier_shard_strategy(layout: Layout) -> tuple[tuple[int, int], tuple[int, int]]:
    """``in_strategy`` for ``nn.Dense``'s ``MatMul(transpose_b=True)``: batch split ``dp`` ways, weight
    ``(classes, features)`` split ``mp`` ways on its class dimension (column-parallel classifier)."""
    return ((layout.dp, 1), (layout.mp, 1))


def classifier_bias_strategy(layout: Layout) -> tuple[tuple[int, int], tuple[int]]:
    """``in_strategy`` for ``nn.Dense``'s ``BiasAdd``: logits ``(dp, mp)``, bias split like the weight."""
    return ((layout.dp, layout.mp), (layout.mp,))


# Names of the primitives ``nn.Dense`` calls (``self.matmul = ops.MatMul(transpose_b=True)``,
# ``self.bias_add = ops.BiasAdd()``): the first half of their strategy keys.
DENSE_MATMUL, DENSE_BIAS_ADD = "MatMul", "BiasAdd"


def shard_classifier(dense, layout: Layout):
    """Put the two strategies above on an ``nn.Dense`` (GPU/Ascend ``SEMI_AUTO_PARALLEL`` path)."""
    dense.matmul.shard(classifier_shard_strategy(layout))
    if getattr(dense, "has_bias", False):
        dense.bias_add.shard(classifier_bias_strategy(layout))
    return dense


def build_strategy(net_or_param_shapes, layout: Layout, split: Sequence[str] = ("fc",)):
    """A ``ParallelStrategyMap`` for ``layout``: parameters under ``split`` prefixes split on dimension 0
    (a Dense weight's class rows and its bias; a conv's output channels) across the ``mp`` axis, every other
    parameter replicated. Every item uses device matrix ``[dp, mp]`` so each one accounts for all ranks.

    Each layout item carries one empty ``param_split_shape``/``indices_offset`` entry, as MindSpore's writer
    does (its ``_convert_to_list`` reads ``param_split_shape[0]``). ``parallel_strategy_item`` gets the two
    operator strategies of each split ``nn.Dense`` under the keys MindSpore's loader looks up
    (``op_strategy_key``). When the file is loaded under ``SEMI_AUTO_PARALLEL``, such an entry is used only
    for an operator without a ``shard()`` strategy of its own (``shard()`` wins; ``build_semi_auto_step`` sets
    the same strategies with it); checkpoint tools read only the layouts.
    """
    if not isinstance(layout, Layout):
        raise ConfigError(f"layout must be a helpers.train.strategy_layout.Layout, got {type(layout).__name__}")
    split = (split,) if isinstance(split, str) else tuple(split)
    shapes = shapes_of(net_or_param_shapes)
    for prefix in split:
        if not any(_matches(name, (prefix,)) for name in shapes):
            raise ConfigError(f"split prefix {prefix!r} matches no parameter "
                              f"(names look like {', '.join(list(shapes)[-3:])})")
    pb2 = _pb2()
    smap = pb2.ParallelStrategyMap()
    smap.current_stage = 0
    for name, shape in shapes.items():
        tensor_map = [-1] * len(shape)
        if _matches(name, split):
            if not shape:
                raise ConfigError(f"parameter {name!r} is a scalar and cannot be split")
            if shape[0] % layout.mp:
                raise ConfigError(f"parameter {name!r}: dimension 0 of size {shape[0]} is not divisible by "
                                  f"its split {layout.mp} (layout {layout.name}); choose mp dividing "
                                  f"{shape[0]}")
            tensor_map[0] = 0                      # axis 0 from the right of [dp, mp] = the mp axis
        item = smap.parallel_layout_item.add()
        item.param_name = name
        _fill_layouts(item.parallel_layouts, layout.dev_matrix, tensor_map)
    # Precedence when loaded, as ExtractStrategyAndInit in frontend/parallel/step_parallel.cc has it up to 2.3
    # (2.10 moved that choice into ObtainInOutStrategy, called from strategy_utils.cc): an in_strategy on the
    # node, then the primitive's shard() attribute, then this file's entry under op_strategy_key, else batch
    # parallel.
    for prefix in split:
        weight = shapes.get(prefix + ".weight")
        if weight is not None and len(weight) == 2:
            _add_op_strategy(smap, op_strategy_key(DENSE_MATMUL, prefix + ".weight"),
                             classifier_shard_strategy(layout))
            if prefix + ".bias" in shapes:
                _add_op_strategy(smap, op_strategy_key(DENSE_BIAS_ADD, prefix + ".bias"),
                                 classifier_bias_strategy(layout))
    return smap


def op_strategy_key(primitive: str, first_param: str) -> str:
    """The ``parallel_strategy_item`` key of an operator: its primitive's name, ``_``, and the name of the
    first parameter among its inputs. ``nn.Dense`` ``fc`` (``ops.MatMul``, ``ops.BiasAdd``):
    ``MatMul_fc.weight``, ``BiasAdd_fc.bias``."""
    # MindSpore 2.10 (libmindspore_frontend.so carries both files): the semi-auto loader builds the key in
    # StrategyUtils::ExtractStrategyAndInit (mindspore/ccsrc/frontend/parallel/strategy_utils.cc) as
    # prim->name() + "_" + NodeParameterName(cnode, -1, 0)[0].first, and the saver CheckpointStrategy
    # (frontend/parallel/parallel_postprocessor.cc) writes the same key. NodeParameterName
    # (frontend/parallel/step_parallel_utils.cc) returns the op's Parameter inputs, looking through Load,
    # Cast, Depend and AllGather/Mirror, so an AMP cast of the weight keeps the key.
    return f"{primitive}_{first_param}"


def _fill_layouts(layouts, dev_matrix, tensor_map, field=0, opt_step=0, opt_size=0,
                  param_split_shape=(), indices_offset=()):
    layouts.dev_matrix.add().dim.extend(int(d) for d in dev_matrix)
    layouts.tensor_map.add().dim.extend(int(t) for t in tensor_map)
    layouts.param_split_shape.add().dim.extend(int(s) for s in param_split_shape)
    layouts.indices_offset.add().dim.extend(int(s) for s in indices_offset)
    layouts.field = int(field)
    layouts.opt_weight_shard_step = int(opt_step)
    layouts.opt_weight_shard_size = int(opt_size)


def _add_op_strategy(smap, node_name, strategy, stage=0):
    item = smap.parallel_strategy_item.add()
    item.node_name = node_name
    item.parallel_strategys.stage = stage
    for dims in strategy:
        item.parallel_strategys.parallel_strategy.add().dim.extend(int(d) for d in dims)


def layout_items(strategy) -> dict:
    """``{name: ParallelLayouts}`` from a ``ParallelStrategyMap`` or a ``read_strategy`` dict."""
    if hasattr(strategy, "parallel_layout_item"):
        return {item.param_name: item.parallel_layouts for item in strategy.parallel_layout_item}
    if isinstance(strategy, Mapping):
        return dict(strategy)
    raise ConfigError("expected a ParallelStrategyMap or a read_strategy() dict, "
                      f"got {type(strategy).__name__}")


def strategy_to_dict(strategy) -> dict[str, dict]:
    """``{name: layout_to_dict(...)}``: equal for a built map and the same map read back from either file."""
    return {name: layout_to_dict(lay, name) for name, lay in layout_items(strategy).items()}


def save_strategy(strategy, path, param_shapes=None) -> Path:
    """Write ``strategy`` (a ``ParallelStrategyMap`` or a ``read_strategy`` dict) to ``path``.

    ``.json`` -> the JSON MindSpore writes (``StrategyCheckpointInfo::to_json``): ``current_stage``,
    ``parallel_strategy_item`` ``{node: {stage, parallel_strategy}}`` and ``parallel_layout_item``
    ``{param: {dev_matrix, tensor_map, tensor_shape, field, opt_weight_shard_step, opt_weight_shard_size}}``.
    MindSpore's C++ loader requires ``tensor_shape``, which the protobuf form lacks, so JSON needs
    ``param_shapes`` (a Cell or ``{name: shape}``). Any other suffix -> serialized protobuf.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    items = layout_items(strategy)
    if str(path).endswith(".json"):
        if param_shapes is None:
            raise ConfigError(f"saving {path} as JSON needs param_shapes (MindSpore's JSON records each "
                              "parameter's full 'tensor_shape')")
        shapes = shapes_of(param_shapes)
        layout_json = {}
        for name, lay in items.items():
            if name not in shapes:
                raise ConfigError(f"no shape given for parameter {name!r} (needed for JSON 'tensor_shape')")
            d = layout_to_dict(lay, name)
            entry = {"dev_matrix": d["dev_matrix"], "tensor_map": d["tensor_map"],
                     "tensor_shape": list(shapes[name]), "field": d["field"],
                     "opt_weight_shard_step": d["opt_weight_shard_step"],
                     "opt_weight_shard_size": d["opt_weight_shard_size"]}
            if d["param_split_shape"]:              # MindSpore writes these two only for manual splits
                entry["param_split_shape"] = d["param_split_shape"]
                entry["indices_offset"] = d["indices_offset"]
            layout_json[name] = entry
        ops_json = {}
        for item in getattr(strategy, "parallel_strategy_item", ()):
            ops_json[item.node_name] = {"stage": int(item.parallel_strategys.stage),
                                        "parallel_strategy": [list(s.dim) for s in
                                                              item.parallel_strategys.parallel_strategy]}
        doc = {"current_stage": int(getattr(strategy, "current_stage", 0)),
               "parallel_strategy_item": ops_json, "parallel_layout_item": layout_json}
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        return path
    if not hasattr(strategy, "SerializeToString"):
        pb2 = _pb2()
        smap = pb2.ParallelStrategyMap()
        smap.current_stage = 0
        for name, lay in items.items():
            item = smap.parallel_layout_item.add()
            item.param_name = name
            item.parallel_layouts.CopyFrom(lay)
        strategy = smap
    try:
        data = strategy.SerializeToString()
    except Exception as e:                       # a required proto2 field left unset
        raise ConfigError(f"strategy map is incomplete, cannot write {path}: {e}") from e
    path.write_bytes(data)
    return path


def read_strategy(path) -> dict:
    """``{parameter name: ParallelLayouts}`` read by MindSpore's own ``build_searched_strategy``.

    Any failure (missing, empty, not protobuf, bad JSON, missing fields) becomes a ``DataError`` that names
    the file, as does a file that parses but holds no parameter layouts.
    """
    from mindspore.parallel import build_searched_strategy

    path = str(path)
    try:
        strategy = build_searched_strategy(path)
    except Exception as e:
        raise DataError(f"strategy file {path} is unreadable: {type(e).__name__}: {e}") from e
    if not strategy:
        raise DataError(f"strategy file {path} holds no parameter layouts ('parallel_layout_item' is empty)")
    return strategy


def json_tensor_shapes(path) -> dict[str, tuple[int, ...]]:
    """``tensor_shape`` of each parameter of a JSON strategy file (MindSpore's Python reader drops it)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return {name: tuple(item["tensor_shape"]) for name, item in doc["parallel_layout_item"].items()
                if "tensor_shape" in item}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def validate_strategy(path, param_shapes, world_size: int, require_all: bool = False) -> dict:
    """Check a strategy file against a network before launch; return what ``read_strategy`` read.

    ``DataError`` (naming the file) when it cannot be read; otherwise one ``ConfigError`` listing every
    problem: unknown parameter (with the closest real name), tensor map not matching the parameter's rank or
    device matrix, a dimension not divisible by its split (param, dim, split), a device matrix whose product
    is not the world size; with ``require_all``, network parameters missing from the file.
    The error's ``problems`` attribute holds the list.
    """
    strategy = read_strategy(path)
    shapes = shapes_of(param_shapes)
    problems = []
    for name, lay in strategy.items():
        if name not in shapes:
            close = difflib.get_close_matches(name, list(shapes), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown parameter {name!r}: the network has no such parameter{hint}")
            continue
        try:
            d = layout_to_dict(lay, name)
        except ConfigError as e:
            problems.append(str(e))
            continue
        dev, tmap, shape = d["dev_matrix"], d["tensor_map"], shapes[name]
        product = int(np.prod(dev)) if dev else 1
        if product != world_size:
            problems.append(f"parameter {name!r}: device matrix {dev} has product {product}, "
                            f"but the world size is {world_size}")
        if len(tmap) != len(shape):
            problems.append(f"parameter {name!r}: tensor_map {tmap} has {len(tmap)} entries but the "
                            f"parameter has shape {list(shape)} ({len(shape)} dims)")
            continue
        used = [k for k in tmap if k != -1]
        if len(used) != len(set(used)):
            problems.append(f"parameter {name!r}: tensor_map {tmap} uses a device axis twice")
        try:
            split = tensor_split(dev, tmap)
        except ConfigError as e:
            problems.append(f"parameter {name!r}: {e}")
            continue
        for dim, (size, parts) in enumerate(zip(shape, split)):
            if size % parts:
                problems.append(f"parameter {name!r}: dimension {dim} of size {size} is not divisible by "
                                f"its split {parts}")
    if require_all:
        missing = [n for n in shapes if n not in strategy]
        if missing:
            problems.append(f"{len(missing)} network parameters are not in the file, e.g. {missing[:3]}")
    if problems:
        err = ConfigError(f"strategy file {path} does not fit this network and world size {world_size}:\n"
                          + "\n".join(f"  - {p}" for p in problems))
        err.problems = problems
        raise err
    return strategy


def semi_auto_context(layout: Layout, strategy_file, mode: str = "save") -> dict:
    """Keyword arguments for ``mindspore.set_auto_parallel_context`` on GPU/Ascend (refused on CPU).

    ``dataset_strategy="data_parallel"`` (the same as ``full_batch=False``): every rank reads its own
    1/world of the global batch, as on the CPU path; MindSpore re-lays the features out for the classifier's
    ``(dp, 1) x (mp, 1)`` MatMul. ``only_trainable_params=False`` keeps BatchNorm statistics in the file,
    like ``build_strategy``. ``mode="save"`` records the strategy the compiler chose, ``"load"`` imposes
    a file (e.g. one written by ``build_strategy``).
    """
    if mode not in ("save", "load"):
        raise ConfigError(f"mode must be 'save' or 'load', got {mode!r}")
    if not isinstance(layout, Layout):
        raise ConfigError(f"layout must be a helpers.train.strategy_layout.Layout, got {type(layout).__name__}")
    return {
        "parallel_mode": "semi_auto_parallel",
        "device_num": layout.world,
        "gradients_mean": True,
        "dataset_strategy": "data_parallel",
        "strategy_ckpt_config": {f"{mode}_file": os.path.abspath(os.fspath(strategy_file)),
                                 "only_trainable_params": False},
    }
