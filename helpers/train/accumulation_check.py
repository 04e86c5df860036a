"""Numerical checks that gradient accumulation gives the big batch's gradient (chapter 02).

Each path's gradient is captured by an optimizer that stores it and leaves the weights, so all start from the
same weights: ``nn.TrainOneStepCell`` on the whole per-rank batch, ``AccumulatingTrainStep`` on K contiguous
micro-batches, and MindSpore's ``nn.GradAccumulationCell`` / ``parallel.nn.GradAccumulation``. A small net
without BatchNorm must match to float rounding; the course ResNet cannot (BatchNorm normalises each
micro-batch with its own statistics), and with its BatchNorm frozen must match again. The built-in cells sum
the K micro-batch mean losses; ``compare``'s ``ratio`` measures that factor.

``check_local`` runs everything in this process (one rank, the unit test); ``run_task`` is
``task="grad_check"`` of ``helpers.train.worker``, on every rank after ``init()``.
"""

from __future__ import annotations

import numpy as np

import mindspore as ms
from mindspore import nn, ops

BUILTIN_CELLS = ("nn.GradAccumulationCell", "parallel.nn.GradAccumulation")


class GlobalAvgPool(nn.Cell):
    """Mean over the spatial axes (H, W) of an NCHW tensor."""

    def construct(self, x):
        return ops.mean(x, (2, 3))


def small_net(num_classes: int = 10, width: int = 8) -> nn.Cell:
    """Conv-ReLU-Conv(stride 2)-ReLU-pool-Dense: a convnet with no BatchNorm (no batch statistics)."""
    return nn.SequentialCell([
        nn.Conv2d(3, width, 3, pad_mode="same", has_bias=True), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, pad_mode="same", has_bias=True), nn.ReLU(),
        GlobalAvgPool(), nn.Dense(2 * width, num_classes)])


class CaptureGrads(nn.Optimizer):
    """An 'optimizer' that stores the gradients it is given (after any reduction) and leaves the weights."""

    def __init__(self, params):
        super().__init__(0.0, params)
        self.captured = self._parameters.clone(prefix="captured", init="zeros")

    def construct(self, gradients):
        for c, g in zip(self.captured, gradients):
            ops.assign(c, g)
        return True

    def values(self) -> list[np.ndarray]:
        return [p.asnumpy().astype(np.float64) for p in self.captured]


def freeze_batchnorm(net) -> int:
    """Make every BatchNorm of ``net`` normalise with its running statistics, also in training mode
    (``use_batch_statistics=False``; the running statistics are then not updated). Returns how many."""
    from mindspore.nn.layer.normalization import _BatchNorm

    n = 0
    for _, cell in net.cells_and_names():
        if isinstance(cell, _BatchNorm):
            cell.use_batch_statistics = False
            n += 1
    return n


def _loss_cell(net):
    return nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))


def full_batch_grads(net, images, labels) -> list[np.ndarray]:
    """The gradient ``nn.TrainOneStepCell`` hands its optimizer for the whole batch (the reference)."""
    cap = CaptureGrads(net.trainable_params())
    step = nn.TrainOneStepCell(_loss_cell(net), cap)
    step.set_train()
    step(images, labels).asnumpy()
    return cap.values()


def accumulated_grads(net, images, labels, k: int, classes: tuple | None = None) -> list[np.ndarray]:
    """The gradient ``AccumulatingTrainStep`` (with ``classes``: a code cell's step) hands its optimizer after k
    contiguous micro-batches."""
    from helpers.train.grad_accumulation import AccumulatingTrainStep

    cap = CaptureGrads(net.trainable_params())
    step = AccumulatingTrainStep(_loss_cell(net), cap, k, classes)
    m = images.shape[0] // k
    step([(images[i * m:(i + 1) * m], labels[i * m:(i + 1) * m]) for i in range(k)])
    return cap.values()


def builtin_cell_grads(net, images, labels, k: int, which: str) -> list[np.ndarray]:
    """The gradient MindSpore's accumulation cell ``which`` (one of ``BUILTIN_CELLS``) hands its optimizer."""
    if which == "nn.GradAccumulationCell":
        wrapped = nn.GradAccumulationCell(_loss_cell(net), k)
    elif which == "parallel.nn.GradAccumulation":
        from mindspore.parallel.nn import GradAccumulation

        wrapped = GradAccumulation(_loss_cell(net), k)
    else:
        raise ValueError(f"which: one of {BUILTIN_CELLS} (got {which!r})")
    cap = CaptureGrads(net.trainable_params())
    step = nn.TrainOneStepCell(wrapped, cap)
    step.set_train()
    step(images, labels).asnumpy()
    return cap.values()


def compare(reference: list[np.ndarray], other: list[np.ndarray]) -> dict:
    """Max abs difference over every gradient element, relative to the largest reference element, and the
    projection ratio <other, ref> / <ref, ref> (1.0: same scale) with the cosine between them."""
    ref = np.concatenate([g.ravel() for g in reference])
    oth = np.concatenate([g.ravel() for g in other])
    diff = float(np.max(np.abs(ref - oth)))
    scale = float(np.max(np.abs(ref)))
    dot = float(ref @ oth)
    return {"max_abs_diff": diff, "max_abs_grad": scale,
            "max_rel_diff": diff / scale if scale else float("nan"),
            "ratio": dot / float(ref @ ref), "cosine": dot / float(np.linalg.norm(ref) * np.linalg.norm(oth)),
            "elements": int(ref.size)}


def check(build_bn_net, images, labels, k: int, seed: int = 1, builtin: bool = True,
          num_classes: int = 10, classes: tuple | None = None) -> dict:
    """Every comparison on one batch (numpy arrays, split into k micro-batches). ``build_bn_net()`` makes
    the ResNet (``None``: skip the BatchNorm check); the small net (``num_classes`` outputs: the same on
    every rank, whatever labels its batch holds) is built here; ``classes``: the accumulation step's
    (``step_classes``). Nets are built after
    ``ms.set_seed(seed)``, so every rank of a job starts from the same weights."""
    if images.shape[0] % k:
        raise ValueError(f"batch {images.shape[0]} is not divisible by accumulation_steps {k}")
    x, y = ms.Tensor(images.astype(np.float32)), ms.Tensor(labels.astype(np.int32))
    n = int(images.shape[0])
    out = {"accumulation_steps": int(k), "batch": n, "micro_batch": n // int(k)}

    ms.set_seed(seed)
    net = small_net(num_classes=num_classes)
    true = full_batch_grads(net, x, y)
    out["no_bn"] = compare(true, accumulated_grads(net, x, y, k, classes))
    out["builtin"] = {}
    if builtin:
        for which in BUILTIN_CELLS:
            try:
                out["builtin"][which] = compare(true, builtin_cell_grads(net, x, y, k, which))
            except Exception as exc:  # noqa: BLE001 - reported: what cannot run is part of the finding
                first_line = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                out["builtin"][which] = {"error": f"{type(exc).__name__}: {first_line}"}

    if build_bn_net is not None:
        ms.set_seed(seed)
        bn_net = build_bn_net()
        out["bn"] = compare(full_batch_grads(bn_net, x, y), accumulated_grads(bn_net, x, y, k, classes))
        # the same ResNet, same weights, BatchNorm frozen at the running statistics those 1 + k steps left
        out["bn_frozen_layers"] = freeze_batchnorm(bn_net)
        out["bn_frozen"] = compare(full_batch_grads(bn_net, x, y), accumulated_grads(bn_net, x, y, k, classes))
    return out


def check_local(images, labels, k: int, arch: str | None = "resnet18", width: float = 0.125,
                stem: str = "small", conv_impl: str = "native", num_classes: int = 10, seed: int = 1,
                builtin: bool = True) -> dict:
    """``check`` in this process, in GRAPH_MODE (one rank, no communication); restores the previous mode.
    ``arch=None`` skips the ResNet (BatchNorm) comparison."""
    from helpers.train.models import build_model

    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        build = None if arch is None else (lambda: build_model(arch, num_classes, width, stem, conv_impl))
        return check(build, images, labels, k, seed, builtin, num_classes)
    finally:
        ms.set_context(mode=previous)


def flat_summary(result: dict) -> dict:
    """The record a rank writes: plain keys for the notebook and tests."""
    rec = {
        "accumulation_steps": result["accumulation_steps"], "batch_per_rank": result["batch"],
        "micro_batch": result["micro_batch"],
        "grad_max_abs_diff_no_bn": result["no_bn"]["max_abs_diff"],
        "grad_max_rel_diff_no_bn": result["no_bn"]["max_rel_diff"],
        "grad_max_abs_no_bn": result["no_bn"]["max_abs_grad"],
    }
    if "bn" in result:
        bn = result["bn"]
        rec.update(grad_max_abs_diff_bn=bn["max_abs_diff"], grad_max_rel_diff_bn=bn["max_rel_diff"],
                   grad_max_abs_bn=bn["max_abs_grad"], grad_cosine_bn=bn["cosine"])
    if "bn_frozen" in result:
        fr = result["bn_frozen"]
        rec.update(grad_max_abs_diff_bn_frozen=fr["max_abs_diff"], grad_max_rel_diff_bn_frozen=fr["max_rel_diff"],
                   grad_max_abs_bn_frozen=fr["max_abs_grad"], grad_cosine_bn_frozen=fr["cosine"],
                   bn_frozen_layers=result["bn_frozen_layers"])
    for which, r in result["builtin"].items():
        key = which.replace("parallel.nn.", "parallel_").replace("nn.", "nn_")
        if "error" in r:
            rec[f"builtin_{key}_error"] = r["error"]
        else:
            rec[f"builtin_{key}_ratio"] = r["ratio"]
            rec[f"builtin_{key}_cosine"] = r["cosine"]
            rec[f"builtin_{key}_max_abs_diff"] = r["max_abs_diff"]
    return rec


def run_task(cfg, rank: int, world: int) -> dict:
    """``task="grad_check"``: every check on this rank's first per-rank batch of the real training data,
    in DATA_PARALLEL with mean reduction like a training job, without comm fusion: fusion packs the same
    gradients into fewer AllReduce calls and changes no value, and with it MindSpore 2.10 on CPU failed
    this check's ResNet-50 im2col graph ('Memory not enough' for a 2 KB gradient with 20 GB free)."""
    from mindspore import context
    from mindspore.context import ParallelMode

    from helpers.train.data import build_dataset
    from helpers.train.image_folder import scan_split
    from helpers.train.models import build_model

    context.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True, device_num=world)
    import mindspore.dataset as ds

    ds.config.set_seed(cfg.seed)
    num_classes = len(scan_split(cfg.data_dir, "train").classes)
    data = build_dataset(cfg, "train", rank, world, batch_size=cfg.batch_per_rank)
    images, labels = next(data.create_tuple_iterator(num_epochs=1, output_numpy=True))
    from helpers.train.grad_accumulation import step_classes

    impl = "native" if cfg.conv_impl == "auto" else cfg.conv_impl
    result = check(lambda: build_model(cfg.arch, num_classes, cfg.width, cfg.stem, impl), images, labels,
                   cfg.accumulation_steps, cfg.seed, num_classes=num_classes,
                   classes=step_classes(cfg.accumulation_code))
    return {**flat_summary(result), "world": world, "conv_impl": impl, "arch": cfg.arch}
