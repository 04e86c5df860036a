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
    import mindspore as ms

    for c, (m, v) in zip(cells, values):
        c.moving_mean.copy_(ms.Tensor(np.asarray(m, np.float32)))
        c.moving_variance.copy_(ms.Tensor(np.asarray(v, np.float32)))


def forward_statistics(net, batches) -> list[tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]]:
    """Training-mode forward passes of ``batches`` (image arrays or Tensors; no gradient, no optimizer): per batch,
    its logits and every BatchNorm layer's (mean, variance) of that batch (variance unbiased within the batch, as
    BatchNorm stores it). Read from the running statistics, zeroed once first: after a batch they hold
    ``(1 - w) x before + w x batch``. The running statistics and the train flag are restored."""
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


def pooled_statistics(per_batch: list, reduce=None, world: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer, the (mean, variance) of every batch of every rank pooled: the batches' mean, and the mean of
    their variances plus the variance of their means (equal-size batches). ``per_batch[b][layer] = (mean, var)``
    on this rank; ``reduce(vector)`` sums a vector over the ranks (None: one rank)."""
    reduce = reduce or (lambda v: v)
    k = len(per_batch) * world
    layers = list(zip(*per_batch))          # layer -> its (mean, var) of each batch
    means = _split(reduce(_flat([sum(m for m, _ in layer) for layer in layers])) / k, [ly[0][0] for ly in layers])
    second = reduce(_flat([sum(v + (m - mu) ** 2 for m, v in layer) for layer, mu in zip(layers, means)])) / k
    return list(zip(means, _split(second, means)))


def recalibrate(net, batches, reduce=None, world: int = 1) -> int:
    """Precise BN: every BatchNorm layer's running statistics set to those of ``batches`` (image arrays, training
    size) on every rank pooled (``pooled_statistics``), from training-mode forward passes with no optimizer step;
    every rank ends with the same statistics. Returns the images used on this rank."""
    per_batch = [stats for _, stats in forward_statistics(net, batches)]
    _put(bn_cells(net), pooled_statistics(per_batch, reduce, world))
    return int(sum(len(b) for b in batches))


def rank_spread(stats, reduce=None, world: int = 1) -> dict:
    """How far apart the ranks' batch statistics are (``stats``: this rank's per-layer (mean, var) of one batch).
    Per layer: the std over ranks of a channel's batch mean, in units of the channel's std over all ranks' images
    pooled, averaged over channels (0: every rank normalises by the same centre); and this rank's ``z`` (its
    channel means minus the ranks' mean, in the same units) for ``FIGURE_LAYER``'s first ``FIGURE_CHANNELS``."""
    reduce = reduce or (lambda v: v)
    means = [m for m, _ in stats]
    centre = _split(reduce(_flat(means)) / world, means)
    spread = _split(reduce(_flat([(m - c) ** 2 for m, c in zip(means, centre)] + [v for _, v in stats])) / world,
                    means + means)
    between, within = spread[:len(means)], spread[len(means):]
    scale = [np.sqrt(np.maximum(b + w, 1e-12)) for b, w in zip(between, within)]
    layers = [float(np.mean(np.sqrt(b) / s)) for b, s in zip(between, scale)]
    z = (means[FIGURE_LAYER] - centre[FIGURE_LAYER]) / scale[FIGURE_LAYER]
    return {"layers": layers, "z": [float(x) for x in z[:FIGURE_CHANNELS]]}


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
