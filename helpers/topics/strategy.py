"""What chapter 03 shows with strategy files: a table of who holds which block, and per-rank checkpoints merged
into one and re-split for another layout with MindSpore's ``transform_checkpoints``.

The files themselves are ``helpers.train.strategy_file``; the geometry ``helpers.train.strategy_layout``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from helpers.core.errors import ConfigError, DataError
from helpers.train.strategy_file import (OPTIMIZER_STATE_PREFIXES, json_tensor_shapes, layout_items, read_strategy,
                                         shapes_of)
from helpers.train.strategy_layout import layout_to_dict, shard_slice, slice_index, tensor_split


def _load_any(path_or_map):
    """``(layout items, JSON tensor shapes or {}, source label)`` from a path or an in-memory strategy."""
    if isinstance(path_or_map, (str, os.PathLike)):
        path = str(path_or_map)
        shapes = json_tensor_shapes(path) if path.endswith(".json") else {}
        return read_strategy(path), shapes, path
    return layout_items(path_or_map), {}, "strategy map"


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
