"""Gradient accumulation equal to the big batch (exactly without BatchNorm), for DATA_PARALLEL in GRAPH_MODE.

K micro-steps each add ``1/K`` times the gradient of a micro-batch's *mean* loss into zero-initialised
buffers, without communication; then one step averages the buffers across ranks (the same
``nn.DistributedGradReducer`` as ``TrainOneStepCell``, so ``comm_fusion`` applies), applies the optimizer and
zeroes the buffers. With BatchNorm it cannot be exact: each micro-batch is normalised with its own statistics
(chapter 02 shows by how much). On CPU every micro-step is a whole graph launch with a fixed cost, so
accumulation is cheap for large micro-batches and expensive for tiny ones (chapter 02,
``benchmarks/accumulation.py``). MindSpore's own ``nn.GradAccumulationCell`` /
``parallel.nn.GradAccumulation`` are not used: they sum the micro-batch losses (K times the mean's gradient)
and keep the whole batch's activations alive.
"""

from __future__ import annotations

import numpy as np

import mindspore as ms
from mindspore import nn, ops
from mindspore.context import ParallelMode
from mindspore.parallel._utils import _get_parallel_mode


class MicroStep(nn.Cell):
    """Forward + backward of one micro-batch; adds ``grad / K`` to the buffers; returns its loss."""

    def __init__(self, net_with_loss: nn.Cell, params, buffers, accumulation_steps: int):
        super().__init__(auto_prefix=False)
        self.net_with_loss = net_with_loss
        self.params = params
        self.buffers = buffers
        self.sens = 1.0 / accumulation_steps
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)

    def construct(self, images, labels):
        loss = self.net_with_loss(images, labels)
        sens = ops.fill(loss.dtype, loss.shape, self.sens)     # d(loss / K): backward starts at 1/K
        grads = self.grad(self.net_with_loss, self.params)(images, labels, sens)
        for buf, g in zip(self.buffers, grads):
            ops.assign_add(buf, g)
        return loss


class ApplyStep(nn.Cell):
    """Average the buffers across ranks (DATA_PARALLEL), apply the optimizer, zero the buffers."""

    def __init__(self, optimizer: nn.Optimizer, buffers):
        super().__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.buffers = buffers
        self.reduce = _get_parallel_mode() in (ParallelMode.DATA_PARALLEL, ParallelMode.HYBRID_PARALLEL)
        self.reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True) if self.reduce else None
        self.done = ms.Tensor(1, ms.int32)

    def construct(self):
        grads = self.buffers
        if self.reduce:
            grads = self.reducer(grads)     # reads the buffers before the zeroing below (auto-monad order)
        success = self.optimizer(grads)
        for b in self.buffers:
            ops.assign(b, ops.zeros_like(b))
        return ops.depend(self.done, success)


class AccumulatingTrainStep:
    """``step(micro_batches)`` -> mean loss: K micro-steps then one reduce + update.

    Buffers are Parameters named ``accum.<param name>`` so they live outside the optimizer.
    """

    def __init__(self, net_with_loss: nn.Cell, optimizer: nn.Optimizer, accumulation_steps: int):
        params = optimizer.parameters
        self.buffers = ms.ParameterTuple(
            ms.Parameter(ops.zeros_like(p), name=f"accum.{p.name}", requires_grad=False) for p in params)
        self.k = accumulation_steps
        self.micro = MicroStep(net_with_loss, params, self.buffers, accumulation_steps)
        self.apply = ApplyStep(optimizer, self.buffers)
        self.micro.set_train()
        self.apply.set_train()

    def __call__(self, micro_batches) -> float:
        if len(micro_batches) != self.k:
            raise ValueError(f"expected {self.k} micro-batches (accumulation_steps), "
                             f"got {len(micro_batches)}")
        losses = [self.micro(images, labels) for images, labels in micro_batches]
        done = self.apply()
        # one host synchronisation per optimizer step, after the update (so a step's time is all of it)
        done.asnumpy()
        return float(np.mean([loss.asnumpy() for loss in losses]))
