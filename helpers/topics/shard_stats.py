"""How balanced a split is: what each rank sees over an epoch, and what each global step sees.

Two different failures hide behind "load imbalance" on class-sorted data, so there are two measures:

- per shard, over the epoch: the class histogram of each rank and the largest total-variation distance
  of a rank's class mix from the dataset's (0 = every rank sees the global mix; 1 = disjoint classes);
- per global step (step ``i`` = positions ``[i*b, (i+1)*b)`` of every shard, ``b`` the per-rank batch):
  how many distinct classes the step's ``n*b`` samples hold, and their entropy (bits). A split can be
  perfect per shard and still feed every step one or two classes (``DistributedSampler(shuffle=False)``).

Pure numpy, no MindSpore: it runs in the notebook kernel at ImageNet scale in well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from helpers.core.errors import ConfigError, DataError

IMAGENET_CLASSES = 1000
IMAGENET_TRAIN_IMAGES = 1_281_167
IMAGENET_MIN_PER_CLASS = 732
IMAGENET_MAX_PER_CLASS = 1300


def _labels(labels) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu" or arr.min() < 0:
        raise DataError("labels must be a non-empty 1-D array of class ids >= 0")
    return arr


def class_histograms(shards: Sequence[np.ndarray], labels, num_classes: int | None = None) -> np.ndarray:
    """``(num_shards, num_classes)`` counts: how many samples of each class each shard reads per epoch."""
    labels = _labels(labels)
    n = int(labels.max()) + 1 if num_classes is None else int(num_classes)
    return np.stack([np.bincount(labels[np.asarray(s, dtype=np.int64)], minlength=n)[:n] for s in shards])


def global_mix(labels, num_classes: int | None = None) -> np.ndarray:
    """The dataset's class proportions (what every shard and every step should look like)."""
    labels = _labels(labels)
    n = int(labels.max()) + 1 if num_classes is None else int(num_classes)
    counts = np.bincount(labels, minlength=n)[:n]
    return counts / counts.sum()


def shard_tv(shards: Sequence[np.ndarray], labels) -> np.ndarray:
    """Per shard: total-variation distance ``0.5 * sum|p_shard - p_global|`` of its class mix."""
    hist = class_histograms(shards, labels).astype(np.float64)
    totals = hist.sum(axis=1, keepdims=True)
    if np.any(totals == 0):
        raise DataError("a shard is empty: its class mix is undefined")
    return 0.5 * np.abs(hist / totals - global_mix(labels)).sum(axis=1)


def max_tv(shards: Sequence[np.ndarray], labels) -> float:
    """The worst shard's distance from the global class mix (the chapter's ``max_tv``)."""
    return float(shard_tv(shards, labels).max())


@dataclass(frozen=True)
class StepCoverage:
    """Per complete global step: distinct classes and class entropy (bits) of its ``n*b`` samples."""

    distinct: np.ndarray          # int, one per step
    entropy_bits: np.ndarray      # float, one per step
    batch_per_rank: int
    num_shards: int

    @property
    def num_steps(self) -> int:
        return int(self.distinct.size)

    @property
    def min_classes(self) -> int:
        return int(self.distinct.min())

    @property
    def mean_classes(self) -> float:
        return float(self.distinct.mean())

    @property
    def mean_entropy_bits(self) -> float:
        return float(self.entropy_bits.mean())


def step_labels(shards: Sequence[np.ndarray], labels, batch_per_rank: int) -> np.ndarray:
    """``(steps, num_shards * b)`` labels of each complete global step (a short last batch is dropped,
    as with ``batch(drop_remainder=True)``; shards of unequal length stop at the shortest)."""
    labels = _labels(labels)
    if isinstance(batch_per_rank, bool) or not isinstance(batch_per_rank, (int, np.integer)) \
            or batch_per_rank < 1:
        raise ConfigError(f"batch_per_rank must be a positive integer, got {batch_per_rank!r}")
    b = int(batch_per_rank)
    steps = min(len(s) for s in shards) // b
    if steps == 0:
        raise ConfigError(f"batch_per_rank={b} is larger than the shortest shard "
                          f"({min(len(s) for s in shards)} samples): no complete step")
    return np.concatenate([labels[np.asarray(s[:steps * b], dtype=np.int64)].reshape(steps, b)
                           for s in shards], axis=1)


def step_coverage(shards: Sequence[np.ndarray], labels, batch_per_rank: int) -> StepCoverage:
    """Distinct classes and entropy of every complete global step (vectorised: one sort of all steps)."""
    per_step = np.sort(step_labels(shards, labels, batch_per_rank), axis=1)
    steps, width = per_step.shape
    new_run = np.ones_like(per_step, dtype=bool)
    new_run[:, 1:] = per_step[:, 1:] != per_step[:, :-1]
    distinct = new_run.sum(axis=1)
    starts = np.flatnonzero(new_run.ravel())
    p = np.diff(np.append(starts, per_step.size)) / width
    entropy = np.bincount(starts // width, weights=-p * np.log2(p), minlength=steps)
    return StepCoverage(distinct, entropy, int(batch_per_rank), len(shards))


def summarize(shards: Sequence[np.ndarray], labels, batch_per_rank: int) -> dict:
    """The figures chapter 01 records for one strategy, as plain numbers."""
    cov = step_coverage(shards, labels, batch_per_rank)
    return {"max_tv": max_tv(shards, labels), "min_classes_per_step": cov.min_classes,
            "mean_classes_per_step": cov.mean_classes, "mean_entropy_bits_per_step": cov.mean_entropy_bits,
            "steps": cov.num_steps}


def imagenet_shaped_counts(seed: int = 0) -> np.ndarray:
    """1,000 per-class counts shaped like ImageNet-1k train: most classes at 1,300, some fewer, the
    smallest at 732, summing to exactly 1,281,167 (the real totals; the per-class values are drawn)."""
    rng = np.random.default_rng(seed)
    counts = np.full(IMAGENET_CLASSES, IMAGENET_MAX_PER_CLASS, dtype=np.int64)
    deficit = int(counts.sum()) - IMAGENET_TRAIN_IMAGES
    short = rng.choice(IMAGENET_CLASSES, size=130, replace=False)
    counts[short[0]] = IMAGENET_MIN_PER_CLASS                      # one class at the real minimum
    deficit -= IMAGENET_MAX_PER_CLASS - IMAGENET_MIN_PER_CLASS
    others = short[1:]
    room = np.full(others.size, IMAGENET_MAX_PER_CLASS - IMAGENET_MIN_PER_CLASS - 1)
    cut = np.zeros(others.size, dtype=np.int64)
    weights = rng.dirichlet(np.ones(others.size))
    while deficit > 0:                                # spread the rest, never below the minimum
        free = room - cut > 0
        w = np.where(free, weights, 0.0)
        add = np.minimum(rng.multinomial(deficit, w / w.sum()), room - cut)
        cut += add
        deficit -= int(add.sum())
    counts[others] -= cut
    return counts


def imagenet_shaped_labels(seed: int = 0) -> np.ndarray:
    """Class-sorted int32 labels of an ImageNet-shaped train split (1,281,167 labels, 1,000 classes,
    732..1,300 per class), for balance experiments at full scale without any image."""
    return np.repeat(np.arange(IMAGENET_CLASSES, dtype=np.int32), imagenet_shaped_counts(seed))


def per_class_spread(shards: Sequence[np.ndarray], labels) -> int:
    """The largest difference, over classes, between the shards' counts of one class (the stratified
    sampler deals every class round robin, so this is at most 1 for it)."""
    hist = class_histograms(shards, labels)
    return int((hist.max(axis=0) - hist.min(axis=0)).max())
