"""The training recipe a config asks for: loss, learning-rate schedule, optimizer groups and the step cell.

One place builds them for the data-parallel worker and the GPU/Ascend hybrid path, so the ``gpu8`` preset's
published ResNet-50 recipe (``helpers.core.config.PRESETS``) is what every chapter trains with. MindSpore is
imported inside the functions: the schedule and the step-output reader stay importable without it.
"""

from __future__ import annotations

import numpy as np

FIXED_LOSS_SCALE = 128.0
# 1024 to start, the loss scale MindSpore's model-zoo image-classification configs use; 2**16 overflowed float16 on every step of a
# 2-step rehearsal (nothing was ever applied), the default 2**24 would skip ~14 steps before the first update.
DYNAMIC_LOSS_SCALE = dict(init_loss_scale=2.0**10, scale_factor=2, scale_window=2000)


def lr_per_step(cfg) -> list[float]:
    """One learning rate per step: linear warm-up over ``warmup_fraction`` of the steps, then constant or
    cosine decay to 0 (MindSpore's ``nn.warmup_lr`` / ``nn.cosine_decay_lr`` with one step per "epoch")."""
    from mindspore import nn

    peak, steps = cfg.scaled_lr, cfg.steps
    warm = int(round(cfg.warmup_fraction * steps))
    head = nn.warmup_lr(peak, warm, 1, warm) if warm else []
    rest = steps - warm
    tail = nn.cosine_decay_lr(0.0, peak, rest, 1, rest) if cfg.lr_schedule == "cosine" else [peak] * rest
    return [float(v) for v in list(head) + list(tail)]


def is_norm_or_bias(name: str) -> bool:
    """BatchNorm scale/shift (``gamma``/``beta``) and biases: the parameters the recipe does not decay."""
    leaf = name.rsplit(".", 1)[-1]
    return leaf in ("gamma", "beta", "bias")


def param_groups(params, weight_decay: float, decay_norm_and_bias: bool = True):
    """``nn.Momentum`` parameter groups: all params with ``weight_decay``, or norm/bias params without it."""
    params = list(params)
    if decay_norm_and_bias:
        return [{"params": params, "weight_decay": weight_decay}]
    decay = [p for p in params if not is_norm_or_bias(p.name)]
    no_decay = [p for p in params if is_norm_or_bias(p.name)]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0},
            {"order_params": params}]


def build_loss(cfg):
    """Sparse-label cross entropy, with label smoothing when the config asks for it."""
    from mindspore import nn

    if cfg.label_smoothing:
        return nn.CrossEntropyLoss(reduction="mean", label_smoothing=cfg.label_smoothing)
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def uses_fixed_cpu_scale(cfg) -> bool:
    """fp16 weights on CPU with a fixed scale: the only loss scale ``build_train_network`` accepts there."""
    return cfg.amp_level in ("O2", "O3") and cfg.device_target == "CPU" and cfg.loss_scale == "fixed"


def build_optimizer(cfg, params):
    """SGD with momentum over ``params``: the config's schedule, decay groups and (CPU, fixed) loss scale."""
    from mindspore import nn

    lr = cfg.scaled_lr if cfg.lr_schedule == "constant" and not cfg.warmup_fraction else lr_per_step(cfg)
    # A fixed scale on CPU never skips a step, so the optimizer divides the scaled gradients by it itself.
    loss_scale = FIXED_LOSS_SCALE if uses_fixed_cpu_scale(cfg) else 1.0
    return nn.Momentum(param_groups(params, cfg.weight_decay, cfg.decay_norm_and_bias), lr, cfg.momentum,
                       loss_scale=loss_scale)


def build_train_step(cfg, net, loss_fn, opt):
    """The step cell: ``TrainOneStepCell`` (O0), ``amp.build_train_network`` (AMP), and for a dynamic loss scale
    ``TrainOneStepWithLossScaleCell`` (returns ``(loss, overflow, scale)``; read it with ``step_loss``).

    Under DATA_PARALLEL each of them inserts the gradient AllReduce (``DistributedGradReducer``) itself.
    """
    from mindspore import amp, nn

    if cfg.amp_level == "O0":
        step = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
    elif cfg.loss_scale == "dynamic" and cfg.device_target == "CPU":
        # build_train_network refuses a dynamic scale on CPU: let it cast the network for the level (its own AMP
        # processing, without a scale), then wrap that network in the stock cell with a CPU overflow check.
        plain = amp.build_train_network(net, opt, loss_fn, level=cfg.amp_level, loss_scale_manager=None)
        manager = amp.DynamicLossScaleManager(**DYNAMIC_LOSS_SCALE)
        step = cpu_loss_scale_cell()(plain.network, opt, scale_sense=manager.get_update_cell())
    elif cfg.loss_scale == "dynamic":
        step = amp.build_train_network(net, opt, loss_fn, level=cfg.amp_level,
                                       loss_scale_manager=amp.DynamicLossScaleManager(**DYNAMIC_LOSS_SCALE))
    else:
        extra = {}
        if uses_fixed_cpu_scale(cfg):
            extra["loss_scale_manager"] = amp.FixedLossScaleManager(FIXED_LOSS_SCALE, drop_overflow_update=False)
        step = amp.build_train_network(net, opt, loss_fn, level=cfg.amp_level, **extra)
    step.set_train()
    return step


def plain_train_step(net, lr: float = 0.01, amp_level: str = "O0"):
    """``build_train_step`` for a measurement on CPU: sparse cross entropy, momentum 0.9, no weight decay, fp32
    unless ``amp_level`` asks for AMP (then the CPU's fixed loss scale, as a CPU job of that level trains)."""
    from helpers.core.config import JobConfig

    cfg = JobConfig(lr=lr, momentum=0.9, weight_decay=0.0, amp_level=amp_level, device_target="CPU",
                    loss_scale="fixed")
    return build_train_step(cfg, net, build_loss(cfg), build_optimizer(cfg, net.trainable_params()))


def cpu_loss_scale_cell():
    """``nn.TrainOneStepWithLossScaleCell`` whose overflow check runs on CPU: ``ops.isfinite`` on every gradient
    (summed over ranks), as the stock cell's Ascend ``IsFinite`` path does; on the cards it runs ``FloatStatus`` per
    gradient (GPU), ``AllFinite`` (Ascend 910B by default) or ``NPUClearFloatStatusV2``/``NPUGetFloatStatusV2``
    (910A), none of them a CPU kernel (``helpers.core.rehearsal.OVERFLOW_CHECKS``). Everything else (scaling, the
    dynamic scale update, skipping a step) is the stock cell."""
    from mindspore import nn, ops
    from mindspore.common import dtype as mstype

    not_finite = ops.MultitypeFuncGraph("not_finite")

    @not_finite.register("Tensor")
    def _(grad):
        return 1.0 - ops.cast(ops.isfinite(grad).all(), mstype.float32)

    class CpuOverflowLossScaleCell(nn.TrainOneStepWithLossScaleCell):
        def get_overflow_status(self, status, compute_output):
            return self._get_distributed_overflow_status_on_infnan_mode(not_finite, compute_output)

    return CpuOverflowLossScaleCell


def step_loss(output) -> tuple[float, dict]:
    """``(loss, extra)`` from a step cell's output: a loss tensor, or a loss-scale cell's ``(loss, overflow,
    scale)`` tuple, whose overflow flag and scale go into ``extra`` (an overflowing step was skipped)."""
    if isinstance(output, (tuple, list)):
        loss, overflow, scale = output
        return float(np.asarray(_numpy(loss))), {"overflow": bool(np.asarray(_numpy(overflow))),
                                                  "loss_scale": float(np.asarray(_numpy(scale)).reshape(-1)[0])}
    return float(np.asarray(_numpy(output))), {}


def _numpy(x):
    return x.asnumpy() if hasattr(x, "asnumpy") else x
