"""The worker's per-step host work (issue 31): every field the readers use stays in each step record, while the loop
neither fsyncs nor builds a psutil.Process per step; ``memory_now_mb`` reads the figures psutil reads."""

import threading

import numpy as np
import psutil
import pytest

from helpers.core import metrics
from helpers.core.config import JobConfig
from helpers.core.metrics import MetricsWriter, metrics_path, read_records
from helpers.train import worker
from helpers.train.worker import memory_now_mb

# what chapters, the launcher's watchdog and the benchmarks read from a step record (grep helpers/ tests/ benchmarks/)
READ_FIELDS = ("step", "loss", "step_s", "data_s", "compute_s", "samples", "rss_mb", "rss_peak_mb", "vms_peak_mb",
               "vms_hwm_mb", "lr", "class_counts")


def _run_loop(tmp_path, steps=4):
    import mindspore as ms
    from mindspore import nn

    from helpers.train.profiler_session import NoProfiler
    from helpers.train.recipe import build_loss, build_optimizer, build_train_step

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    cfg = JobConfig(world_size=1, global_batch=8, steps=steps)
    net = nn.Dense(4, 3)
    step = build_train_step(cfg, net, build_loss(cfg), build_optimizer(cfg, net.trainable_params()))
    x = ms.Tensor(np.random.default_rng(0).random((8, 4), dtype=np.float32))
    batches = iter([(x, ms.Tensor(np.arange(8) % 3, ms.int32))] * steps)
    out = MetricsWriter(tmp_path, 0, sync_every_s=3600)
    worker._loop(cfg, 0, step, batches, out, NoProfiler())
    return out


def test_each_step_record_keeps_the_fields_its_readers_use(tmp_path, monkeypatch):
    fsyncs, processes = [], []
    real_fsync, real_process = metrics.os.fsync, psutil.Process
    monkeypatch.setattr(metrics.os, "fsync", lambda fd: (fsyncs.append(threading.current_thread().name),
                                                        real_fsync(fd)))
    monkeypatch.setattr(psutil, "Process", lambda *a: (processes.append(a), real_process(*a))[1])
    out = _run_loop(tmp_path)
    assert fsyncs == [] and processes == []          # before issue 31: one fsync and one psutil.Process per step
    out.close()
    recs = [r for r in read_records(metrics_path(tmp_path, 0)) if r["event"] == "step"]
    assert [r["step"] for r in recs] == [0, 1, 2, 3]
    for r in recs:
        assert set(READ_FIELDS) <= set(r)
        assert r["samples"] == 8 and r["class_counts"] == [[0, 3], [1, 3], [2, 2]]
        assert r["vms_hwm_mb"] >= r["vms_peak_mb"] > 0 and r["rss_peak_mb"] > 0


def test_memory_now_mb_reads_what_psutil_reads():
    info = psutil.Process().memory_info()
    mem = memory_now_mb()
    assert set(mem) == {"rss_mb", "vms_mb", "rss_peak_mb", "vms_hwm_mb"}
    assert mem["vms_mb"] == pytest.approx(info.vms / 2**20, abs=64)
    assert mem["rss_mb"] == pytest.approx(info.rss / 2**20, abs=64)
    assert mem["vms_hwm_mb"] >= mem["vms_mb"] and mem["rss_peak_mb"] > 0


def test_memory_now_mb_falls_back_to_psutil_without_proc(monkeypatch, tmp_path):
    monkeypatch.setattr(worker, "STATUS_PATH", str(tmp_path / "no_such_status"))
    mem = memory_now_mb()
    info = psutil.Process().memory_info()
    assert set(mem) == {"rss_mb", "vms_mb", "rss_peak_mb", "vms_hwm_mb"}
    assert mem["vms_hwm_mb"] == mem["vms_mb"] == pytest.approx(info.vms / 2**20, abs=64)
