"""The stratified split as a ``mindspore.dataset`` sampler; the four ways chapter 01 splits class-sorted data.

Why it exists: ImageNet-layout readers list samples class by class. A contiguous split hands each rank a
disjoint block of classes; MindSpore's ``DistributedSampler`` interleaves (shard ``k`` gets ``k, k+n, ...``)
so with ``shuffle=False`` every global step sees one or two classes, and with ``shuffle=True`` each
shard's class mix drifts from the global one. ``DistributedSampler`` has no class argument (the
``class_column=`` of the source blog does not exist), so the fix is a sampler of our own; the split itself
is :mod:`helpers.train.stratified_split`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import mindspore.dataset as ds
import numpy as np

from helpers.core.errors import DataError
from helpers.train.stratified_split import (REMAINDER_MODES, SMALL_CLASS_MODES, check_choice, check_int,
                                            check_labels, stratified_shards)

SHARD_KINDS = ("contiguous", "distributed", "distributed_shuffle", "stratified")


# ------------------------------------------------------------------------------------------- the sampler
def sampler_class(spec: str) -> type:
    """The sampler class ``spec`` names, ``"file.py:Class"`` (the file relative to the run folder, where the ranks
    run): a stratified sampler written in a notebook cell, taken from it (``helpers.core.cell_source.definitions``)."""
    from helpers.core.cell_source import load_definitions

    path, name = spec.split(":")
    return load_definitions(path, [name])[0]


class StratifiedDistributedSampler(ds.Sampler):
    """One rank's share of :func:`stratified_shards`, as a ``mindspore.dataset`` sampler.

    The shard length is the same every epoch (``len(sampler)``). Use it as ``sampler=`` on
    ``ImageFolderDataset``, ``GeneratorDataset`` (random-access source) or ``NumpySlicesDataset``, with
    ``num_shards``/``shard_id``/``shuffle`` left unset. Every rank must pass the same labels, seed, epoch
    and options, and its own ``shard_id``.

    Epochs: the pipeline calls :meth:`reset` at the end of each epoch of an iterator, and reset advances
    the epoch, so ``model.train(epochs, data)`` reshuffles every epoch. A pipeline deep-copies its sampler
    when an iterator is created: when you build one iterator per epoch yourself, call
    ``set_epoch(e)`` on your sampler before creating each one.
    """

    def __init__(self, labels, num_shards: int, shard_id: int, seed: int = 0, epoch: int = 0,
                 remainder: str = "pad", small_class: str = "error", global_batch: int | None = None,
                 class_names: Sequence[str] | None = None):
        self.labels = check_labels(labels)
        self.num_shards = check_int("num_shards", num_shards, 1)
        self.shard_id = check_int("shard_id", shard_id, 0, self.num_shards)
        self.seed = check_int("seed", seed, 0)
        self.epoch = check_int("epoch", epoch, 0)
        self.remainder = check_choice("remainder", remainder, REMAINDER_MODES)
        self.small_class = check_choice("small_class", small_class, SMALL_CLASS_MODES)
        self.global_batch = global_batch
        self.class_names = tuple(class_names) if class_names is not None else None
        self._cached: tuple[int, np.ndarray] | None = None
        super().__init__(num_samples=len(self.indices()))   # same length every epoch

    @classmethod
    def from_image_folder(cls, split_dir: str | Path, num_shards: int, shard_id: int,
                          **kwargs) -> "StratifiedDistributedSampler":
        """Labels from the folder listing of ``split_dir`` (``<split_dir>/<class>/*.JPEG``), no decoding.

        The order is ``ImageFolderDataset``'s: sorted class folders, then their files.
        """
        from helpers.train.image_folder import scan_split

        split_dir = Path(split_dir)
        index = scan_split(split_dir.parent, split_dir.name)
        return cls(index.labels, num_shards, shard_id, class_names=index.classes, **kwargs)

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """This shard's sample indices for ``epoch`` (default: the current one), in reading order."""
        epoch = self.epoch if epoch is None else check_int("epoch", epoch, 0)
        if self._cached is not None and self._cached[0] == epoch:
            return self._cached[1]
        shard = stratified_shards(self.labels, self.num_shards, self.seed, epoch, remainder=self.remainder,
                                  small_class=self.small_class, global_batch=self.global_batch,
                                  class_names=self.class_names)[self.shard_id]
        self._cached = (epoch, shard)
        return shard

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` (deterministic: the same epoch gives the same order)."""
        self.epoch = check_int("epoch", epoch, 0)

    def reset(self):
        """Called by the pipeline after each epoch: move on to the next one."""
        self.epoch += 1

    def __len__(self) -> int:
        return int(self.num_samples)

    def __iter__(self):
        if self.dataset_size and self.dataset_size != self.labels.size:
            raise DataError(f"the sampler was built for {self.labels.size} labels but the dataset has "
                            f"{self.dataset_size} samples: build it from the same folder or array")
        yield from self.indices().tolist()

    def is_shuffled(self) -> bool:
        return True

    def is_sharded(self) -> bool:
        return True


# ------------------------------------------------------------------------------- the four strategies compared
def _real_distributed_sampler(n: int, num_shards: int, shard_id: int, shuffle: bool, seed: int,
                              method: str) -> np.ndarray:
    """Indices MindSpore's own ``DistributedSampler`` gives one shard of ``n`` samples.

    The sampler reads its seed from ``ds.config.get_seed()`` when built; setting ``sampler.seed`` instead
    is the same as a worker calling ``ds.config.set_seed(seed)`` first, without touching global RNGs.
    ``method="iterate"`` runs the pipeline (what a worker sees, ~0.1 ms per sample on 2 cores);
    ``"lookup"`` asks the same pipeline for position i (public random access, ~15x faster).
    """
    sampler = ds.DistributedSampler(num_shards, shard_id, shuffle=shuffle)
    sampler.seed = seed
    data = ds.NumpySlicesDataset({"index": np.arange(n, dtype=np.int64)}, sampler=sampler)
    if method == "iterate":
        rows = data.create_tuple_iterator(num_epochs=1, output_numpy=True)
        return np.fromiter((int(r[0]) for r in rows), dtype=np.int64)
    length = -(-n // num_shards)
    return np.fromiter((int(data[i][0]) for i in range(length)), dtype=np.int64, count=length)


def shard_indices(kind: str, labels, num_shards: int, seed: int = 0, *, method: str = "iterate",
                  shards: Sequence[int] | None = None, **stratified_kwargs) -> list[np.ndarray]:
    """Per-shard sample indices for one of the strategies chapter 01 compares (``SHARD_KINDS``).

    - ``contiguous``: the naive split of the dataset order into ``num_shards`` consecutive blocks
      (``np.array_split``, every sample once); on class-sorted data each rank gets a block of classes.
    - ``distributed``: ``DistributedSampler(shuffle=False)``: shard k gets k, k+n, ..., padded by wrapping
      to the start (computed; the tests check it against MindSpore).
    - ``distributed_shuffle``: ``DistributedSampler(shuffle=True)`` after ``ds.config.set_seed(seed)``,
      obtained from the real sampler (``method`` ``"iterate"`` or ``"lookup"``, see above), since its
      shuffle lives in MindSpore's C++ engine.
    - ``stratified``: :func:`stratified_shards` (epoch 0 unless given in ``stratified_kwargs``).

    ``shards`` restricts the result to some shard ids (the others are not computed when that saves time).
    """
    check_choice("kind", kind, SHARD_KINDS)
    check_choice("method", method, ("iterate", "lookup"))
    labels = check_labels(labels)
    num_shards = check_int("num_shards", num_shards, 1)
    seed = check_int("seed", seed, 0)
    wanted = list(range(num_shards)) if shards is None else [
        check_int("shard id", k, 0, num_shards) for k in shards]
    n = labels.size
    if kind == "contiguous":
        blocks = np.array_split(np.arange(n, dtype=np.int64), num_shards)
        return [blocks[k] for k in wanted]
    if kind == "distributed":
        length = -(-n // num_shards)
        return [(np.arange(length, dtype=np.int64) * num_shards + k) % n for k in wanted]
    if kind == "distributed_shuffle":
        return [_real_distributed_sampler(n, num_shards, k, True, seed, method) for k in wanted]
    epoch = stratified_kwargs.pop("epoch", 0)
    every = stratified_shards(labels, num_shards, seed, epoch, **stratified_kwargs)
    return [every[k] for k in wanted]
