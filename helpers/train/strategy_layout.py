"""Hybrid layouts (``dp`` groups of ``mp`` ranks) and the geometry of MindSpore's strategy layouts: which block
of a tensor each rank holds, cutting it out and putting it back together. Pure numpy.

MindSpore's conventions, as the installed 2.10 code reads them (``mindspore/parallel/_tensor.py``):

- ``dev_matrix`` arranges the ranks row-major, last axis fastest: with ``[dp, mp]`` rank ``r`` sits at
  ``(r // mp, r % mp)``, so a model-parallel group is ``mp`` consecutive ranks.
- ``tensor_map[i]`` names the device-matrix axis that splits tensor dimension ``i``, *counted from the right*
  (``0`` is the last axis, here ``mp``); ``-1`` means not split (replicated along every axis it ignores).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from helpers.core.errors import ConfigError, DataError


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
