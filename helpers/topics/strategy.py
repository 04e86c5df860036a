"""Hybrid (data x model) parallel layouts written as MindSpore's own strategy files.

Why this module exists: chapter 03 splits the classifier across the ``mp`` ranks of each group and keeps the
backbone data parallel. On GPU/Ascend, MindSpore does that itself under ``SEMI_AUTO_PARALLEL`` and records
the result in a *strategy file*; on CPU that mode is refused, so the worker builds the same layout from
explicit collectives. Writing the layout in MindSpore's format (``ParallelStrategyMap`` of
``mindspore/train/node_strategy_pb2.py``) lets one file drive both paths and lets MindSpore's own tools
(``build_searched_strategy``, ``transform_checkpoints``) read it, merge per-rank checkpoints and re-split
them.

MindSpore's conventions, as the installed 2.10 code reads them (``mindspore/parallel/_tensor.py``):

- ``dev_matrix`` arranges the ranks row-major, last axis fastest: with ``[dp, mp]`` rank ``r`` sits at
  ``(r // mp, r % mp)``, so a model-parallel group is ``mp`` consecutive ranks.
- ``tensor_map[i]`` names the device-matrix axis that splits tensor dimension ``i``, *counted from the right*
  (``0`` is the last axis, here ``mp``); ``-1`` means not split (replicated along every axis it ignores).
- A ``.json`` path is JSON, anything else protobuf (``_build_searched_strategy`` tests ``[-5:] == ".json"``).

MindSpore is imported inside the functions that need it, so ``Layout`` and the context builders stay cheap.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from helpers.core.errors import ConfigError, DataError

# --------------------------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """``dp`` data-parallel groups of ``mp`` model-parallel ranks each (``world = dp * mp``).

    The device matrix is ``[dp, mp]``: the ``mp`` ranks sharing one data shard of the classifier are
    consecutive (``mp_group``), which is also where MindSpore puts the fastest-varying axis.
    """

    dp: int
    mp: int

    def __post_init__(self):
        for field_name in ("dp", "mp"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"Layout.{field_name} must be a positive int, got {value!r}")

    @classmethod
    def parse(cls, text: str) -> Layout:
        """``"4x2"`` -> ``Layout(dp=4, mp=2)`` (the way the notebooks and benchmarks name layouts)."""
        try:
            dp, mp = (int(part) for part in str(text).lower().split("x"))
        except ValueError:
            raise ConfigError(f"layout must look like '<dp>x<mp>' (e.g. '4x2'), got {text!r}") from None
        return cls(dp, mp)

    @property
    def world(self) -> int:
        return self.dp * self.mp

    @property
    def name(self) -> str:
        return f"{self.dp}x{self.mp}"

    @property
    def dev_matrix(self) -> tuple[int, int]:
        return (self.dp, self.mp)

    def coords(self, rank: int) -> tuple[int, int]:
        """``(data-parallel index, model-parallel index)`` of ``rank``."""
        self._check_rank(rank)
        return divmod(rank, self.mp)

    def mp_group(self, rank: int) -> tuple[int, ...]:
        """Ranks that hold the other slices of ``rank``'s classifier (same data-parallel index)."""
        d, _ = self.coords(rank)
        return tuple(range(d * self.mp, (d + 1) * self.mp))

    def dp_group(self, rank: int) -> tuple[int, ...]:
        """Ranks that hold the same classifier slice as ``rank`` (they average its gradient)."""
        _, m = self.coords(rank)
        return tuple(range(m, self.world, self.mp))

    def mp_groups(self) -> list[tuple[int, ...]]:
        return [self.mp_group(d * self.mp) for d in range(self.dp)]

    def dp_groups(self) -> list[tuple[int, ...]]:
        return [self.dp_group(m) for m in range(self.mp)]

    def _check_rank(self, rank):
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < self.world:
            raise ConfigError(f"rank must be an int in [0, {self.world}) for layout {self.name}, "
                              f"got {rank!r}")


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


# ----------------------------------------------------------------------------------- building the map


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
        raise ConfigError(f"layout must be a helpers.topics.strategy.Layout, got {type(layout).__name__}")
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


# ------------------------------------------------------------------------------ plain views of layouts


def _flat_tensor_map(layouts, name="?") -> list[int]:
    """The one-axis-per-dimension tensor map; MindSpore writes a 2-D form only for 'layout' strategies."""
    entries = [list(t.dim) for t in layouts.tensor_map]
    if len(entries) <= 1:
        return entries[0] if entries else []
    per_dim = [e for e in entries if e]
    if all(len(e) == 1 for e in per_dim):
        return [e[0] for e in per_dim]
    raise ConfigError(f"parameter {name!r} maps one tensor dimension onto several device axes "
                      f"({per_dim}); these helpers handle one axis per dimension only")


def layout_to_dict(layouts, name="?") -> dict:
    """Plain dict of one ``ParallelLayouts`` (the fields MindSpore's readers use), for tables and tests."""
    first = lambda rep: list(rep[0].dim) if len(rep) else []  # noqa: E731
    return {
        "dev_matrix": first(layouts.dev_matrix),
        "tensor_map": _flat_tensor_map(layouts, name),
        "param_split_shape": first(layouts.param_split_shape),
        "indices_offset": first(layouts.indices_offset),
        "field": int(layouts.field),
        "opt_weight_shard_step": int(layouts.opt_weight_shard_step),
        "opt_weight_shard_size": int(layouts.opt_weight_shard_size),
    }


def _layout_items(strategy) -> dict:
    """``{name: ParallelLayouts}`` from a ``ParallelStrategyMap`` or a ``read_strategy`` dict."""
    if hasattr(strategy, "parallel_layout_item"):
        return {item.param_name: item.parallel_layouts for item in strategy.parallel_layout_item}
    if isinstance(strategy, Mapping):
        return dict(strategy)
    raise ConfigError("expected a ParallelStrategyMap or a read_strategy() dict, "
                      f"got {type(strategy).__name__}")


def strategy_to_dict(strategy) -> dict[str, dict]:
    """``{name: layout_to_dict(...)}``: equal for a built map and the same map read back from either file."""
    return {name: layout_to_dict(lay, name) for name, lay in _layout_items(strategy).items()}


# ------------------------------------------------------------------------------------- files: save/read


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
    items = _layout_items(strategy)
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


def _json_tensor_shapes(path) -> dict[str, tuple[int, ...]]:
    """``tensor_shape`` of each parameter of a JSON strategy file (MindSpore's Python reader drops it)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return {name: tuple(item["tensor_shape"]) for name, item in doc["parallel_layout_item"].items()
                if "tensor_shape" in item}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


# ------------------------------------------------------------------------- geometry: slices and ranks


def _dev_and_map(layout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(dev_matrix, tensor_map)`` from a ``ParallelLayouts``, a dict with those keys, or a pair."""
    if hasattr(layout, "dev_matrix") and hasattr(layout, "tensor_map") and not isinstance(layout, Mapping):
        d = layout_to_dict(layout)
        return tuple(d["dev_matrix"]), tuple(d["tensor_map"])
    if isinstance(layout, Mapping):
        return tuple(layout["dev_matrix"]), tuple(layout["tensor_map"])
    dev, tmap = layout
    return tuple(dev), tuple(tmap)


def tensor_split(dev_matrix, tensor_map) -> tuple[int, ...]:
    """How many slices each tensor dimension is cut into (``dev_matrix[-1 - k]`` for ``tensor_map`` ``k``)."""
    n = len(dev_matrix)
    out = []
    for k in tensor_map:
        if k == -1:
            out.append(1)
        elif 0 <= k < n:
            out.append(int(dev_matrix[n - 1 - k]))
        else:
            raise ConfigError(f"tensor_map entry {k} is outside device matrix {list(dev_matrix)} "
                              f"(valid: -1 or 0..{n - 1}, counted from the right)")
    return tuple(out)


def rank_coords(rank: int, dev_matrix) -> tuple[int, ...]:
    """Coordinates of ``rank`` in ``dev_matrix`` (row-major, last axis fastest: MindSpore's numbering)."""
    coords = []
    for size in reversed(dev_matrix):
        coords.append(rank % size)
        rank //= size
    return tuple(reversed(coords))


def slice_index(rank: int, dev_matrix, tensor_map) -> tuple[int, ...]:
    """Which block of each tensor dimension ``rank`` holds."""
    coords = rank_coords(rank, dev_matrix)
    n = len(dev_matrix)
    tensor_split(dev_matrix, tensor_map)  # range check
    return tuple(0 if k == -1 else int(coords[n - 1 - k]) for k in tensor_map)


def _block_slices(shape, split, index, name="tensor"):
    out = []
    for dim, (size, parts, i) in enumerate(zip(shape, split, index)):
        if size % parts:
            raise ConfigError(f"{name}: dimension {dim} of size {size} is not divisible by its split {parts}")
        step = size // parts
        out.append(slice(i * step, (i + 1) * step))
    return tuple(out)


def shard_slice(full_array, layout, rank: int) -> np.ndarray:
    """The block of ``full_array`` that ``rank`` holds under ``layout`` (a ``ParallelLayouts``, a dict with
    ``dev_matrix``/``tensor_map`` or a ``(dev_matrix, tensor_map)`` pair). Pure numpy, a copy."""
    full = np.asarray(full_array)
    dev, tmap = _dev_and_map(layout)
    if len(tmap) != full.ndim:
        raise ConfigError(f"tensor_map {list(tmap)} has {len(tmap)} entries but the array has "
                          f"{full.ndim} dims")
    world = int(np.prod(dev)) if dev else 1
    if isinstance(rank, bool) or not 0 <= int(rank) < world:
        raise ConfigError(f"rank {rank!r} is outside device matrix {list(dev)} ({world} ranks)")
    split = tensor_split(dev, tmap)
    idx = slice_index(int(rank), dev, tmap)
    return np.ascontiguousarray(full[_block_slices(full.shape, split, idx)])


def merge_shards(shards, layout, replica_atol: float | None = None) -> np.ndarray:
    """Rebuild the full array from per-rank blocks (``{rank: array}`` or a list indexed by rank).

    Any one rank per block is enough. With ``replica_atol`` set, ranks holding the same block must agree
    within it (``DataError`` names them otherwise) — the check for "the data-parallel copies stayed equal".
    """
    dev, tmap = _dev_and_map(layout)
    items = dict(shards) if isinstance(shards, Mapping) else dict(enumerate(shards))
    if not items:
        raise DataError("merge_shards got no shards")
    split = tensor_split(dev, tmap)
    world = int(np.prod(dev)) if dev else 1
    outside = [r for r in items if not 0 <= int(r) < world]
    if outside:
        raise DataError(f"ranks {outside} are outside device matrix {list(dev)} ({world} ranks)")
    by_block: dict[tuple, list[int]] = {}
    for rank in sorted(items):
        by_block.setdefault(slice_index(int(rank), dev, tmap), []).append(rank)
    shard_shapes = {np.asarray(a).shape for a in items.values()}
    if len(shard_shapes) != 1:
        raise DataError(f"shards have different shapes {sorted(shard_shapes)}; expected one block shape")
    block = shard_shapes.pop()
    full_shape = tuple(b * s for b, s in zip(block, split))
    for index in np.ndindex(*split):
        if tuple(index) not in by_block:
            holders = [r for r in range(world) if slice_index(r, dev, tmap) == tuple(index)]
            raise DataError(f"block {tuple(index)} is missing: it needs one of ranks {holders}")
    first = np.asarray(items[next(iter(items))])
    full = np.empty(full_shape, dtype=first.dtype)
    for index, ranks in by_block.items():
        ref = np.asarray(items[ranks[0]])
        if replica_atol is not None:
            for r in ranks[1:]:
                other = np.asarray(items[r], dtype=np.float64)
                diff = float(np.max(np.abs(other - ref))) if ref.size else 0.0
                if diff > replica_atol:
                    raise DataError(f"ranks {ranks[0]} and {r} hold block {index} but differ by {diff:.3g} "
                                    f"(> {replica_atol})")
        full[_block_slices(full_shape, split, index)] = ref
    return full


# ------------------------------------------------------------------------------------ table, validation


def _load_any(path_or_map):
    """``(layout items, JSON tensor shapes or {}, source label)`` from a path or an in-memory strategy."""
    if isinstance(path_or_map, (str, os.PathLike)):
        path = str(path_or_map)
        shapes = _json_tensor_shapes(path) if path.endswith(".json") else {}
        return read_strategy(path), shapes, path
    return _layout_items(path_or_map), {}, "strategy map"


def strategy_table(path_or_map, world_size: int, param_shapes=None) -> list[dict]:
    """One row per parameter: ``parameter``, ``shape``, ``dev_matrix``, ``tensor_map``, ``split`` (slices per
    dimension), ``shard_shape``, ``shard_numel`` and ``slices`` (``{block index: ranks holding it}``).

    Shapes come from ``param_shapes`` (a Cell or ``{name: shape}``) or, for JSON files, from their
    ``tensor_shape``; protobuf files carry none, so shape columns are ``None`` without ``param_shapes``.
    """
    items, shapes, source = _load_any(path_or_map)
    if param_shapes is not None:
        shapes = shapes_of(param_shapes)
    rows = []
    for name, lay in items.items():
        d = layout_to_dict(lay, name)
        dev, tmap = d["dev_matrix"], d["tensor_map"]
        _check_world(name, dev, world_size, source)
        split = tensor_split(dev, tmap)
        slices: dict[tuple, list[int]] = {}
        for r in range(world_size):
            slices.setdefault(slice_index(r, dev, tmap), []).append(r)
        shape = shapes.get(name)
        shard_shape = None
        if shape is not None and len(shape) == len(split):
            shard_shape = tuple(s // p for s, p in zip(shape, split))
        rows.append({"parameter": name, "shape": tuple(shape) if shape is not None else None,
                     "dev_matrix": tuple(dev), "tensor_map": tuple(tmap), "split": split,
                     "shard_shape": shard_shape,
                     "shard_numel": int(np.prod(shard_shape)) if shard_shape is not None else None,
                     "opt_weight_shard_size": d["opt_weight_shard_size"], "slices": slices})
    return rows


def _check_world(name, dev, world_size, source):
    product = int(np.prod(dev)) if dev else 1
    if product != world_size:
        raise ConfigError(f"{source}: parameter {name!r} has device matrix {list(dev)} (product {product}) "
                          f"but the world size is {world_size}")


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


# ------------------------------------------------------------------------ GPU/Ascend semi-auto context


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
        raise ConfigError(f"layout must be a helpers.topics.strategy.Layout, got {type(layout).__name__}")
    return {
        "parallel_mode": "semi_auto_parallel",
        "device_num": layout.world,
        "gradients_mean": True,
        "dataset_strategy": "data_parallel",
        "strategy_ckpt_config": {f"{mode}_file": os.path.abspath(os.fspath(strategy_file)),
                                 "only_trainable_params": False},
    }


# ------------------------------------------------------------------- checkpoints: merge and re-split


def checkpoint_arrays(path) -> dict[str, np.ndarray]:
    """``{name: numpy array}`` of a MindSpore checkpoint."""
    import mindspore as ms

    if not Path(path).is_file():
        raise DataError(f"checkpoint {path} does not exist")
    return {name: p.asnumpy() for name, p in ms.load_checkpoint(str(path)).items()}


def write_rank_checkpoints(full_params: Mapping[str, np.ndarray], strategy, dst_dir,
                           prefix: str = "rank") -> list[Path]:
    """Cut full weights into ``dst_dir/rank_<r>/<prefix><r>.ckpt`` per ``strategy`` (path or map).

    The layout ``transform_checkpoints`` reads; parameters not in the strategy are written whole.
    """
    import mindspore as ms

    items, _, _ = _load_any(strategy)
    worlds = {int(np.prod(layout_to_dict(lay, n)["dev_matrix"])) for n, lay in items.items()}
    if len(worlds) != 1:
        raise ConfigError(f"strategy mixes device matrices of different sizes {sorted(worlds)}")
    world = worlds.pop()
    paths = []
    for r in range(world):
        rank_dir = Path(dst_dir) / f"rank_{r}"
        rank_dir.mkdir(parents=True, exist_ok=True)
        entries = []
        for name, arr in full_params.items():
            data = shard_slice(arr, items[name], r) if name in items else np.asarray(arr)
            entries.append({"name": name, "data": ms.Tensor(data)})
        path = rank_dir / f"{prefix}{r}.ckpt"
        ms.save_checkpoint(entries, str(path))
        paths.append(path)
    return paths


def _strategy_world(path) -> int:
    strategy = read_strategy(path)
    worlds = {int(np.prod(layout_to_dict(lay, n)["dev_matrix"])) for n, lay in strategy.items()}
    if len(worlds) != 1:
        raise ConfigError(f"strategy file {path} mixes device matrices of different sizes {sorted(worlds)}")
    return worlds.pop()


def _safe_dir(path, what) -> str:
    """Absolute path; ``transform_checkpoints`` refuses '..', '//' and '~' in its output directory."""
    out = os.path.abspath(os.fspath(path))
    if "~" in out:
        raise ConfigError(f"{what} {out} contains '~', which MindSpore's transform_checkpoints refuses")
    return out


def _check_unlisted_params(src, strategy, strategy_file):
    """transform_checkpoints copies a parameter missing from the strategy from rank 0 as it is. For the
    optimizer state of a split parameter (``moments.fc.weight`` when only ``fc.weight`` is listed) that is
    one slice posing as the whole, so refuse it. (Other unlisted sharded names cannot be told apart.)"""
    import mindspore as ms

    last = sorted((Path(src) / "rank_0").glob("*.ckpt"))[-1]           # the file MindSpore will pick
    try:
        names = ms.load_checkpoint(str(last), choice_func=lambda n: n not in strategy)
    except ValueError:                         # nothing outside the strategy (or unreadable: reported later)
        return
    for name in names:
        head, _, base = name.partition(".")
        if head in OPTIMIZER_STATE_PREFIXES and base in strategy:
            if any(k != -1 for k in layout_to_dict(strategy[base], base)["tensor_map"]):
                raise DataError(f"{name!r} is not in {strategy_file}, but {base!r} is split there, so "
                                "each rank holds a slice of it; build the strategy from the network and "
                                f"optimizer parameter shapes (it splits {name!r} like {base!r})")


def merge_rank_checkpoints(src_dir, strategy_file, dst_dir, prefix: str = "merged") -> Path:
    """Merge ``src_dir/rank_<r>/*.ckpt`` (the last file of each rank directory, as MindSpore picks it) into
    one full checkpoint with MindSpore's ``transform_checkpoints(src_strategy_file=strategy_file,
    dst_strategy_file=None)``; returns ``dst_dir/rank_0/<prefix>0.ckpt``.
    """
    from mindspore.parallel import transform_checkpoints

    world = _strategy_world(strategy_file)
    src, dst = _safe_dir(src_dir, "src_dir"), _safe_dir(dst_dir, "dst_dir")
    if os.path.realpath(src) == os.path.realpath(dst):
        raise ConfigError("dst_dir must differ from src_dir (the merged rank_0 would overwrite rank 0's "
                          "files)")
    missing = [r for r in range(world) if not list((Path(src) / f"rank_{r}").glob("*.ckpt"))]
    if missing:
        raise DataError(f"{src}: no checkpoint for ranks {missing} (expected rank_<r>/*.ckpt for "
                        f"r < {world}, the world size of {strategy_file})")
    _check_unlisted_params(src, read_strategy(strategy_file), strategy_file)
    try:
        transform_checkpoints(src, dst, prefix, src_strategy_file=str(strategy_file), dst_strategy_file=None)
    except Exception as e:
        raise DataError(f"transform_checkpoints could not merge {src} with {strategy_file}: {e}") from e
    out = Path(dst) / "rank_0" / f"{prefix}0.ckpt"
    if not out.is_file():
        raise DataError(f"transform_checkpoints finished but {out} was not written")
    return out


def resplit_checkpoint(full_ckpt, dst_strategy_file, dst_dir, world_size: int,
                       prefix: str = "rank") -> list[Path]:
    """Cut a full checkpoint for another layout with ``transform_checkpoints(src_strategy_file=None,
    dst_strategy_file=...)``; returns ``dst_dir/rank_<r>/<prefix><r>.ckpt`` for every rank.

    MindSpore reads sources only as ``<dir>/rank_<r>/``, so the full file is staged as ``rank_0`` of a
    temporary directory (removed afterwards).
    """
    from mindspore.parallel import transform_checkpoints

    world = _strategy_world(dst_strategy_file)
    if world != world_size:
        raise ConfigError(f"{dst_strategy_file} lays parameters out over {world} ranks, not {world_size}")
    if not Path(full_ckpt).is_file():
        raise DataError(f"full checkpoint {full_ckpt} does not exist")
    dst = _safe_dir(dst_dir, "dst_dir")
    staging = tempfile.mkdtemp(prefix="resplit_src_")
    try:
        (Path(staging) / "rank_0").mkdir()
        shutil.copyfile(full_ckpt, Path(staging) / "rank_0" / "full.ckpt")
        try:
            transform_checkpoints(staging, dst, prefix, src_strategy_file=None,
                                  dst_strategy_file=str(dst_strategy_file))
        except Exception as e:
            raise DataError(f"transform_checkpoints could not re-split {full_ckpt} for "
                            f"{dst_strategy_file}: {e}") from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    outs = [Path(dst) / f"rank_{r}" / f"{prefix}{r}.ckpt" for r in range(world_size)]
    missing = [str(p) for p in outs if not p.is_file()]
    if missing:
        raise DataError(f"transform_checkpoints finished but did not write {missing}")
    return outs
