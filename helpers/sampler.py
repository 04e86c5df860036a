"""A class-stratified distributed sampler, and the four ways chapter 01 splits a class-sorted dataset.

Why it exists: ImageNet-layout readers list samples class by class. A contiguous split hands each rank a
disjoint block of classes; MindSpore's ``DistributedSampler`` interleaves (shard ``k`` gets ``k, k+n, ...``)
so with ``shuffle=False`` every global step sees one or two classes, and with ``shuffle=True`` each
shard's class mix drifts from the global one. ``DistributedSampler`` has no class argument (the
``class_column=`` of the source blog does not exist), so the fix is a sampler of our own.

How :func:`stratified_shards` splits (all vectorised numpy, one call yields every shard):

1. a seeded shuffle inside each class, classes laid end to end in a seeded random order;
2. this class-grouped sequence is dealt round robin (position ``p`` goes to shard ``(p + r) % n``, ``r`` a
   seeded rotation): each class's samples go to the shards in turn, so two shards' counts of a class
   differ by at most 1, and shard lengths differ by at most 1;
3. every sample gets a *stratified time*: the ``j``-th sample of a class of ``n_c`` lies at a uniformly
   random point of ``[j/n_c, (j+1)/n_c)``; each shard reads its samples in time order. A class is thus
   spread evenly over the epoch on every shard, staggered between shards, so the positions
   ``[i*b, (i+1)*b)`` of all shards (global step ``i``) hold the classes in their global proportions
   instead of class blocks;
4. equal lengths: with ``remainder="pad"`` (default, like ``DistributedSampler``) each shorter shard gets
   one extra sample, a copy of a sample held by another shard, of a class the shorter shard holds one
   fewer of (so the at-most-1 rule still holds), placed at a random point of its order. With
   ``remainder="drop"`` each longer shard leaves out one sample, of a class it holds one more of.
   Either way at most ``num_shards - 1`` samples per epoch are copied (pad) or unseen (drop).

Classes with fewer samples than shards cannot reach every shard: that is an error unless
``small_class="drop"`` (those samples are left out) or ``"repeat"`` (their samples are repeated, cycling
through them, up to ``num_shards`` so every shard gets one; the repeats are further copies).
The result is deterministic for ``(seed, epoch)`` and changes with the epoch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import mindspore.dataset as ds
import numpy as np

from helpers.errors import ConfigError, DataError

REMAINDER_MODES = ("pad", "drop")
SMALL_CLASS_MODES = ("error", "drop", "repeat")
SHARD_KINDS = ("contiguous", "distributed", "distributed_shuffle", "stratified")


# ----------------------------------------------------------------------------------------------- checks
def check_labels(labels) -> np.ndarray:
    """Labels as a 1-D non-negative integer array, or a :class:`DataError` that says what is wrong."""
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise DataError(f"labels must be a 1-D array (one class id per sample), got shape {arr.shape}")
    if arr.size == 0:
        raise DataError("the dataset is empty: no labels to split across shards")
    if arr.dtype.kind not in "iu":
        hint = " (cast with labels.astype(int) if they are whole numbers)" if arr.dtype.kind == "f" else ""
        raise DataError(f"labels must be integers (class ids), got dtype {arr.dtype}{hint}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0:
        raise DataError(f"labels must be class ids >= 0, got {lo}")
    if hi > 10 * arr.size + 65536:
        raise DataError(f"labels look like raw ids, not class indices (max {hi} for {arr.size} samples): "
                        f"remap them with np.unique(labels, return_inverse=True)[1]")
    return arr


def _check_int(name: str, value, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < low or (high is not None and value >= high):
        span = f"[{low}, {high - 1}]" if high is not None else f">= {low}"
        raise ConfigError(f"{name}={value} is out of range: expected {span}")
    return value


def _check_choice(name: str, value, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ConfigError(f"{name}={value!r}: expected one of {', '.join(map(repr, choices))}")
    return value


def _class_name(c: int, class_names: Sequence[str] | None) -> str:
    return f"{c} ({class_names[c]!r})" if class_names is not None and c < len(class_names) else str(c)


# ------------------------------------------------------------------------------------- the stratified split
def _pool(labels: np.ndarray, num_shards: int, small_class: str, class_names) -> np.ndarray:
    """Sample indices to split: all of them, minus or plus (repeats of) the classes smaller than the shards."""
    counts = np.bincount(labels)
    small = np.flatnonzero((counts > 0) & (counts < num_shards))
    everything = np.arange(labels.size, dtype=np.int64)
    if small.size == 0:
        return everything
    if small_class == "error":
        listed = ", ".join(f"class {_class_name(c, class_names)} has {counts[c]}" for c in small[:5])
        more = f" and {small.size - 5} more" if small.size > 5 else ""
        raise DataError(f"{small.size} class(es) have fewer samples than the {num_shards} shards, so they "
                        f"cannot reach every shard: {listed}{more}. Pass small_class='drop' to leave them "
                        f"out or small_class='repeat' to repeat their samples up to {num_shards}.")
    is_small = np.zeros(counts.size, dtype=bool)
    is_small[small] = True
    if small_class == "drop":
        kept = everything[~is_small[labels]]
        if kept.size == 0:
            raise DataError(f"the dataset is empty after small_class='drop': every class has fewer than "
                            f"{num_shards} samples")
        return kept
    extra = [np.resize(np.flatnonzero(labels == c), num_shards)[counts[c]:] for c in small]
    return np.concatenate([everything, *extra])


def stratified_shards(labels, num_shards: int, seed: int = 0, epoch: int = 0, remainder: str = "pad",
                      small_class: str = "error", class_names: Sequence[str] | None = None) -> list[np.ndarray]:
    """Every shard's sample indices (int64, in reading order) for one epoch; see the module docstring.

    ``labels[i]`` is the class of dataset sample ``i`` (the reader's order). ``class_names`` only makes
    error messages readable. One call costs the same as one shard, so the sampler computes all of them.
    """
    labels = check_labels(labels)
    num_shards = _check_int("num_shards", num_shards, 1)
    seed = _check_int("seed", seed, 0)
    epoch = _check_int("epoch", epoch, 0)
    _check_choice("remainder", remainder, REMAINDER_MODES)
    _check_choice("small_class", small_class, SMALL_CLASS_MODES)

    pool = _pool(labels, num_shards, small_class, class_names)
    pool_labels = labels[pool] if pool.size != labels.size else labels
    n_classes = int(labels.max()) + 1
    rng = np.random.default_rng([seed, epoch])

    # 1. classes end to end in a random order, a random order inside each class: two stable radix sorts
    #    (16-bit random keys, then the class's rank; ties of the random key keep the reader's order)
    class_rank = rng.permutation(n_classes)
    by_rank = np.argsort(class_rank)                                   # class id at each rank
    key = class_rank.astype(np.uint16 if n_classes <= 65536 else np.int64)[pool_labels]
    order = np.argsort(rng.integers(0, 65536, pool.size, dtype=np.uint16), kind="stable").astype(np.int64)
    order = order[np.argsort(key[order], kind="stable")]
    grouped = pool[order] if pool.size != labels.size else order

    # 2. class of each grouped position, its rank j inside the class, and its stratified time, quantised
    #    to 16 bits so that each shard's time order is one more radix sort
    counts = np.bincount(pool_labels, minlength=n_classes)
    size_by_rank = counts[by_rank]
    starts = np.zeros(n_classes, dtype=np.int64)
    starts[by_rank] = np.cumsum(size_by_rank) - size_by_rank
    grouped_labels = np.repeat(by_rank, size_by_rank)
    j = np.arange(pool.size, dtype=np.float32) - np.repeat(starts[by_rank], size_by_rank).astype(np.float32)
    scale = np.repeat((65536.0 / np.maximum(size_by_rank, 1)).astype(np.float32), size_by_rank)
    time = np.minimum((j + rng.random(pool.size, dtype=np.float32)) * scale, 65535).astype(np.uint16)

    # 3. deal round robin: shard k takes the positions p with (p + rotation) % num_shards == k, so shard k
    #    holds counts // n + 1 of a class when (k - start - rotation) % n < counts % n, else counts // n
    rotation = int(rng.integers(num_shards))
    slices = [slice((k - rotation) % num_shards, None, num_shards) for k in range(num_shards)]
    shard_ids = np.arange(num_shards)[:, None]
    hist = counts // num_shards + ((shard_ids - starts - rotation) % num_shards < counts % num_shards)
    long_len = math.ceil(pool.size / num_shards)
    short_len = pool.size // num_shards
    if short_len == 0 and remainder == "drop":
        raise DataError(f"{pool.size} samples cannot fill {num_shards} shards with remainder='drop'")

    shards = []
    for k, s in enumerate(slices):
        idx, t = grouped[s], time[s]
        if remainder == "pad" and idx.size < long_len:
            c = int(rng.choice(np.flatnonzero(hist[k] < hist.max(axis=0))))
            # the first sample of class c in the grouped order went to a shard holding one more of c
            idx = np.append(idx, grouped[starts[c]])
            t = np.append(t, rng.integers(0, 65536, dtype=np.uint16))
        ordered = idx[np.argsort(t, kind="stable")]
        if remainder == "drop" and idx.size > short_len:
            c = int(rng.choice(np.flatnonzero(hist[k] > hist.min(axis=0))))
            last = np.flatnonzero(labels[ordered] == c)[-1]    # leave out this shard's last sample of c
            ordered = np.delete(ordered, last)
        shards.append(ordered)
    return shards


# ------------------------------------------------------------------------------------------- the sampler
class StratifiedDistributedSampler(ds.Sampler):
    """One rank's share of :func:`stratified_shards`, as a ``mindspore.dataset`` sampler.

    Use it as ``sampler=`` on ``ImageFolderDataset``, ``GeneratorDataset`` (random-access source) or
    ``NumpySlicesDataset``, with ``num_shards``/``shard_id``/``shuffle`` left unset. Every rank must pass
    the same labels, seed and epoch, and its own ``shard_id``.

    Epochs: the pipeline calls :meth:`reset` at the end of each epoch of an iterator, and reset advances
    the epoch, so ``model.train(epochs, data)`` reshuffles every epoch. A pipeline deep-copies its sampler
    when an iterator is created: when you build one iterator per epoch yourself, call
    ``set_epoch(e)`` on your sampler before creating each one.
    """

    def __init__(self, labels, num_shards: int, shard_id: int, seed: int = 0, epoch: int = 0,
                 remainder: str = "pad", small_class: str = "error",
                 class_names: Sequence[str] | None = None):
        self.labels = check_labels(labels)
        self.num_shards = _check_int("num_shards", num_shards, 1)
        self.shard_id = _check_int("shard_id", shard_id, 0, self.num_shards)
        self.seed = _check_int("seed", seed, 0)
        self.epoch = _check_int("epoch", epoch, 0)
        self.remainder = _check_choice("remainder", remainder, REMAINDER_MODES)
        self.small_class = _check_choice("small_class", small_class, SMALL_CLASS_MODES)
        self.class_names = tuple(class_names) if class_names is not None else None
        self._cached: tuple[int, np.ndarray] | None = None
        super().__init__(num_samples=len(self.indices()))   # same length every epoch

    @classmethod
    def from_image_folder(cls, split_dir: str | Path, num_shards: int, shard_id: int,
                          **kwargs) -> "StratifiedDistributedSampler":
        """Labels from the folder listing of ``split_dir`` (``<split_dir>/<class>/*.JPEG``), no decoding.

        The order is ``ImageFolderDataset``'s: sorted class folders, then their files.
        """
        from helpers.data import scan_split

        split_dir = Path(split_dir)
        index = scan_split(split_dir.parent, split_dir.name)
        return cls(index.labels, num_shards, shard_id, class_names=index.classes, **kwargs)

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """This shard's sample indices for ``epoch`` (default: the current one), in reading order."""
        epoch = self.epoch if epoch is None else _check_int("epoch", epoch, 0)
        if self._cached is not None and self._cached[0] == epoch:
            return self._cached[1]
        shard = stratified_shards(self.labels, self.num_shards, self.seed, epoch, self.remainder,
                                  self.small_class, self.class_names)[self.shard_id]
        self._cached = (epoch, shard)
        return shard

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` (deterministic: the same epoch gives the same order)."""
        self.epoch = _check_int("epoch", epoch, 0)

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
    length = math.ceil(n / num_shards)
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
    _check_choice("kind", kind, SHARD_KINDS)
    _check_choice("method", method, ("iterate", "lookup"))
    labels = check_labels(labels)
    num_shards = _check_int("num_shards", num_shards, 1)
    seed = _check_int("seed", seed, 0)
    wanted = list(range(num_shards)) if shards is None else [
        _check_int("shard id", k, 0, num_shards) for k in shards]
    n = labels.size
    if kind == "contiguous":
        blocks = np.array_split(np.arange(n, dtype=np.int64), num_shards)
        return [blocks[k] for k in wanted]
    if kind == "distributed":
        length = math.ceil(n / num_shards)
        return [(np.arange(length, dtype=np.int64) * num_shards + k) % n for k in wanted]
    if kind == "distributed_shuffle":
        return [_real_distributed_sampler(n, num_shards, k, True, seed, method) for k in wanted]
    epoch = stratified_kwargs.pop("epoch", 0)
    every = stratified_shards(labels, num_shards, seed, epoch, **stratified_kwargs)
    return [every[k] for k in wanted]
