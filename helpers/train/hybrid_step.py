"""The train step of a hybrid (data x model) parallel job, built on each rank from the strategy file.

- **CPU** (``SEMI_AUTO_PARALLEL`` is refused there): explicit collectives. The backbone is data parallel over
  all ranks; ``fc`` is cut per the file's layout (``helpers.train.hybrid_classifier.cut_classifier``), so rank
  ``(d, m)`` of a ``[dp, mp]`` device matrix holds class-row block ``m``. Features and logit slices are
  gathered inside each model-parallel group by ``AllReduce(SUM, group)`` of a zero-padded block (on CPU
  ``AllGather`` works on the world group only). The gradients are reduced so the update equals single-process
  training on the global batch: backbone ``AllReduce(SUM, world) / world``, classifier slice
  ``AllReduce(SUM, ranks holding the slice) / world``.
- **GPU/Ascend**: ``semi_auto_plan`` gives ``set_auto_parallel_context`` keywords (``SEMI_AUTO_PARALLEL`` with
  ``strategy_ckpt_config`` loading the same file) and the classifier's ``shard()`` strategies;
  ``build_semi_auto_step`` applies them to a full network.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from helpers.core.errors import ConfigError
from helpers.train.hybrid_classifier import (build_full_net, classifier_layout, cut_classifier, load_full_checkpoint,
                                             load_rank_checkpoint, ordered_params)
from helpers.train.strategy_file import (classifier_bias_strategy, classifier_shard_strategy, read_strategy,
                                         semi_auto_context, shard_classifier, validate_strategy)
from helpers.train.strategy_layout import Layout

TRACE_ENV = "HYBRID_TRACE_DIR"   # set by helpers.topics.hybrid.hybrid_config: each rank writes a StepTrace there


def _loss_cell_class():
    """``HybridLoss``, defined lazily so importing this module does not import MindSpore."""
    from mindspore import nn, ops

    class HybridLoss(nn.Cell):
        """Per-rank loss of the hybrid layout: backbone on my micro-batch, classifier slice over my group."""

        def __init__(self, net, layout: Layout, rank: int, mp_group: str | None, batch: int):
            super().__init__(auto_prefix=False)
            self.net = net
            self.mp = layout.mp
            self.m = layout.coords(rank)[1]
            self.batch = batch
            self.c_local = int(net.fc.weight.shape[0])
            self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
            if self.mp > 1:
                self.gather_features = ops.AllReduce(ops.ReduceOp.SUM, group=mp_group)
                self.gather_logits = ops.AllReduce(ops.ReduceOp.SUM, group=mp_group)

        def construct(self, x, y):
            f = self.net.features(x)
            if self.mp == 1:
                return self.ce(self.net.fc(f), y)
            b, m, mp, c = self.batch, self.m, self.mp, self.c_local
            # gather the group's features: my block at rows m*b.., zeros elsewhere, summed over the group
            fg = self.gather_features(ops.pad(f, (0, 0, m * b, (mp - 1 - m) * b)))
            part = self.net.fc(fg)                                    # (mp*b, classes/mp): my class slice
            logits = self.gather_logits(ops.pad(part, (m * c, (mp - 1 - m) * c)))   # (mp*b, classes)
            return self.ce(logits[m * b:(m + 1) * b], y)

    return HybridLoss


def _train_step_class():
    """``HybridTrainStep``, defined lazily like ``HybridLoss``."""
    import mindspore as ms
    from mindspore import nn

    class HybridTrainStep(nn.Cell):
        """Gradient of the per-rank loss, reduced as the module docstring says, then the optimizer."""

        def __init__(self, loss_net, optimizer, n_backbone: int, world: int, dp: int, dp_group: str | None,
                     trace=None):
            super().__init__(auto_prefix=False)
            self.trace = trace      # PyNative only: a host-side callable run after each update (StepTrace)
            self.loss_net = loss_net
            self.optimizer = optimizer
            self.weights = optimizer.parameters
            # one forward for the loss and the gradients: the gathers run once per step, in one order
            self.value_and_grad = ms.value_and_grad(loss_net, grad_position=None, weights=self.weights)
            self.n = n_backbone
            # backbone: AllReduce(SUM) over the world, times 1/world (fused by the context's comm_fusion)
            self.reduce_backbone = nn.DistributedGradReducer(self.weights[:n_backbone], mean=True, degree=world)
            self.dp = dp
            if dp > 1:   # classifier slice: AllReduce(SUM) over the ranks holding it, times 1/world
                self.reduce_fc = nn.DistributedGradReducer(self.weights[n_backbone:], mean=True, degree=world,
                                                           fusion_type=2, group=dp_group)
            self.scale = ms.Tensor(1.0 / world, ms.float32)

        def construct(self, x, y):
            loss, grads = self.value_and_grad(x, y)
            back = self.reduce_backbone(grads[:self.n])
            if self.dp > 1:
                fc = self.reduce_fc(grads[self.n:])
            else:
                fc = (grads[self.n] * self.scale, grads[self.n + 1] * self.scale)
            self.optimizer(back + fc)
            if self.trace is not None:
                self.trace()
            return loss

    return HybridTrainStep


def build_hybrid_step(cfg, num_classes: int, rank: int, world: int):
    """``(net, train step)`` for ``cfg.strategy_file`` (the worker's hook). CPU: explicit collectives;
    GPU/Ascend: ``SEMI_AUTO_PARALLEL`` (``build_semi_auto_step``)."""
    if cfg.device_target != "CPU":
        return build_semi_auto_step(cfg, num_classes)
    from mindspore import nn
    from mindspore.communication import create_group

    import mindspore as ms

    # PyNative: each step's gradient was checked against the single-process reference at the same weights
    # (<= 1e-6 per rank, see helpers.topics.hybrid_reference). GRAPH_MODE (HYBRID_MODE=graph) was measured with
    # per-rank losses ~0.1 off from step 2 in a free-running comparison and has not been checked step by step.
    graph = os.environ.get("HYBRID_MODE") == "graph"
    trace_dir = os.environ.get(TRACE_ENV)
    if graph and trace_dir:
        raise ConfigError(f"{TRACE_ENV}: the step trace runs host code inside the step, PyNative only")
    ms.set_context(mode=ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE)
    net = build_full_net(cfg, num_classes)
    strategy = validate_strategy(cfg.strategy_file, net, world)
    layout = classifier_layout(strategy, world)
    cut_classifier(net, strategy, rank)
    mp_group = dp_group = None
    if layout.mp > 1:
        mp_group = f"hybrid_mp_{layout.coords(rank)[0]}"
        create_group(mp_group, list(layout.mp_group(rank)))
    if layout.dp > 1 and layout.mp > 1:
        dp_group = f"hybrid_dp_{layout.coords(rank)[1]}"
        create_group(dp_group, list(layout.dp_group(rank)))
    elif layout.dp > 1:
        from mindspore.communication import GlobalComm

        dp_group = GlobalComm.WORLD_COMM_GROUP
    if getattr(cfg, "init_checkpoint", None):
        load_rank_checkpoint(net, cfg.init_checkpoint, rank)
    back, fc = ordered_params(net)
    opt = nn.Momentum(back + fc, cfg.lr, cfg.momentum, weight_decay=cfg.weight_decay)
    loss_net = _loss_cell_class()(net, layout, rank, mp_group, cfg.micro_batch_size)
    trace = StepTrace(trace_dir, rank, back + fc) if trace_dir else None
    step = _train_step_class()(loss_net, opt, len(back), world, layout.dp, dp_group, trace)
    step.set_train()
    return net, step


class StepTrace:
    """This rank's trainable parameters before the first step and after every update:
    ``<trace_dir>/rank_<r>/step_<s>.npz`` (``s`` = updates done). ``reference_train(follow=...)`` reads them."""

    def __init__(self, trace_dir, rank: int, params):
        self.dir = Path(trace_dir) / f"rank_{rank}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.params = list(params)
        self.done = 0
        self.save()

    def save(self) -> Path:
        path = self.dir / f"step_{self.done}.npz"
        np.savez(path, **{p.name: p.asnumpy() for p in self.params})
        return path

    def __call__(self) -> None:
        self.done += 1
        self.save()


def semi_auto_plan(cfg) -> dict:
    """What the GPU/Ascend path does with ``cfg.strategy_file``: ``context`` (keywords for
    ``mindspore.set_auto_parallel_context``, loading the file) and the classifier's ``shard()`` strategies."""
    if not cfg.strategy_file:
        raise ConfigError("strategy_file: the semi-auto path needs a strategy file")
    layout = classifier_layout(read_strategy(cfg.strategy_file), cfg.world_size)
    return {"layout": layout.name,
            "context": semi_auto_context(layout, cfg.strategy_file, mode="load"),
            "matmul_in_strategy": classifier_shard_strategy(layout),
            "bias_add_in_strategy": classifier_bias_strategy(layout)}


def build_semi_auto_step(cfg, num_classes: int):
    """GPU/Ascend: MindSpore splits the classifier itself (``shard()``), loading the strategy file; the step
    is the preset's recipe (``helpers.train.recipe``). ``init_checkpoint`` is a full checkpoint file (e.g.
    ``merge_rank_checkpoints``'s output), loaded into the unsplit network; compiling cuts each rank's slice.
    ``HYBRID_TRACE_DIR`` is refused (a compiled step runs no host code between updates)."""
    # Cutting at compile: the compiler calls _slice_parameter (mindspore/parallel/_utils.py) for every
    # parameter, which slices data already loaded (has_init False) with _load_tensor_by_layout. Per-rank slice
    # files would have to be loaded after compiling (MindSpore's "Model Transformation" tutorial), i.e. after
    # a first batch.
    import mindspore as ms

    from helpers.train.recipe import build_loss, build_optimizer, build_train_step

    if os.environ.get(TRACE_ENV):
        raise ConfigError(f"{TRACE_ENV}: the step trace runs host code after every update, which a compiled "
                          "SEMI_AUTO_PARALLEL step on GPU/Ascend cannot; trace on the CPU path")
    plan = semi_auto_plan(cfg)
    ms.set_auto_parallel_context(**plan["context"])
    net = build_full_net(cfg, num_classes)
    if cfg.init_checkpoint:
        load_full_checkpoint(net, cfg.init_checkpoint)
    shard_classifier(net.fc, Layout.parse(plan["layout"]))
    step = build_train_step(cfg, net, build_loss(cfg), build_optimizer(cfg, net.trainable_params()))
    return net, step
