"""Gradient accumulation equal to the big batch (exactly without BatchNorm), for DATA_PARALLEL in GRAPH_MODE.

The step is chapter 02's code cell: its ``MicroStep`` (forward + backward of one micro-batch, ``1/K`` of its
gradient added to zero-initialised buffers, no communication) and ``ApplyStep`` (one ``DistributedGradReducer``
AllReduce of the buffers, as in ``TrainOneStepCell``, so ``comm_fusion`` applies; the update; the buffers
zeroed). ``step_classes`` takes them from a file (the cell's last run, sent to a job's run folder) or from the
committed notebook, so the experiments run the code the learner reads. With BatchNorm it cannot be exact: each
micro-batch is normalised with its own statistics (chapter 02 shows by how much). On CPU every micro-step is a
whole graph launch with a fixed cost, so accumulation is cheap for large micro-batches and expensive for tiny
ones (``benchmarks/accumulation.py``). MindSpore's own ``nn.GradAccumulationCell`` /
``parallel.nn.GradAccumulation`` are not used: they sum the micro-batch losses (K times the mean's gradient)
and keep the whole batch's activations alive.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

import mindspore as ms
from mindspore import nn
from mindspore.context import ParallelMode
from mindspore.parallel._utils import _get_parallel_mode

from helpers.core.cell_source import definitions, load_definitions, ranks_cell_body
from helpers.core.paths import code_root
from helpers.train.card_runtime import wait_for_device

CHAPTER_02 = "notebooks/02_oom_gradient_accumulation.ipynb"
STEP_CLASSES = ["MicroStep", "ApplyStep"]    # what chapter 02's code cell defines
ACCUMULATION_FILE = "accumulation_step.py"   # the cell's two classes in a job's run folder (cfg.accumulation_code)


def step_code(cell_text: str) -> str:
    """The accumulation step of a ``%%ranks`` cell's code: its imports, ``MicroStep`` and ``ApplyStep``."""
    return definitions(cell_text, STEP_CLASSES)


def step_classes(path: str = "") -> tuple[type, type]:
    """``(MicroStep, ApplyStep)`` from the file ``path`` (relative to the run folder on a rank), or, with no path,
    from chapter 02's code cell as committed (written once to a file named by its hash: GRAPH mode reads the
    source of ``construct`` from a file)."""
    if not path:
        code = step_code(ranks_cell_body(code_root() / CHAPTER_02))
        path = Path(tempfile.gettempdir()) / f"course_accumulation_{hashlib.sha256(code.encode()).hexdigest()[:16]}.py"
        if not path.exists():
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(code)
            partial.replace(path)                    # whole or absent: ranks may read it at the same time
    return load_definitions(path, STEP_CLASSES)


class NoReduce(nn.Cell):
    """The gradient reducer of a single process: the gradients as they are (no ranks to average over)."""

    def construct(self, grads):
        return grads


class AccumulatingTrainStep:
    """``step(micro_batches)`` -> mean loss: K micro-steps then one reduce + update, with ``classes``
    (``MicroStep``, ``ApplyStep``; default: ``step_classes()``). Buffers are Parameters named
    ``accum.<param name>`` so they live outside the optimizer."""

    def __init__(self, net_with_loss, optimizer, accumulation_steps: int, classes: tuple | None = None):
        micro_step, apply_step = classes or step_classes()
        params = optimizer.parameters
        self.buffers = params.clone(prefix="accum", init="zeros")
        parallel = _get_parallel_mode() in (ParallelMode.DATA_PARALLEL, ParallelMode.HYBRID_PARALLEL)
        reducer = nn.DistributedGradReducer(params, mean=True) if parallel else NoReduce()
        self.k = accumulation_steps
        self.micro = micro_step(net_with_loss, params, self.buffers, accumulation_steps)
        self.apply = apply_step(optimizer, self.buffers, reducer)
        self.micro.set_train()
        self.apply.set_train()

    def __call__(self, micro_batches) -> float:
        if len(micro_batches) != self.k:
            raise ValueError(f"expected {self.k} micro-batches (accumulation_steps), "
                             f"got {len(micro_batches)}")
        losses = [self.micro(images, labels) for images, labels in micro_batches]
        self.apply()
        wait_for_device()          # one host synchronisation per optimizer step, after the update
        return float(np.mean([loss.asnumpy() for loss in losses]))


def accumulating_step(train_step, accumulation_steps: int, code: str = "") -> AccumulatingTrainStep:
    """``train_step`` (a ``TrainOneStepCell``: its network with loss and optimizer) as K micro-steps + one update,
    with the step classes of the file ``code`` (``step_classes``)."""
    return AccumulatingTrainStep(train_step.network, train_step.optimizer, accumulation_steps, step_classes(code))

