"""The course's worker with a straggler injected into one rank, for tests/jobs/test_stragglers.py (not course code).

Run as the per-rank program (``run_job(cfg, worker=("-m", "tests.jobs.straggler_worker"))``). The rank named by
``$STRAGGLER_RANK`` is slowed by ``$STRAGGLER_DELAY_S`` seconds per step, where ``$STRAGGLER_KIND`` says:
``data``: fetching each training batch sleeps (the step loop's wait for its next batch);
``compute``: the model's forward runs a MindSpore ``pyfunc`` custom op that sleeps, inside the train graph (so in
the forward-and-backward the rank times on its sampled steps, and in every fused step).
"""

import os
import sys
import time

RANK_ENV, KIND_ENV, DELAY_ENV = "STRAGGLER_RANK", "STRAGGLER_KIND", "STRAGGLER_DELAY_S"


class SleepyBatches:
    """A dataset whose tuple iterator sleeps ``delay`` s before each batch."""

    def __init__(self, ds, delay: float):
        self.ds, self.delay = ds, delay

    def repeat(self, *args):
        return SleepyBatches(self.ds.repeat(*args), self.delay)

    def create_tuple_iterator(self, *args, **kwargs):
        for batch in self.ds.create_tuple_iterator(*args, **kwargs):
            time.sleep(self.delay)
            yield batch


def slow_data(delay: float) -> None:
    import helpers.train.data as data

    real = data.build_dataset

    def build(cfg, split, *args, **kwargs):
        ds = real(cfg, split, *args, **kwargs)
        return SleepyBatches(ds, delay) if split == "train" else ds

    data.build_dataset = build


def slow_compute(delay: float) -> None:
    import helpers.train.models as models

    real = models.build_model

    def build(*args, **kwargs):
        from mindspore import nn, ops

        def sleep(x):
            time.sleep(delay)
            return x

        class Slowed(nn.Cell):
            def __init__(self, net):
                super().__init__(auto_prefix=False)          # the same parameter names as the other ranks'
                self.net = net
                self.sleep = ops.Custom(sleep, out_shape=lambda x: x, out_dtype=lambda x: x, func_type="pyfunc")

            def construct(self, x):
                return self.net(ops.stop_gradient(self.sleep(x)))

        return Slowed(real(*args, **kwargs))

    models.build_model = build
    # this rank's graph differs from the cached one of the same config: compile it afresh
    os.environ["MS_COMPILER_CACHE_ENABLE"] = "0"


def main() -> int:
    if os.environ.get("MS_ROLE") == "MS_WORKER" and os.environ.get("RANK_ID") == os.environ.get(RANK_ENV):
        {"data": slow_data, "compute": slow_compute}[os.environ[KIND_ENV]](float(os.environ[DELAY_ENV]))
    from helpers.train.worker import main as worker_main

    return worker_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
