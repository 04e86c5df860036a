"""What every benchmark's per-rank script does first: load the config, set MindSpore's mode, device and threads,
``init()``, and open the rank's metrics file (the records our watcher reads)."""

from __future__ import annotations

import os
from pathlib import Path


def start_rank(config_path: str, graph: bool = True):
    """``(cfg, run_dir, rank, world, out)`` after ``init()``; the scheduler process never returns from it."""
    import mindspore as ms
    from mindspore.communication import get_group_size, get_rank, init
    from mindspore.device_context.cpu.op_tuning import threads_num

    from helpers.core.config import JobConfig
    from helpers.core.metrics import MetricsWriter

    cfg = JobConfig.load(config_path)
    run_dir = Path(config_path).parent
    ms.set_context(mode=ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    threads_num(cfg.threads_per_rank)
    init()
    rank, world = get_rank(), get_group_size()
    out = MetricsWriter(run_dir, rank)
    out.write("start", pid=os.getpid(), world=world, host=os.uname().nodename)
    return cfg, run_dir, rank, world, out


def data_parallel_context(cfg, world: int, fused: bool) -> None:
    """``set_auto_parallel_context`` for DATA_PARALLEL with mean gradients, plus the config's ``comm_fusion``
    when ``fused``: the context the peer scripts (``Model.train``, mindcv) train under."""
    import mindspore as ms

    parallel = dict(parallel_mode="data_parallel", gradients_mean=True, device_num=world)
    if fused and cfg.comm_fusion:
        parallel["comm_fusion"] = cfg.comm_fusion
    ms.set_auto_parallel_context(**parallel)
