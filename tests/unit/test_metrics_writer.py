"""MetricsWriter: step lines are flushed at once and fsync'ed off the training thread within SYNC_EVERY_S (issue 31)."""

import threading
import time

import pytest

from helpers.core import metrics
from helpers.core.metrics import MetricsTail, MetricsWriter, metrics_path, read_records


@pytest.fixture
def fsyncs(monkeypatch):
    """Every os.fsync the writer makes, as the name of the thread that made it."""
    calls = []
    real = metrics.os.fsync

    def counting(fd):
        calls.append(threading.current_thread().name)
        real(fd)

    monkeypatch.setattr(metrics.os, "fsync", counting)
    return calls


def _wait_synced(w: MetricsWriter, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while w.unsynced and time.monotonic() < end:
        time.sleep(0.01)
    return w.unsynced == 0


def test_step_lines_are_readable_at_once_but_not_fsynced_by_the_training_thread(tmp_path, fsyncs):
    w = MetricsWriter(tmp_path, 0, sync_every_s=0.05)
    tail = MetricsTail(tmp_path, [0])
    for i in range(50):
        w.write("step", step=i, loss=1.0)
        assert tail.poll()[-1]["step"] == i          # the launcher's watchdog sees each step as it is written
    main = threading.current_thread().name
    assert main not in fsyncs                         # was 50 fsyncs in the step loop before
    assert _wait_synced(w, 5.0) and fsyncs            # ... and the background thread put them on disk
    w.close()


def test_every_other_record_is_on_disk_when_write_returns(tmp_path, fsyncs):
    w = MetricsWriter(tmp_path, 0, sync_every_s=3600)
    w.write("step", step=0)
    for event in ("ready", "summary", "failure"):
        n = len(fsyncs)
        w.write(event)
        assert w.unsynced == 0 and fsyncs[n:] == [threading.current_thread().name]
    w.close()


def test_close_fsyncs_the_last_steps_and_keeps_every_line(tmp_path, fsyncs):
    w = MetricsWriter(tmp_path, 0, sync_every_s=3600)
    for i in range(5):
        w.write("step", step=i)
    assert w.unsynced == 5 and not fsyncs
    w.close()
    assert fsyncs and w.unsynced == 0
    assert [r["step"] for r in read_records(metrics_path(tmp_path, 0))] == list(range(5))
    w.close()                                          # a second close (recording_failures' finally) is harmless


def test_sync_every_zero_fsyncs_each_step_line(tmp_path, fsyncs):
    w = MetricsWriter(tmp_path, 0, sync_every_s=0)
    w.write("step", step=0)
    assert w.unsynced == 0 and len(fsyncs) == 1
    w.close()


def test_the_background_fsync_comes_within_the_period(tmp_path, fsyncs):
    w = MetricsWriter(tmp_path, 0, sync_every_s=0.2)
    w.write("step", step=0)
    t0 = time.monotonic()
    assert _wait_synced(w, 2.0)
    assert time.monotonic() - t0 < 1.0
    w.close()
