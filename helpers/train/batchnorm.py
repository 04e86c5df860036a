"""BatchNorm statistics on a rank: a batch's own, precise BN (running statistics recomputed from training batches,
pooled over the ranks) and how far apart the ranks' batch statistics are."""

from __future__ import annotations

import numpy as np

FIGURE_LAYER = -1        # the BatchNorm layer whose per-rank means the chapter draws: the network's last
FIGURE_CHANNELS = 16     # at most this many of its channels


def bn_cells(net) -> list:
    """The network's BatchNorm cells, in definition order."""
    from mindspore import nn

    return [c for _, c in net.cells_and_names() if isinstance(c, (nn.BatchNorm1d, nn.BatchNorm2d))]


def _new_weight(cell) -> float:
    """The weight of the batch's value in a running-statistics update. ``nn.BatchNorm2d(momentum=0.9)`` keeps
    ``0.9 x old + 0.1 x batch`` (MindSpore's momentum weighs the old value) and stores ``cell.momentum = 0.1``."""
    return float(cell.momentum)


def _put(cells, values) -> None:
    """``values[i] = (mean, variance)`` into cell i's running statistics, copied into their memory (the compiled
    graphs read it; as ``helpers.train.phases.load_state``)."""
    from helpers.train.phases import write_param

    for c, (m, v) in zip(cells, values):
        write_param(c.moving_mean, np.asarray(m, np.float32))
        write_param(c.moving_variance, np.asarray(v, np.float32))


def forward_statistics(net, batches, restore: bool = True) -> list[tuple[np.ndarray, list]]:
    """Training-mode forward passes of ``batches`` (image arrays or Tensors; no gradient, no optimizer): per batch,
    its logits and every BatchNorm layer's (mean, variance) of that batch (variance unbiased within the batch, as
    BatchNorm stores it). Read from the running statistics, zeroed once first: after a batch they hold
    ``(1 - w) x before + w x batch``. The train flag is restored, and the running statistics unless ``restore``
    is False (the caller writes its own: each write is one copy per parameter, slow on a loaded CPU)."""
    import mindspore as ms

    cells = bn_cells(net)
    kept = [(c.moving_mean.asnumpy().copy(), c.moving_variance.asnumpy().copy()) for c in cells]
    before = [(np.zeros_like(m, np.float64), np.zeros_like(v, np.float64)) for m, v in kept]
    _put(cells, before)
    was, out = net.training, []
    net.set_train(True)
    try:
        for images in batches:
            logits = net(images if isinstance(images, ms.Tensor) else ms.Tensor(images)).asnumpy()
            now = [(c.moving_mean.asnumpy().astype(np.float64), c.moving_variance.asnumpy().astype(np.float64))
                   for c in cells]
            w = [_new_weight(c) for c in cells]
            out.append((logits, [((m - (1 - k) * m0) / k, (v - (1 - k) * v0) / k)
                                 for (m, v), (m0, v0), k in zip(now, before, w)]))
            before = now
    finally:
        if restore:
            _put(cells, kept)
        net.set_train(was)
    return out


def _flat(arrays) -> np.ndarray:
    return np.concatenate([np.ravel(a) for a in arrays]).astype(np.float64)


def _split(flat: np.ndarray, like) -> list[np.ndarray]:
    out, i = [], 0
    for a in like:
        out.append(flat[i:i + np.size(a)])
        i += np.size(a)
    return out


def _moments(sets: list, reduce=None, world: int = 1) -> list[tuple[list, list, list]]:
    """Per set of batches (``sets[i][b][layer] = (mean, var)`` on this rank), per layer over every rank's batches:
    the batches' mean, the variance of their means and the mean of their variances. Two AllReduces for all sets
    (``reduce(vector)`` sums a vector over the ranks; None: one rank)."""
    reduce = reduce or (lambda v: v)
    layers = [list(zip(*batches)) for batches in sets]       # set -> layer -> (mean, var) of each batch
    like = [ly[0][0] for layer_list in layers for ly in layer_list]
    counts = [len(batches) * world for batches in sets]
    sums = _split(reduce(_flat([sum(m for m, _ in ly) for layer_list in layers for ly in layer_list])), like)
    centre, i = [], 0
    for layer_list, k in zip(layers, counts):
        centre.append([x / k for x in sums[i:i + len(layer_list)]])
        i += len(layer_list)
    parts = [sum((m - c) ** 2 for m, _ in ly) for layer_list, cs in zip(layers, centre) for ly, c in zip(layer_list, cs)]
    parts += [sum(v for _, v in ly) for layer_list in layers for ly in layer_list]
    second = _split(reduce(_flat(parts)), like + like)
    out, i, n = [], 0, len(like)
    for layer_list, cs, k in zip(layers, centre, counts):
        j = i + len(layer_list)
        out.append((cs, [x / k for x in second[i:j]], [x / k for x in second[n + i:n + j]]))
        i = j
    return out


def pooled_statistics(per_batch: list, reduce=None, world: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer, the (mean, variance) of every batch of every rank pooled: the batches' mean, and the mean of
    their variances plus the variance of their means (equal-size batches). ``per_batch[b][layer] = (mean, var)``
    on this rank; ``reduce(vector)`` sums a vector over the ranks (None: one rank)."""
    ((centre, between, within),) = _moments([per_batch], reduce, world)
    return [(c, w + b) for c, b, w in zip(centre, between, within)]


def _spread(stats, centre, between, within) -> dict:
    scale = [np.sqrt(np.maximum(b + w, 1e-12)) for b, w in zip(between, within)]
    z = (stats[FIGURE_LAYER][0] - centre[FIGURE_LAYER]) / scale[FIGURE_LAYER]
    return {"layers": [float(np.mean(np.sqrt(b) / s)) for b, s in zip(between, scale)],
            "z": [float(x) for x in z[:FIGURE_CHANNELS]]}


def rank_spread(stats, reduce=None, world: int = 1) -> dict:
    """How far apart the ranks' batch statistics are (``stats``: this rank's per-layer (mean, var) of one batch).
    Per layer: the std over ranks of a channel's batch mean, in units of the channel's std over all ranks' images
    pooled, averaged over channels (0: every rank normalises by the same centre); and this rank's ``z`` (its
    channel means minus the ranks' mean, in the same units) for ``FIGURE_LAYER``'s first ``FIGURE_CHANNELS``."""
    ((centre, between, within),) = _moments([[stats]], reduce, world)
    return _spread(stats, centre, between, within)


def recalibrate(net, batches, reduce=None, world: int = 1, probe=None) -> dict:
    """Precise BN: every BatchNorm layer's running statistics set to those of ``batches`` (image arrays, training
    size) on every rank pooled (``pooled_statistics``), from training-mode forward passes with no optimizer step;
    every rank ends with the same statistics. With ``probe`` (one more batch, passed first) also its logits with
    its own batch statistics and ``rank_spread``, in the same two AllReduces. Returns ``images`` (this rank's
    recalibration images) and, with a probe, ``logits`` and ``spread``."""
    passes = forward_statistics(net, ([] if probe is None else [probe]) + list(batches), restore=False)
    own = passes.pop(0) if probe is not None else None
    sets = [[stats for _, stats in passes]] + ([[own[1]]] if own else [])
    moments = _moments(sets, reduce, world)
    _put(bn_cells(net), [(c, w + b) for c, b, w in zip(*moments[0])])
    out = {"images": int(sum(len(b) for b in batches))}
    if own:
        out.update(logits=own[0], spread=_spread(own[1], *moments[1]))
    return out


def cross_entropy(logits, labels) -> float:
    """Mean softmax cross-entropy of ``logits`` (images x classes) against integer ``labels``."""
    x = np.asarray(logits, np.float64)
    x = x - x.max(axis=1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(x)), np.asarray(labels, np.int64)].mean())


def sync_batchnorm_error() -> str | None:
    """What ``nn.SyncBatchNorm(4)`` raises here (after ``init()``, more than one rank), or None if it builds.
    Built only: on CPU MindSpore names a group only for Ascend/GPU and refuses at once."""
    from mindspore import nn

    try:
        nn.SyncBatchNorm(4)
    except Exception as exc:                  # the error text is the record
        return f"{type(exc).__name__}: {exc}"
    return None
