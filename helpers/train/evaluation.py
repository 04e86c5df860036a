"""Held-out accuracy of a rank's network, summed over the ranks, with progress records the watchdog reads."""

from __future__ import annotations

import time

import numpy as np

from helpers.core.config import JobConfig


class _SumOverRanks:
    """Sums small host arrays over all ranks with one AllReduce (used for held-out accuracy)."""

    def __init__(self):
        from mindspore import ops

        self._op = ops.AllReduce()

    def __call__(self, values):
        import mindspore as ms

        return self._op(ms.Tensor(np.asarray(values, dtype=np.float32))).asnumpy()


EVAL_BATCH_FACTOR = 4   # inference keeps no activations for a backward pass: 4x the training batch fits where it fits


EVAL_EVENT = "evaluating"   # a progress record during evaluation: the watchdog gives it the compile allowance
EVAL_BEAT_S = 5.0          # at most one such record per this many seconds of evaluation
SLOW_EVAL_S = 2.0          # fail_mode "slow_eval": the pause per evaluation batch on fail_rank (a long validation)


def evaluate(cfg: JobConfig, net, rank: int, world: int, batch_stats: bool = False, out=None) -> float:
    """Top-1 accuracy on the held-out split, each rank on its shard, summed over ranks (``batch_stats``: BatchNorm
    normalising by each batch, padded with copies of its own rows, instead of its running statistics: a diagnostic).

    One inference graph in GRAPH_MODE on batches of ``EVAL_BATCH_FACTOR`` x the per-rank batch, the last one
    padded to the same shape (padding rows are not counted): one compilation, few launches. Measured in
    chapter 01's ci jobs (45 images per rank): evaluation plus the last 3 steps went from ~19 s to ~5 s
    against PyNative on training-size batches, which paid the per-operator dispatch cost of the whole ResNet
    once per batch. With ``out``, it records ``evaluating`` as it starts and then every ``EVAL_BEAT_S``: on a card
    the steps are sub-second and an ImageNet evaluation takes minutes, which the watchdog would otherwise call a
    hang (``helpers.job.stall``)."""
    from helpers.train.data import build_dataset

    import mindspore as ms

    size = EVAL_BATCH_FACTOR * cfg.batch_per_rank
    val = build_dataset(cfg, "val", rank, world, batch_size=size, drop_remainder=False)
    net.set_train(batch_stats)
    correct = total = 0
    beat = _EvalBeat(out)
    for images, labels in val.create_tuple_iterator(num_epochs=1, output_numpy=True):
        beat(total)
        _maybe_fail_eval(cfg, rank)
        n = len(labels)
        if n < size:
            pad = np.resize(images, (size,) + images.shape[1:])[n:] if batch_stats else np.zeros_like(images[:1])
            images = np.concatenate([images, np.resize(pad, (size - n,) + images.shape[1:])])
        pred = net(ms.Tensor(images)).asnumpy()[:n].argmax(axis=1)
        correct += int((pred == labels).sum())
        total += n
    net.set_train(True)
    c, t = _SumOverRanks()([correct, total]) if world > 1 else (correct, total)
    return float(c / max(t, 1))


class _EvalBeat:
    """Writes an ``evaluating`` record (images done so far) on its first call and then at most every ``EVAL_BEAT_S``."""

    def __init__(self, out):
        self.out, self.last = out, None

    def __call__(self, images_done: int) -> None:
        now = time.monotonic()
        if self.out is not None and (self.last is None or now - self.last >= EVAL_BEAT_S):
            self.out.write(EVAL_EVENT, images=images_done)
            self.last = now


def _maybe_fail_eval(cfg: JobConfig, rank: int) -> None:
    """The evaluation faults the fault tests inject on ``fail_rank``: a pause per batch, or a loop that never ends."""
    if cfg.fail_rank != rank or cfg.fail_mode not in ("slow_eval", "eval_hang"):
        return
    while True:
        time.sleep(SLOW_EVAL_S)
        if cfg.fail_mode == "slow_eval":
            return
