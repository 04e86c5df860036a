"""Real jobs against the host-memory check of ``run_job`` (``helpers.job.host_memory``): a job that does not fit is
refused before anything starts; a second course job that does not fit beside a running one is refused naming it,
or waits for it with the wait on the progress display; a finished job records its peak host memory.

The machine's memory is set through the check's seam ``COURSE_AVAILABLE_MB`` (the MB this machine has for course
jobs, less what the running ones hold), so the tests need no cgroup and no real memory pressure.
"""

import os
import threading
import time

import psutil
import pytest

from helpers.core.metrics import metrics_path, read_records
from helpers.job import host_memory as hm
from helpers.job.launch import run_job
from helpers.job.registry import machine_jobs

pytestmark = pytest.mark.jobs


def my_job_processes() -> list[psutil.Process]:
    """Processes of any job this test process launched (their COURSE_JOB_ID carries our pid)."""
    mark, found = f"-{os.getpid()}-", []
    for p in psutil.process_iter(["pid"]):
        try:
            if mark in p.environ().get("COURSE_JOB_ID", ""):
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_a_real_job_that_does_not_fit_is_refused_before_anything_starts(ci_config, tmp_path, monkeypatch):
    monkeypatch.delenv(hm.WAIT_ENV, raising=False)        # tests/conftest.py waits by default
    monkeypatch.setenv(hm.AVAILABLE_ENV, "1500")
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(hm.NotEnoughHostMemory) as err:
        run_job(ci_config, progress="none", run_root=tmp_path)
    text = str(err.value)
    assert "needs about" in text and "MB are free" in text
    assert "not started" in text and "fewer ranks" in text and "'ci' preset" in text
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children, "no msrun was started"
    assert my_job_processes() == [] and not [j for j in machine_jobs() if j["launcher_pid"] == os.getpid()]
    assert not [d for d in tmp_path.glob("*/*") if d.is_dir()], "no run folder left behind"


def _start_first(cfg, tmp_path) -> tuple[threading.Thread, dict]:
    """Run ``cfg`` in a thread; returns once it is registered with its need (admitted), with the thread and a
    dict the thread fills (result, end time, error)."""
    out = {}

    def run():
        try:
            out["result"] = run_job(cfg, progress="none", run_root=tmp_path / "first")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out["error"] = exc
        out["end"] = time.time()

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "error" not in out:
        mine = [j for j in machine_jobs() if j["launcher_pid"] == os.getpid() and j.get("host_need_mb")]
        if mine:
            out["record"] = mine[0]
            return thread, out
        time.sleep(0.2)
    thread.join()
    raise AssertionError(f"the first job was never admitted: {out.get('error')}")


def test_two_course_jobs_that_do_not_fit_together(ci_config, tmp_path, monkeypatch, capfd):
    from helpers.job import registry

    monkeypatch.delenv(hm.WAIT_ENV, raising=False)        # tests/conftest.py waits by default
    # only these two jobs count: another test's jobs on this machine (the other pytest worker) would hold the
    # forced memory too, and the second job waited minutes for them (279 s against 48 s)
    monkeypatch.setattr(registry, "MACHINE_REGISTRY", tmp_path / "machine")
    first = ci_config.replace(name="first", world_size=2, global_batch=16, steps=40)
    second = ci_config.replace(name="second", world_size=2, global_batch=16, steps=2)
    thread, out = _start_first(first, tmp_path)
    try:
        need1, need2 = out["record"]["host_need_mb"], hm.job_need_mb(second.replace(conv_impl="im2col"))
        # room for either job alone, not for both
        monkeypatch.setenv(hm.AVAILABLE_ENV, str(int(need1 + hm.RESERVE_MB + need2 - 300)))
        with pytest.raises(hm.NotEnoughHostMemory) as err:
            run_job(second, progress="none", run_root=tmp_path / "second")
        assert out["record"]["run_dir"].split("/")[-1] in str(err.value), "names the job that holds the memory"
        assert "end" not in out, "refused while the first job ran"
        monkeypatch.setenv(hm.WAIT_ENV, "600")                 # now ask to wait for it instead
        capfd.readouterr()
        res = run_job(second, progress="text", run_root=tmp_path / "second")
    finally:
        thread.join()
    assert "error" not in out and out["result"].peak_host_mb > 0
    assert "waiting for memory" in capfd.readouterr().out, "the wait is on the progress display"
    starts = [x["time"] for r in res.ranks for x in read_records(metrics_path(res.run_dir, r)) if x["event"] == "start"]
    assert min(starts) >= out["end"] - 1.0, "the second job's ranks started only once the first had finished"
    assert my_job_processes() == []


def test_a_finished_job_records_its_peak_host_memory(ci_config, tmp_path):
    res = run_job(ci_config.replace(world_size=2, global_batch=16), progress="none", run_root=tmp_path)
    mem = res.host_memory
    assert mem["need_mb"] > 0 and mem["samples"] > 3
    assert 2 * 200 < res.peak_host_mb <= mem["peak_rss_sum_mb"], "two ranks' private memory, shared pages once"
    assert 0.9 <= mem["need_mb"] / res.peak_host_mb <= 1.6, "the estimate is on the safe side of the measurement"
