"""A ``mindspore.train.Callback`` that writes our worker's metrics records from inside ``Model.train``.

Per step: ``step_s`` = time since the previous step ended (for step 0: since ``on_train_begin``), so it holds
the wait for the batch as our worker's ``step_s`` does; ``compute_s`` = step begin to step end. The loss is
read with ``asnumpy()`` (a sync, as our worker does). After ``steps`` steps it asks ``Model.train`` to stop.
Imports nothing but MindSpore and ``helpers.core.metrics``, so it also runs in the mindcv environment.
"""

from __future__ import annotations

import time

import numpy as np
from mindspore.train import Callback

from helpers.core.metrics import MetricsWriter


def _loss_value(outputs) -> float:
    while isinstance(outputs, (tuple, list)):
        outputs = outputs[0]
    return float(np.asarray(outputs.asnumpy()).reshape(-1)[0])


class StepTimer(Callback):
    """Writes ready/step records like our worker's and stops ``Model.train`` after ``steps`` steps."""

    def __init__(self, out: MetricsWriter, steps: int, batch_per_rank: int):
        super().__init__()
        self.out, self.steps, self.batch = out, steps, batch_per_rank
        self.times: list[float] = []
        self._prev = self._begin = 0.0

    def on_train_begin(self, run_context):
        self._prev = time.perf_counter()
        self.out.write("ready")

    def on_train_step_begin(self, run_context):
        self._begin = time.perf_counter()

    def on_train_step_end(self, run_context):
        loss = _loss_value(run_context.original_args().net_outputs)
        now = time.perf_counter()
        i = len(self.times)
        self.times.append(now - self._prev)
        self.out.write("step", step=i, loss=loss, step_s=now - self._prev, data_s=self._begin - self._prev,
                       compute_s=now - self._begin, samples=self.batch)
        self._prev = time.perf_counter()
        if len(self.times) >= self.steps:
            run_context.request_stop()

    def summary(self, global_batch: int) -> dict:
        """The steps timed (step times are in the step records, read like our worker's)."""
        return dict(steps=len(self.times), global_batch=global_batch)
