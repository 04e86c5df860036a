"""In a rank: a few sampled steps run as three graphs (gradients, their AllReduce, the optimizer), each timed.

The fused train step is one graph in GRAPH mode, so its compute and its communication cannot be told apart from the
host. A sampled step does the same work as separate graphs and times each (after ``runtime.synchronize`` on a card):
``grad_s`` (forward and backward until the gradients are ready), ``reduce_s`` (the gradient AllReduce, including the
wait for the slowest rank: this rank's share of the straggler's cost) and ``update_s`` (the optimizer; under a loss
scale also its overflow check, one flag summed over ranks). The other steps stay fused (on a card the AllReduce
overlaps the backward there). ``helpers.job.straggler`` reads the records.
"""

from __future__ import annotations

import os
import time

SPLIT_EVERY_ENV = "COURSE_TIME_SPLIT_EVERY"   # every how many steps one is split; 0 switches the split off
MIN_EVERY, MAX_EVERY = 15, 20                 # a split step took 22-38 % longer than a fused one (ci, 8 ranks, 2 cores)
SPLIT_KEYS = ("grad_s", "reduce_s", "update_s")
# What the split copies of MindSpore 2.10's TrainOneStepCell and Cell, by wheel file (tests/contract/test_time_split.py)
WHEEL_ASSUMES = {
    "nn/wrap/cell_wrapper.py": ("sens = ops.fill(loss.dtype, loss.shape, self.sens)",
                                "grads = self.grad(self.network, self.weights)(*inputs, sens)",
                                "grads = self.grad_no_sens(self.network, self.weights)(*inputs)",
                                "grads = self.grad_reducer(grads)", "loss = ops.depend(loss, self.optimizer(grads))"),
    "nn/wrap/loss_scale.py": ("_grad_scale = ops.MultitypeFuncGraph(\"grad_scale\")",
                              "status = Tensor([0] * 8, mstype.int32)",
                              "scaling_sens_filled = ops.ones_like(loss) * ops.cast(scaling_sens, ops.dtype(loss))",
                              "grads = self.grad(self.network, weights)(*inputs, scaling_sens_filled)",
                              "grads = self.hyper_map(ops.partial(_grad_scale, scaling_sens), grads)",
                              "cond = self.get_overflow_status(status, grads)",
                              "overflow = self.process_loss_scale(cond)",
                              "loss = ops.depend(loss, self.optimizer(grads))", "return loss, cond, scaling_sens"),
    "nn/cell.py": ("def compile_and_run(self, *args, **kwargs):", "self.compile(*args, **kwargs)"),
    "runtime/stream.py": ("def synchronize():",),
}


def split_every(steps: int, env: dict | None = None) -> int:
    """Every how many steps one runs split: ``$COURSE_TIME_SPLIT_EVERY``, else ``steps // 5`` within 15..20, and 0
    (no split, nothing extra compiled) for a job shorter than 3 periods: a 300-step job samples 15 steps, a 45-step
    one 3, the 4- and 30-step ci and cpu jobs none (their verdict reads the data wait alone)."""
    value = (os.environ if env is None else env).get(SPLIT_EVERY_ENV, "")
    if value.strip():
        return max(0, int(value))
    every = max(MIN_EVERY, min(MAX_EVERY, steps // 5))
    return every if steps >= 3 * every else 0


def is_split_step(i: int, every: int) -> bool:
    """Step ``i`` runs split: the last of each ``every`` steps (step 0 stays fused: it compiles the graphs)."""
    return every > 0 and i % every == every - 1


def splittable(step) -> bool:
    """The stock ``nn.TrainOneStepCell`` (O0, AMP without a dynamic loss scale) and a loss-scale cell running the
    stock ``TrainOneStepWithLossScaleCell.construct`` (AMP with a dynamic scale; its overflow check may be its own):
    gradient accumulation and the hybrid step keep their own graphs, and their steps are not split."""
    from mindspore import nn

    if getattr(step, "use_graceful_exit", False):
        return False
    if type(step) is nn.TrainOneStepCell:
        return not step.return_grad
    return (isinstance(step, nn.TrainOneStepWithLossScaleCell)
            and type(step).construct is nn.TrainOneStepWithLossScaleCell.construct)


def _is_loss_scale(step) -> bool:
    from mindspore import nn

    return isinstance(step, nn.TrainOneStepWithLossScaleCell)


def _scaled_grad_cell(step):
    """``(loss, grads)`` as ``TrainOneStepWithLossScaleCell.construct`` computes them: the loss scaled by
    ``scale_sense`` into the backward, the gradients unscaled (mindspore/nn/wrap/loss_scale.py)."""
    from mindspore import nn, ops
    from mindspore.nn.wrap.loss_scale import _grad_scale

    class ScaledGrads(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.network, self.weights, self.scale_sense = step.network, step.weights, step.scale_sense
            self.grad, self.hyper_map = ops.GradOperation(get_by_list=True, sens_param=True), ops.HyperMap()

        def construct(self, *inputs):
            loss = self.network(*inputs)
            scaling_sens = self.scale_sense
            filled = ops.ones_like(loss) * ops.cast(scaling_sens, ops.dtype(loss))
            grads = self.grad(self.network, self.weights)(*inputs, filled)
            return loss, self.hyper_map(ops.partial(_grad_scale, scaling_sens), grads)

    return ScaledGrads()


def _scaled_update_cell(step):
    """The loss-scale cell's tail on reduced gradients: its own overflow check (summed over ranks), the scale
    update, and the optimizer unless a gradient overflowed; returns ``(overflow, scale)``."""
    from mindspore import Tensor, nn, ops
    from mindspore.common import dtype as mstype

    class ScaledUpdate(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.step = step

        def construct(self, grads):
            status = Tensor([0] * 8, mstype.int32)
            cond = self.step.get_overflow_status(status, grads)
            overflow = self.step.process_loss_scale(cond)
            if not overflow:
                cond = ops.depend(cond, self.step.optimizer(grads))
            return cond, self.step.scale_sense

    return ScaledUpdate()


def _grad_cell(step):
    """A cell computing ``(loss, grads)`` as ``TrainOneStepCell`` does (``construct`` with a ``sens``, else
    ``_no_sens_impl``; mindspore/nn/wrap/cell_wrapper.py), without reducing them."""
    from mindspore import nn, ops

    class GradOnly(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.network, self.weights, self.sens = step.network, step.weights, step.sens
            self.grad = ops.GradOperation(get_by_list=True, sens_param=True)

        def construct(self, *inputs):
            loss = self.network(*inputs)
            sens = ops.fill(loss.dtype, loss.shape, self.sens)
            return loss, self.grad(self.network, self.weights)(*inputs, sens)

    class GradOnlyNoSens(GradOnly):
        def construct(self, *inputs):
            return self.network(*inputs), self.grad_no_sens(self.network, self.weights)(*inputs)

    if not step.sense_flag:
        cell = GradOnlyNoSens()
        cell.grad_no_sens = ops.GradOperation(get_by_list=True)
        return cell
    return GradOnly()


class SplitStep:
    """``step``'s work as three graphs; ``compile(batch)`` builds them ahead (call it in step 0, which compiles
    anyway), ``__call__(*batch)`` trains one step and returns ``(output, {grad_s, reduce_s, update_s})``, the output
    as the fused step's (a loss, or a loss-scale cell's ``(loss, overflow, scale)``)."""

    def __init__(self, step):
        self.scaled = _is_loss_scale(step)
        self.grads = _scaled_grad_cell(step) if self.scaled else _grad_cell(step)
        self.reduce = step.grad_reducer
        self.update = _scaled_update_cell(step) if self.scaled else step.optimizer
        self.weights, self.compiled = step.weights, False
        self.grads.set_train()

    def _zero_grads(self):
        import mindspore as ms
        import numpy as np

        return tuple(ms.Tensor(np.zeros(p.shape, ms.dtype_to_nptype(p.dtype))) for p in self.weights)

    def compile(self, *batch) -> None:
        """Compile the three graphs without running them (``Cell.compile``: what ``Cell.__call__`` compiles first,
        ``compile_and_run`` in ``mindspore/nn/cell.py``), so no sampled step carries a compilation."""
        from mindspore import nn

        self.grads.compile(*batch)
        zeros = self._zero_grads()
        if isinstance(self.reduce, nn.Cell):
            self.reduce.compile(zeros)
        self.update.compile(zeros)
        self.compiled = True

    def __call__(self, *batch):
        from helpers.train.card_runtime import wait_for_device

        t0 = time.perf_counter()
        loss, grads = self.grads(*batch)
        wait_for_device()
        t1 = time.perf_counter()
        grads = self.reduce(grads)
        wait_for_device()
        t2 = time.perf_counter()
        tail = self.update(grads)
        wait_for_device()
        t3 = time.perf_counter()
        return (loss, *tail) if self.scaled else loss, {"grad_s": t1 - t0, "reduce_s": t2 - t1, "update_s": t3 - t2}


def split_step_for(step, steps: int, cache: dict) -> tuple[SplitStep | None, int]:
    """The split form of ``step`` (built once per step cell, kept in ``cache``) and the sampling period; ``None``
    when the step cannot be split or the split is off."""
    every = split_every(steps)
    if not every or not splittable(step):
        return None, 0
    if id(step) not in cache:
        cache[id(step)] = SplitStep(step)
    return cache[id(step)], every
