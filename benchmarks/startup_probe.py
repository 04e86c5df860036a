"""Per-rank script of ``benchmarks.startup``: records when this process started, finished importing MindSpore (and
the CPU seconds the import took) and came out of ``init()``, and nothing else (an empty job)."""

from __future__ import annotations

import os
import sys
import time

import psutil


def main(config_path: str) -> int:
    """Import, ``init()``, write the three times as this rank's start and summary records, leave."""
    t_process = psutil.Process().create_time()
    t_import, cpu_import = time.time(), time.process_time()
    import mindspore as ms
    from mindspore.communication import get_rank, init

    t_imported, cpu_imported = time.time(), time.process_time()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()
    t_init = time.time()
    from pathlib import Path

    from helpers.core.metrics import MetricsWriter

    out = MetricsWriter(Path(config_path).parent, get_rank())
    out.write("start", pid=os.getpid())
    out.write("summary", t_process=t_process, t_import=t_import, t_imported=t_imported, t_init=t_init,
              import_cpu_s=cpu_imported - cpu_import)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1]))
