"""Gradient accumulation that is really equivalent to the big batch, for DATA_PARALLEL in GRAPH_MODE.

K micro-steps each compute the gradient of the *mean* loss of a micro-batch and add ``g / K`` into
zero-initialised buffers, with no communication; then one step averages the buffers across ranks
(one AllReduce per buffer, or fused) and applies the optimizer, and the buffers are zeroed. Without
BatchNorm this equals the full-batch gradient up to float rounding; with BatchNorm it cannot be exact,
because each micro-batch is normalised with its own statistics (chapter 02 shows by how much).

Why not MindSpore's own cells: ``Model`` has no accumulation argument, and ``nn.GradAccumulationCell`` /
``parallel.nn.GradAccumulation`` (pipeline-parallel tools) sum the micro-batch losses, so their gradient
is K times the mean's, and they keep the whole batch's activations alive.
"""

from __future__ import annotations

import mindspore as ms
from mindspore import nn, ops
from mindspore.context import ParallelMode
from mindspore.parallel._utils import _get_parallel_mode


class MicroStep(nn.Cell):
    """Forward + backward of one micro-batch; adds ``grad / K`` to the buffers; returns the loss."""

    def __init__(self, net_with_loss: nn.Cell, params, buffers, accumulation_steps: int):
        super().__init__(auto_prefix=False)
        self.net_with_loss = net_with_loss
        self.params = params
        self.buffers = buffers
        self.scale = 1.0 / accumulation_steps
        self.grad = ops.GradOperation(get_by_list=True)

    def construct(self, images, labels):
        loss = self.net_with_loss(images, labels)
        grads = self.grad(self.net_with_loss, self.params)(images, labels)
        for buf, g in zip(self.buffers, grads):
            ops.assign_add(buf, g * self.scale)
        return loss


class ApplyStep(nn.Cell):
    """Average the buffers across ranks (DATA_PARALLEL), apply the optimizer, zero the buffers."""

    def __init__(self, optimizer: nn.Optimizer, buffers):
        super().__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.buffers = buffers
        self.reduce = _get_parallel_mode() in (ParallelMode.DATA_PARALLEL, ParallelMode.HYBRID_PARALLEL)
        self.reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True) if self.reduce else None

    def construct(self):
        grads = ()
        for b in self.buffers:
            grads += (b * 1.0,)            # a copy: the buffers are zeroed below
        if self.reduce:
            grads = self.reducer(grads)
        self.optimizer(grads)
        for b in self.buffers:
            ops.assign(b, ops.zeros_like(b))
        return grads[0].sum()


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
        losses = [float(self.micro(images, labels).asnumpy()) for images, labels in micro_batches]
        self.apply().asnumpy()
        return sum(losses) / len(losses)
