"""Gradient accumulation equivalent to the big batch (exactly without BatchNorm), for DATA_PARALLEL in GRAPH_MODE.

K micro-steps each compute the gradient of the *mean* loss of a micro-batch, scaled by ``1/K`` (the scale
is the backward pass's initial gradient, so it costs no extra kernel), and add it into zero-initialised
buffers, with no communication; then one step averages the buffers across ranks (one AllReduce per
buffer, or fused by ``comm_fusion``) and applies the optimizer, and the buffers are zeroed. Without
BatchNorm this equals the full-batch gradient up to float rounding; with BatchNorm it cannot be exact,
because each micro-batch is normalised with its own statistics (chapter 02 shows by how much).

Cost on CPU (measured in chapter 02 and ``benchmarks/accumulation.py``): every micro-step is a whole
graph launch whose fixed cost (a few hundred kernels, each with a launch overhead) does not shrink with
the micro-batch, so accumulation is nearly free when a micro-batch is large enough to dominate that cost
and expensive when it is tiny (2 images of the ``ci`` model). Each step therefore avoids everything
that is not needed: no per-parameter rescaling kernels, no copies of the buffers before the reduction
(auto-monad orders the reads before the zeroing), and a single host synchronisation per optimizer step.
The two graphs are compiled once; the reducer is the same ``nn.DistributedGradReducer`` that
``TrainOneStepCell`` uses, so ``comm_fusion`` fuses its AllReduces the same way (checked in the IR: one
fused AllReduce with ``comm_fusion={"allreduce": {"mode": "auto", "config": None}}``).

Why not MindSpore's own cells: ``Model`` has no accumulation argument, and ``nn.GradAccumulationCell`` /
``parallel.nn.GradAccumulation`` (pipeline-parallel tools) sum the micro-batch losses, so their gradient
is K times the mean's, and they keep the whole batch's activations alive.
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
