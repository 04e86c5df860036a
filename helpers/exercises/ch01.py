"""Chapter 01 exercises: class-sorted labels under two splits, the code cell's sampler dealing in blocks (public via
``helpers.exercises``)."""

from __future__ import annotations

import ast

import numpy as np

from helpers.exercises.common import RUN_NAME, as_int, cell_run, checker, kind_of, read_count, say

EX01_CLASSES, EX01_PER_CLASS = 10, 40    # class-sorted labels: 0 x40, 1 x40, ..., 9 x40
EX01_RANKS, EX01_BATCH_PER_RANK = 8, 5
EX01_RANK = 3


def ex01_labels() -> np.ndarray:
    """The exercise's class-sorted labels (what an ImageNet-layout reader lists)."""
    return np.repeat(np.arange(EX01_CLASSES), EX01_PER_CLASS).astype(np.int64)


def _histogram_error(answer, want: np.ndarray) -> str | None:
    """Why ``answer`` is not a list of ``EX01_CLASSES`` whole counts (shares are named), or None."""
    if isinstance(answer, np.ndarray) and answer.dtype.kind in "iu":
        answer = answer.tolist()          # what shard_stats.class_histograms returns: counts all the same
    if not isinstance(answer, list):
        return f"the exercise asks for a list of {EX01_CLASSES} counts, got {kind_of(answer)}"
    if len(answer) != EX01_CLASSES:
        return f"the exercise asks for one count per class, {EX01_CLASSES} items, got {len(answer)}"
    odd = [v for v in answer if as_int(v) is None]
    if not odd:
        return None
    numbers = all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                  for v in answer)
    if numbers and np.allclose(np.asarray(answer, dtype=float), want / want.sum()):
        return f"these are shares; the exercise asks for image counts (same shape, times {int(want.sum())})"
    return f"the counts are whole numbers (int), but one is {kind_of(odd[0])}"


@checker
def check_01_rank3_histogram(answer) -> bool:
    """Rank 3's row of the class heatmap under the ``contiguous`` split: images of each class it reads."""
    if answer is None:
        return say(None, f"set answer = a list of {EX01_CLASSES} counts (images of class 0..{EX01_CLASSES - 1} "
                          f"that rank {EX01_RANK} reads)")
    from helpers.topics import shard_stats
    from helpers.train.sampler import shard_indices

    labels = ex01_labels()
    shards = shard_indices("contiguous", labels, EX01_RANKS)
    rows = shard_stats.class_histograms(shards, labels, EX01_CLASSES)
    want, first, per_rank = rows[EX01_RANK], int(shards[EX01_RANK][0]), len(labels) // EX01_RANKS
    error = _histogram_error(answer, want)
    if error:
        return say(False, error)
    got = np.array([as_int(v) for v in answer])
    if np.array_equal(got, want):
        seen = [c for c in range(EX01_CLASSES) if want[c]]
        return say(True, f"rank {EX01_RANK} reads the block {first}..{int(shards[EX01_RANK][-1])} of the "
                          "listing: "
                          f"classes {seen} only (max TV of this split: {shard_stats.max_tv(shards, labels):.2f})")
    other = [r for r in range(EX01_RANKS) if np.array_equal(got, rows[r])]
    if other:
        return say(False, f"that is rank {other[0]}'s row; ranks count from 0, so rank {EX01_RANK} reads "
                           f"positions {first}..{first + per_rank - 1}")
    if got.sum() != per_rank:
        return say(False, f"rank {EX01_RANK} reads {len(labels)} images / {EX01_RANKS} ranks = {per_rank} "
                           "images; "
                           f"these counts add up to {int(got.sum())}")
    return say(False, f"rank {EX01_RANK} reads {list(map(int, want))}: {per_rank} consecutive images of the "
                       f"class-sorted listing, starting at {first}, where class c starts at c x {EX01_PER_CLASS}")


@checker
def check_01_worst_step_classes(answer) -> bool:
    """Distinct classes in the worst global step with ``DistributedSampler(shuffle=False)`` (``distributed``)."""
    got, verdict = read_count(answer, "the number of distinct classes in the worst global step")
    if got is None:
        return verdict
    from helpers.topics import shard_stats
    from helpers.train.sampler import shard_indices

    labels = ex01_labels()
    shards = shard_indices("distributed", labels, EX01_RANKS)
    want = shard_stats.step_coverage(shards, labels, EX01_BATCH_PER_RANK).min_classes
    step = EX01_RANKS * EX01_BATCH_PER_RANK
    if got == want:
        return say(True, f"{want} class(es): rank k reads k, k+{EX01_RANKS}, ..., so one global step is {step} "
                          f"consecutive images of the listing, although each rank's epoch is perfectly mixed "
                          f"(max TV {shard_stats.max_tv(shards, labels):.2f})")
    hints = {EX01_CLASSES: f"{got} is what each rank's epoch holds (every class); one step reads only {step} "
                           "consecutive images of the listing",
             EX01_RANKS: f"{got} would be one class per rank, but the ranks interleave: together they read "
                         f"{step} consecutive positions of the listing",
             EX01_BATCH_PER_RANK: f"{got} is the images per rank per step; count the classes among the {step} "
                                  "images of the whole step"}
    return say(False, hints.get(got, f"the worst step holds {want} class(es), not {got}: a global step reads "
                                      f"{step} consecutive samples of the class-sorted listing"))


EX01_SHARD_KEY = "classes in my shard"     # in the code cell's finish(...): distinct classes the sampler gives
DEALT = "self.shard_id::self.num_shards"   # the cell's dealing slice, as ast.unparse writes it


@checker
def check_01_block_shard(answer, run=None) -> bool:
    """Classes in rank 0's shard once the code cell's sampler takes a contiguous block of ``order`` instead of
    dealing it, read from ``run``: the cell's ``JobResult`` (``on_ranks``)."""
    todo = "replace order[self.shard_id::self.num_shards] by a block of order in the code cell and run it again"
    returns, tree, verdict = cell_run(run, (EX01_SHARD_KEY,), todo)
    if returns is None:
        return verdict
    if DEALT in ast.unparse(tree):
        return say(None, f"the last run of the code cell still deals the samples ({DEALT}): {todo}")
    got, verdict = read_count(answer, "the number of classes in rank 0's shard")
    if got is None:
        return verdict
    want, counts = int(returns[0][EX01_SHARD_KEY]), [int(v[EX01_SHARD_KEY]) for v in returns.values()]
    dealt = max(counts)
    if got == want:
        return say(True, f"{want}: order lists the samples class by class, so a block of it holds only the classes "
                          f"it spans ({min(counts)} to {max(counts)} per rank here); dealing it like cards gives "
                          "every rank every class")
    if got == 1:
        return say(False, f"a block of {len(returns)} equal shares rarely ends where a class ends: rank 0's "
                           f"block reaches into the next class ({RUN_NAME}.returns shows {want})")
    return say(False, f"{RUN_NAME}.returns[0] shows {want} classes in rank 0's shard, not {got}"
                      + (" (that is what dealing gives every rank)" if got >= dealt and got > want else ""))
