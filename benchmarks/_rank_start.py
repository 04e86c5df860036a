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
