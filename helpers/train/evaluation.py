"""Held-out accuracy of a rank's network, summed over the ranks, with progress records the watchdog reads; before it,
precise BN and the per-rank BatchNorm probe (``judge``)."""

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
    beat(total, last=True)     # this rank's shard is done: a rank still evaluating is now the one the sum waits for
    net.set_train(True)
    c, t = _SumOverRanks()([correct, total]) if world > 1 else (correct, total)
    return float(c / max(t, 1))


class _EvalBeat:
    """Writes an ``evaluating`` record (images done so far) on its first call, then at most every ``EVAL_BEAT_S``, and
    on the ``last`` call."""

    def __init__(self, out):
        self.out, self.last = out, None

    def __call__(self, images_done: int, last: bool = False) -> None:
        now = time.monotonic()
        if self.out is not None and (last or self.last is None or now - self.last >= EVAL_BEAT_S):
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


def calibration_batches(cfg: JobConfig, rank: int, world: int) -> list[np.ndarray]:
    """This rank's first ``cfg.bn_recalibration_batches`` training batches (images) under
    ``DistributedSampler(shuffle=True)`` and the config's seed: random images of the train split whatever sampler
    trained, the same for every phase. Read before the first step (the watchdog allows slow work only there)."""
    from helpers.train.data import build_dataset

    if not cfg.bn_recalibration_batches:
        return []
    run = cfg.replace(sampler="distributed_shuffle", sampler_code="", phase_samplers=(), phase_seeds=())
    data = build_dataset(run, "train", rank, world, batch_size=cfg.micro_batch_size)
    it = data.create_tuple_iterator(num_epochs=1, output_numpy=True)
    batches = [images for (images, _), _ in zip(it, range(cfg.bn_recalibration_batches))]
    it.stop()
    return batches


def judge(cfg: JobConfig, net, rank: int, world: int, out=None, calibration=(), upcoming=None) -> dict:
    """A trained network's closing figures: with ``upcoming`` (the iterator it trained from) the BatchNorm probe of
    the rank's next batch (its loss with the rank's own batch statistics, as in training, and ``rank_spread``);
    precise BN over ``calibration`` (every rank the same statistics) in the same forward passes and AllReduces;
    the probe's loss with those shared statistics; then held-out ``accuracy``."""
    from helpers.train.batchnorm import cross_entropy, forward_statistics, rank_spread, recalibrate

    _EvalBeat(out)(0)     # the first training-mode forward compiles a graph: the watchdog's allowance starts here
    reduce = _SumOverRanks() if world > 1 else None
    images, labels = (t.asnumpy() for t in next(upcoming)) if upcoming else (None, None)
    if calibration:
        done = recalibrate(net, calibration, reduce, world, probe=images)
    elif upcoming:
        (logits, stats), = forward_statistics(net, [images])
        done = {"images": 0, "logits": logits, "spread": rank_spread(stats, reduce, world)}
    else:
        done = {"images": 0}
    closing = {"bn_recalibration_images": done["images"]}
    if upcoming:
        shared = _infer(net, images, EVAL_BATCH_FACTOR * cfg.batch_per_rank)
        closing["bn_probe"] = dict(loss_own=cross_entropy(done["logits"], labels),
                                   loss_shared=cross_entropy(shared, labels), shared_statistics=bool(calibration),
                                   **done["spread"])
    return dict(accuracy=evaluate(cfg, net, rank, world, out=out), **closing)


def _infer(net, images: np.ndarray, size: int) -> np.ndarray:
    """Logits of ``images`` in inference mode, padded with zero images to ``size`` (the evaluation graph's shape)."""
    import mindspore as ms

    n = len(images)
    padded = np.concatenate([images, np.zeros((size - n,) + images.shape[1:], images.dtype)]) if n < size else images
    net.set_train(False)
    try:
        return net(ms.Tensor(padded)).asnumpy()[:n]
    finally:
        net.set_train(True)
