"""The class-stratified split: every shard's sample indices for one epoch, as vectorised numpy.

:func:`stratified_shards` yields every shard in one call: 1. a seeded shuffle inside each class, classes end
to end in a seeded order; 2. equal lengths, a multiple of ``num_shards`` (or of ``global_batch``, so every
rank runs the same number of full steps), by copies (``remainder="pad"``, default, like
``DistributedSampler``) or by leaving out fewer than that many samples (``"drop"``); 3. each class dealt round
robin over the shards (two shards' counts of a class differ by at most 1), its last incomplete round placed to
keep the worst shard's class mix closest to the global one; 4. each shard read in *stratified time* order, so
every global step holds the classes in their global proportions, not class blocks. A class with fewer samples
than shards is an error unless ``small_class="drop"`` (left out) or ``"repeat"`` (repeated up to
``num_shards``). The result is deterministic for ``(seed, epoch)`` and changes with the epoch.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from helpers.core.errors import ConfigError, DataError

REMAINDER_MODES = ("pad", "drop")
SMALL_CLASS_MODES = ("error", "drop", "repeat")
DENSE_CELLS = 1 << 20    # within-class shuffle in a padded (classes x largest class) matrix when it has
DENSE_WASTE = 4          # at most max(DENSE_CELLS, DENSE_WASTE * samples) cells, else by two radix sorts


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


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high)``, or a :class:`ConfigError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < low or (high is not None and value >= high):
        span = f"[{low}, {high - 1}]" if high is not None else f">= {low}"
        raise ConfigError(f"{name}={value} is out of range: expected {span}")
    return value


def check_choice(name: str, value, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else a :class:`ConfigError` listing them."""
    if value not in choices:
        raise ConfigError(f"{name}={value!r}: expected one of {', '.join(map(repr, choices))}")
    return value


def _class_name(c: int, class_names: Sequence[str] | None) -> str:
    return f"{c} ({class_names[c]!r})" if class_names is not None and c < len(class_names) else str(c)


# ------------------------------------------------------------------------------------- the stratified split
def _pool(labels: np.ndarray, counts: np.ndarray, num_shards: int, small_class: str,
          class_names) -> np.ndarray | None:
    """Sample indices to split when they are not simply all of them (``None``): the classes smaller than
    the number of shards left out, or their samples repeated (cycling) up to ``num_shards``."""
    small = np.flatnonzero((counts > 0) & (counts < num_shards))
    if small.size == 0:
        return None
    if small_class == "error":
        listed = ", ".join(f"class {_class_name(c, class_names)} has {counts[c]}" for c in small[:5])
        more = f" and {small.size - 5} more" if small.size > 5 else ""
        raise DataError(f"{small.size} class(es) have fewer samples than the {num_shards} shards, so they "
                        f"cannot reach every shard: {listed}{more}. Pass small_class='drop' to leave them "
                        f"out or small_class='repeat' to repeat their samples up to {num_shards}.")
    is_small = np.zeros(counts.size, dtype=bool)
    is_small[small] = True
    if small_class == "drop":
        kept = np.flatnonzero(~is_small[labels])
        if kept.size == 0:
            raise DataError(f"the dataset is empty after small_class='drop': every class has fewer than "
                            f"{num_shards} samples")
        return kept
    extra = [np.resize(np.flatnonzero(labels == c), num_shards)[counts[c]:] for c in small]
    return np.concatenate([np.arange(labels.size), *extra])


def _shuffle_within_classes(pool: np.ndarray, pool_labels: np.ndarray, counts: np.ndarray,
                            class_rank: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``pool`` grouped by class, classes in ``class_rank`` order, a uniform random order inside each.

    Usual case (classes of similar size): one row per class in a padded matrix, ``rng.permuted`` shuffles
    every row at once (cache-friendly), padding removed. Very unequal classes would make that matrix
    large, so then: a stable radix sort on 16-bit random keys, then one on the class rank.
    """
    index_type = np.int32 if pool.size < 2**31 else np.int64
    if counts.size * int(counts.max()) <= max(DENSE_WASTE * pool.size, DENSE_CELLS):
        sorted_already = np.all(pool_labels[1:] >= pool_labels[:-1])     # the usual reader order
        by_label = pool if sorted_already else pool[np.argsort(pool_labels, kind="stable")]
        width = int(counts.max())
        rows = np.full((counts.size, width), -1, dtype=index_type)
        cell = np.arange(pool.size, dtype=np.int64)             # row class_rank[c], column j, row-major
        cell += np.repeat(class_rank.astype(np.int64) * width - (np.cumsum(counts) - counts), counts)
        rows.ravel()[cell] = by_label
        rows = rng.permuted(rows, axis=1)
        return rows[rows >= 0]
    key = class_rank.astype(np.uint16 if counts.size <= 65536 else np.int64)[pool_labels]
    order = np.argsort(rng.integers(0, 65536, pool.size, dtype=np.uint16), kind="stable")
    return pool[order[np.argsort(key[order], kind="stable")]].astype(index_type)


def _adjust_length(grouped: np.ndarray, sizes: np.ndarray, share: np.ndarray, num_shards: int, unit: int,
                   remainder: str) -> tuple[np.ndarray, np.ndarray]:
    """Pad (copies) or trim ``grouped`` to a multiple of ``unit``; ``sizes`` are its class block sizes.

    Which classes: one sample at a time, the class where it brings the shards' class counts closest to
    the global mix ``share`` at the final shard length (greedy on the rounding error: a class owed most
    gets a copy, one over-served loses a sample). Which samples: the first of the class's shuffled block
    (pad: the copy goes right after it, hence to another shard) or the last (drop).
    """
    total = grouped.size
    target = unit * (-(-total // unit) if remainder == "pad" else total // unit)
    if target == 0:
        raise DataError(f"{total} samples cannot fill one round of {unit} with remainder='drop' "
                        f"(use remainder='pad', fewer shards or a smaller global batch)")
    if target == total:
        return grouped, sizes
    ideal = (target // num_shards) * share                     # per-shard count each class deserves
    new = sizes.copy()
    step = 1 if remainder == "pad" else -1
    for _ in range(abs(target - total)):
        rounds, left = np.divmod(new, num_shards)
        delta = ideal - rounds
        gain = np.abs(1 - delta) - np.abs(delta)               # one more shard at rounds + 1
        if step > 0:
            gain[sizes == 0] = np.inf                          # no copies of an absent class
        else:                                                  # one fewer: the reverse move
            gain = np.where(left > 0, -gain, np.abs(ideal - rounds + 1) - np.abs(ideal - rounds))
            gain[new <= np.minimum(sizes, num_shards)] = np.inf  # keep a class on every shard
        new[int(np.argmin(gain))] += step
    starts = np.cumsum(sizes) - sizes
    change = np.abs(new - sizes)
    k = np.arange(change.sum()) - np.repeat(np.cumsum(change) - change, change)
    if step > 0:
        pos = np.repeat(starts, change) + k % np.repeat(sizes, change)
        return np.insert(grouped, pos + 1, grouped[pos]), new
    return np.delete(grouped, np.repeat(starts + sizes - 1, change) - k), new


def _deal_table(sizes: np.ndarray, share: np.ndarray, num_shards: int,
                rng: np.random.Generator) -> np.ndarray:
    """``(classes, num_shards)``: the shard each position ``j % num_shards`` of a class goes to.

    Full rounds reach every shard whatever the order. A class's last, incomplete round of ``r`` samples
    ("leftovers") goes to ``table[c, :r]``: every shard must take the same number of leftovers (equal
    lengths), and each leftover of class c moves its shard's distance from the global mix by
    ``|1 - delta| - |delta|`` (``delta = length * share - full_rounds``, ``share`` the global proportion).
    Greedy, largest moves first: the ``r`` shards that gain least (or, for a negative move, the farthest
    ones), unless that leaves leftovers that can no longer be placed (Gale-Ryser test); then the shards
    with the most room left, which always can (Ryser). Then :func:`_even_out` swaps leftovers. About
    30 us per class with leftovers, in Python: fine for thousands of classes.
    """
    n = num_shards
    table = (np.arange(n)[None, :] + rng.integers(n, size=(sizes.size, 1))) % n
    rounds, left = np.divmod(sizes, n)
    delta = (sizes.sum() // n) * share - rounds
    gain = np.abs(1 - delta) - np.abs(delta)
    todo = np.flatnonzero(left)
    todo = todo[np.argsort(-np.abs(gain[todo]), kind="stable")]
    room = [int(left.sum() // n)] * n
    load = [0.0] * n
    tie = rng.random(n).tolist()
    waiting = np.bincount(left[todo], minlength=n).tolist()   # classes still needing v shards
    shards = range(n)

    def placeable(rooms):                                      # Gale-Ryser, O(n^2)
        top = 0
        for k, a in enumerate(sorted(rooms, reverse=True), start=1):
            top += a
            if top > sum(w * min(v, k) for v, w in enumerate(waiting) if w):
                return False
        return True

    for c, g, r in zip(todo.tolist(), gain[todo].tolist(), left[todo].tolist()):
        waiting[r] -= 1
        sign = 1.0 if g >= 0 else -1.0
        pick = [k for k in sorted(shards, key=lambda k: (sign * load[k], tie[k])) if room[k] > 0][:r]
        trial = [a - (k in pick) for k, a in enumerate(room)]
        if len(pick) < r or (max(trial) - min(trial) > 1 and not placeable(trial)):
            pick = sorted(shards, key=lambda k: (-room[k], sign * load[k], tie[k]))[:r]
            trial = [a - (k in pick) for k, a in enumerate(room)]
        room = trial
        for k in pick:
            load[k] += g
        table[c] = pick + [k for k in shards if k not in pick]
    if todo.size:
        holds = np.zeros((n, sizes.size), dtype=bool)           # holds[k, c]: shard k has a leftover of c
        holds[table[todo, :1].ravel(), todo] = True
        for i in range(1, n):
            has = left[todo] > i
            holds[table[todo[has], i], todo[has]] = True
        if _even_out(holds, gain):
            key = (~holds.T[todo]) + rng.random((todo.size, n))   # leftover shards first, random order
            table[todo] = np.argsort(key, axis=1)
    return table


def _even_out(holds: np.ndarray, gain: np.ndarray, max_swaps: int = 200) -> bool:
    """Swap leftovers between the worst shard and another (class c for class d, so lengths stay equal)
    while that lowers the worst shard's distance; True if anything moved. Vectorised per shard pair."""
    moved = False
    load = holds.astype(np.float64) @ gain
    for _ in range(max_swaps):
        a = int(np.argmax(load))
        best = (load[a], None)
        for b in range(holds.shape[0]):
            if b == a:
                continue
            give = np.flatnonzero(holds[a] & ~holds[b])
            take = np.flatnonzero(holds[b] & ~holds[a])
            if give.size == 0 or take.size == 0:
                continue
            gap = load[a] - load[b]
            order = np.argsort(gain[take], kind="stable")
            wt = gain[take][order]
            # for each c given, the d taken that brings x = gain[c] - gain[d] closest to gap / 2
            at = np.clip(np.searchsorted(wt, gain[give] - gap / 2), 0, wt.size - 1)
            for cand in (at, np.maximum(at - 1, 0)):
                x = gain[give] - wt[cand]
                worst = np.maximum(load[a] - x, load[b] + x)
                i = int(np.argmin(worst))
                if worst[i] < best[0] - 1e-12:
                    best = (worst[i], (b, give[i], take[order[cand[i]]], x[i]))
        if best[1] is None:
            return moved
        b, c, d, x = best[1]
        holds[a, c], holds[b, c], holds[b, d], holds[a, d] = False, True, False, True
        load[a] -= x
        load[b] += x
        moved = True
    return moved


def stratified_shards(labels, num_shards: int, seed: int = 0, epoch: int = 0, remainder: str = "pad",
                      small_class: str = "error", global_batch: int | None = None,
                      class_names: Sequence[str] | None = None) -> list[np.ndarray]:
    """Every shard's sample indices (int64, in reading order) for one epoch; see the module docstring.

    ``labels[i]`` is the class of dataset sample ``i`` (the reader's order). ``global_batch`` (a multiple
    of ``num_shards``) makes the shard length a multiple of the per-rank batch. ``class_names`` only makes
    error messages readable. One call costs about as much as one shard, so the sampler computes them all.
    """
    labels = check_labels(labels)
    num_shards = check_int("num_shards", num_shards, 1)
    seed = check_int("seed", seed, 0)
    epoch = check_int("epoch", epoch, 0)
    check_choice("remainder", remainder, REMAINDER_MODES)
    check_choice("small_class", small_class, SMALL_CLASS_MODES)
    unit = num_shards
    if global_batch is not None:
        unit = check_int("global_batch", global_batch, 1)
        if unit % num_shards:
            raise ConfigError(f"global_batch={unit} is not a multiple of num_shards={num_shards}")

    dataset_counts = np.bincount(labels)
    pool = _pool(labels, dataset_counts, num_shards, small_class, class_names)
    if pool is None:
        pool, pool_labels, counts = np.arange(labels.size), labels, dataset_counts
    else:
        pool_labels = labels[pool]
        counts = np.bincount(pool_labels, minlength=dataset_counts.size)
    rng = np.random.default_rng([seed, epoch])

    # 1. classes end to end in a random order (by_rank), a uniform random order inside each class
    class_rank = rng.permutation(counts.size)
    grouped = _shuffle_within_classes(pool, pool_labels, counts, class_rank, rng)
    by_rank = np.argsort(class_rank)
    sizes = counts[by_rank]

    # 2. equal shard lengths (and whole batches with global_batch)
    share = dataset_counts[by_rank] / labels.size
    grouped, sizes = _adjust_length(grouped, sizes, share, num_shards, unit, remainder)

    # 3. and 4. deal every class round robin over the shards, each shard in stratified-time order
    return _deal_in_time_order(grouped, sizes, share, num_shards, rng)


def _deal_in_time_order(grouped: np.ndarray, sizes: np.ndarray, share: np.ndarray, n: int,
                        rng: np.random.Generator) -> list[np.ndarray]:
    """Steps 3 and 4 of the module docstring: ``grouped`` (class blocks of ``sizes``) dealt to ``n`` shards,
    each shard's samples in stratified-time order."""
    # 3. the shard of every position: table[class, j % n], j its rank inside the class
    n_classes = sizes.size
    index_type = np.int32 if max(grouped.size, n_classes) * max(n, 2) < 2**31 else np.int64
    residue = np.arange(grouped.size, dtype=index_type)
    residue -= np.repeat((np.cumsum(sizes) - sizes).astype(index_type), sizes)      # j
    cell = np.repeat(np.arange(n_classes, dtype=index_type) * n, sizes)              # class row start
    stratum = residue.copy()
    residue %= n
    stratum -= residue                                                               # n * (j // n)
    cell += residue                                                                  # class * n + j % n
    table = _deal_table(sizes, share, n, rng)
    shard_type = np.uint8 if n <= 256 else np.uint16 if n <= 65536 else np.int64
    shard = table.astype(shard_type).ravel()[cell]

    # 4. stratified time: round m = j // n of a class of Q = ceil(n_c / n) rounds holds the strata
    #    [m/Q, (m+1)/Q), split in n slots; residue j % n takes slot (j % n + offset_c) % n, offset_c random,
    #    at a uniform point inside it. A class's shards are thus staggered, evenly spaced on each shard,
    #    and no shard runs systematically ahead. Quantised to 16 bits: each shard is one radix sort.
    slot = (np.arange(n)[None, :] + rng.integers(n, size=(n_classes, 1))) % n
    stratum += slot.astype(index_type).ravel()[cell]
    scale = (65536.0 / np.maximum(n * -(-sizes // n), 1)).astype(np.float32)
    time = stratum.astype(np.float32)
    time += rng.random(grouped.size, dtype=np.float32)
    time *= np.repeat(scale, sizes)
    time = np.minimum(time, 65535, out=time).astype(np.uint16)
    by_shard = np.argsort(shard, kind="stable")                  # shards are of equal length
    grouped, time = np.split(grouped[by_shard], n), np.split(time[by_shard], n)
    return [g[np.argsort(t, kind="stable")].astype(np.int64) for g, t in zip(grouped, time)]
