"""Chapter 00's proof that the ranks averaged their gradients, not only stayed in step: one process redoes update 1.

Identical weights on every rank show that the ranks applied the same update; a *sum* of the gradients would pass
that check too. So a fresh process starts from the seed's weights, computes each rank's gradient on the batch that
rank read first (BatchNorm on that batch alone, as on the rank), and applies one momentum step with their mean and
one with their sum; the weights rank 0 saved after its first update must be the first and not the second.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers.core.fresh_python import call_fresh
from helpers.core.metrics import metrics_path, read_records

WEIGHTS_AFTER_STEP_1 = "weights_after_step_1.npy"   # in the cell job's run folder: rank 0's weights after update 1
AVERAGED_BELOW = 1e-3    # |ranks - mean update| / |mean update| on CPU: GRAPH ranks against one process (measured 4e-6)
CARD_AVERAGED_BELOW = 5e-2   # on a card (TF32/HF32 matmuls; not measured here): still far below the sum's n - 1


def first_records(run_dir, world: int) -> list[dict]:
    """Each rank's first step record (its loss and the labels it read)."""
    return [next(x for x in read_records(metrics_path(run_dir, r)) if x["event"] == "step") for r in range(world)]


def momentum_step(w0: np.ndarray, grads: list[np.ndarray], lr: float, combine: str) -> np.ndarray:
    """The first update of ``nn.Momentum`` (its velocity starts at 0, so it is plain SGD) with the ranks'
    gradients combined by ``combine``: ``"mean"`` or ``"sum"``."""
    g = np.mean(grads, axis=0) if combine == "mean" else np.sum(grads, axis=0)
    return w0 - lr * g


def flat(tensors) -> np.ndarray:
    """MindSpore tensors (or parameters) as one float64 vector, in their order."""
    return np.concatenate([t.asnumpy().ravel() for t in tensors]).astype(np.float64)


def redo_first_update(run_dir: str) -> dict:
    """In this process: the seed's weights, every rank's first-batch gradient, both updates, the comparison."""
    import mindspore as ms
    from mindspore import nn

    from helpers.core.config import JobConfig
    from helpers.train.data import build_dataset
    from helpers.train.image_folder import scan_split
    from helpers.train.models import build_model

    cfg = JobConfig.load(Path(run_dir) / "config.json")
    ms.set_context(mode=ms.GRAPH_MODE)                 # one compile, then 8 fast calls (PyNative: twice as long)
    ms.set_device(cfg.device_target)                   # the job's device; it is free again after the job
    ms.set_seed(cfg.seed)                              # the cell's order: seed, data, model
    batches = [next(build_dataset(cfg, "train", r, cfg.world_size).create_tuple_iterator(num_epochs=1))
               for r in range(cfg.world_size)]
    net = build_model(cfg.arch, len(scan_split(cfg.data_dir).classes), cfg.width, cfg.stem, cfg.conv_impl)
    net.set_train()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    params = net.trainable_params()

    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.jit(ms.value_and_grad(forward, None, params))
    w0 = flat(params)
    losses, grads = [], []
    for x, y in batches:
        loss, g = grad_fn(x, y)
        losses.append(float(loss.asnumpy()))
        grads.append(flat(g))
    recs = first_records(run_dir, cfg.world_size)
    ranks = np.load(Path(run_dir) / WEIGHTS_AFTER_STEP_1).astype(np.float64)
    mean, total = momentum_step(w0, grads, cfg.lr, "mean"), momentum_step(w0, grads, cfg.lr, "sum")
    step = np.linalg.norm(mean - w0)
    worst = worst_parameter([p.name for p in params], [p.size for p in params], ranks, mean, w0)
    return dict(same_batches=all(y.asnumpy().tolist() == r["labels"] for (_, y), r in zip(batches, recs)),
                first_loss_diff=float(max(abs(a - r["loss"]) for a, r in zip(losses, recs))),
                vs_mean=float(np.linalg.norm(ranks - mean) / step), vs_sum=float(np.linalg.norm(ranks - total) / step),
                worst_parameter=worst[0], worst_parameter_vs_mean=worst[1])


def worst_parameter(names, sizes, ranks, mean, w0) -> tuple[str, float]:
    """The parameter whose update is furthest from its mean-gradient update, and that distance in units of its
    own update: a whole-model figure can hide one layer that received another's gradient."""
    edges = np.cumsum([0, *sizes])
    gaps = [float(np.linalg.norm(ranks[a:b] - mean[a:b]) / max(np.linalg.norm(mean[a:b] - w0[a:b]), 1e-30))
            for a, b in zip(edges[:-1], edges[1:])]
    i = int(np.argmax(gaps))
    return names[i], gaps[i]


def averaged_below(device_target: str) -> float:
    """The largest distance from the mean update (in update sizes) that still counts as averaged on the device."""
    return AVERAGED_BELOW if device_target == "CPU" else CARD_AVERAGED_BELOW


def first_update_check(run_dir) -> dict:
    """``redo_first_update`` in a fresh interpreter (the notebook's MindSpore state untouched), plus the verdict
    ``averaged``: the ranks' weights are the mean update's to float rounding and far from the sum's. Without the
    weights rank 0 saves after update 1 (an edited cell), ``{"skipped": why}``."""
    if not (Path(run_dir) / WEIGHTS_AFTER_STEP_1).is_file():
        return {"skipped": f"the cell did not save {WEIGHTS_AFTER_STEP_1} on rank 0 after its first update"}
    from helpers.core.config import JobConfig

    limit = averaged_below(JobConfig.load(Path(run_dir) / "config.json").device_target)
    out = call_fresh("helpers.topics.averaging:redo_first_update", str(run_dir))
    out["averaged_below"] = limit
    out["averaged"] = bool(out["same_batches"] and out["vs_mean"] < limit < out["vs_sum"])
    return out
