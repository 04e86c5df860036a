"""The host-memory check before launch (``helpers.job.host_memory``), the machine-wide job list it reads
(``helpers.job.registry.machine_jobs``) and the disk check (``helpers.job.disk_space``): no processes started."""

import json
import os
import time
from pathlib import Path

import psutil
import pytest

from helpers.core.config import JobConfig, job_config
from helpers.core.errors import DataError
from helpers.core import footprint as fp
from helpers.job import disk_space, host_memory as hm, registry

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "host_memory.json"


class Bar:
    def __init__(self):
        self.lines = []

    def queued(self, text):
        self.lines.append(text)


def ci(**kw):
    return job_config("ci", name="t", chapter="t", conv_impl="im2col", **kw)


def other(name="20261205-101010-full_batch", need=5000.0, rss=1000.0):
    return dict(job_id=f"{name}-1-2", run_dir=f"/x/runs/02/{name}", need_mb=need, rss_mb=rss,
                still_mb=max(0.0, need - rss))


def test_need_grows_with_the_batch_and_ranks_and_the_cap_bounds_it():
    small, big = hm.rank_need_mb(ci()), hm.rank_need_mb(ci(global_batch=96 * 8, image_size=64))
    assert hm.RANK_BASE_MB < small < big
    assert hm.rank_need_mb(ci(global_batch=96 * 8, image_size=64, mem_cap_mb=900)) == 900
    assert hm.job_need_mb(ci(world_size=2, global_batch=16)) == pytest.approx(2 * small + hm.SCHEDULER_MB)
    assert hm.rank_need_mb(ci(device_target="GPU")) == hm.CARD_RANK_MB, "a card's activations are not the host's"


def _measured_jobs() -> list[dict]:
    data = json.loads(RESULTS.read_text())
    return [dict(j, preset=p) for p, e in data.items() if isinstance(e, dict) for c in e.get("chapters", {}).values()
            for j in c["jobs"] if j.get("peak_host_mb") and j.get("config")]


# Known gaps of the estimate, each measured in the ci course run (benchmarks/results/host_memory.json); strict, so a
# fix that closes one fails here until it is taken off the list.
ESTIMATE_GAPS = {
    ("ci", "00", "two-nodes"): "both nodes of the one-machine demo run here; the estimate counts one node's ranks",
    ("cpu", "00", "two-nodes"): "both nodes of the one-machine demo run here; the estimate counts one node's ranks",
    # 0.896x in the 2026-12-08 ci run (0.92x and 0.895x in the two before: it sits at the bound)
    ("ci", "03", "oom-2x1-uncapped"): "the planner undercounts the 400,000-class classifier's optimizer and casts",
}
# Jobs that fail at their memory cap by design: where the cap stops them varies from run to run, so their peak is
# only a lower bound of their need and only the safe side is checked.
FAIL_AT_CAP = {("ci", "03", "oom-2x1-capped"), ("cpu", "02", "full_batch_capped"), ("cpu", "03", "oom-2x1-capped")}


@pytest.mark.parametrize("job", _measured_jobs(), ids=lambda j: f"{j['preset']}-{j['chapter']}-{j['name']}")
def test_the_estimate_is_on_the_safe_side_of_every_measured_job(job, request):
    """Calibration: each job the benchmark measured (benchmarks/host_memory.py), re-estimated now from its config,
    is at least 90 % of its measured peak and at most 1.6x it (far above would refuse jobs a laptop could run)."""
    gap = ESTIMATE_GAPS.get((job["preset"], job["chapter"], job["name"]))
    if gap:
        request.applymarker(pytest.mark.xfail(reason=gap, strict=True))
    need = hm.job_need_mb(JobConfig(**job["config"]))
    upper = float("inf") if (job["preset"], job["chapter"], job["name"]) in FAIL_AT_CAP else 1.6
    assert 0.9 <= need / job["peak_host_mb"] <= upper, (job["chapter"], job["name"], need, job["peak_host_mb"])


def test_a_job_that_fits_is_registered_with_its_need(monkeypatch):
    monkeypatch.setattr(hm, "available_mb", lambda: 50_000.0)
    monkeypatch.setattr(hm, "other_jobs", lambda exclude=None: [])
    seen = {}
    need = hm.admit(ci(), "job-1", lambda **kw: seen.update(kw), wait_s=0)
    assert seen == {"host_need_mb": round(need)} and need == pytest.approx(hm.job_need_mb(ci()))


def test_a_job_that_does_not_fit_is_refused_naming_need_free_holders_and_fixes(monkeypatch):
    monkeypatch.setattr(hm, "available_mb", lambda: 6000.0)
    monkeypatch.setattr(hm, "other_jobs", lambda exclude=None: [other()])
    registered = []
    with pytest.raises(hm.NotEnoughHostMemory) as err:
        hm.admit(ci(), "job-1", lambda **kw: registered.append(kw), wait_s=0)
    text = str(err.value)
    need = hm.job_need_mb(ci())
    free = 6000.0 - hm.RESERVE_MB - 4000.0
    assert f"needs about {need:.0f} MB" in text and f"{free:.0f} MB are free" in text
    assert "20261205-101010-full_batch" in text and "needs up to 5000 MB" in text
    assert "world_size=" in text and "'ci' preset" in text and hm.WAIT_ENV in text and "batch" in text
    assert registered == [], "nothing registered, nothing started"


def test_waits_for_the_other_job_with_the_wait_shown(monkeypatch):
    rounds = iter([[other()], [other()], []])
    monkeypatch.setattr(hm, "available_mb", lambda: 6000.0)
    monkeypatch.setattr(hm, "other_jobs", lambda exclude=None: next(rounds))
    monkeypatch.setattr(hm, "POLL_S", 0.01)
    bar, seen = Bar(), {}
    hm.admit(ci(), "job-1", lambda **kw: seen.update(kw), bar=bar, wait_s=60)
    assert seen and len(bar.lines) == 2 and all("waiting for memory" in x and "full_batch" in x for x in bar.lines)


def test_no_wait_when_no_course_job_holds_the_memory(monkeypatch):
    monkeypatch.setattr(hm, "available_mb", lambda: 100.0)
    monkeypatch.setattr(hm, "other_jobs", lambda exclude=None: [])
    with pytest.raises(hm.NotEnoughHostMemory, match="none") as err:
        hm.admit(ci(), "job-1", lambda **kw: None, wait_s=600)     # waiting could not help: fail at once
    assert "fewer ranks" in str(err.value) and "world_size=" not in str(err.value), "no rank count that would fit"


def test_the_seam_limits_the_machine_less_what_course_jobs_hold(monkeypatch):
    monkeypatch.setenv(hm.AVAILABLE_ENV, "8000")
    monkeypatch.setattr(hm, "other_jobs", lambda exclude=None: [other(rss=1500.0)])
    assert hm.available_mb() == 6500.0
    monkeypatch.delenv(hm.AVAILABLE_ENV)
    assert hm.available_mb() == pytest.approx(psutil.virtual_memory().available / hm.MIB, rel=0.2)


def test_slurm_jobs_are_not_checked_against_this_host(monkeypatch):
    monkeypatch.setattr(hm, "available_mb", lambda: 0.0)
    seen = {}
    assert hm.admit(ci().replace(launcher="slurm"), "j", lambda **kw: seen.update(kw)) == 0.0
    assert seen == {"host_need_mb": None}


def test_footprint_counts_shared_pages_once_and_the_peak_sampler_keeps_the_largest():
    me = psutil.Process()
    one, rss_one = fp.footprint([me])
    two, rss_two = fp.footprint([me, me])
    assert 0 < one <= rss_one + 1 and rss_two == pytest.approx(2 * rss_one, rel=0.05)
    assert two < rss_two, "the shared part counted once"
    peak = fp.HostPeak()
    peak.sample([os.getpid()])
    assert peak.record()["peak_host_mb"] > 0 and peak.samples == 1 and peak.pss_reads == 1
    with fp.sampling([os.getpid()], every_s=0.01) as p:
        pass
    assert p.samples >= 1 and p.peak_mb > 0


def _forked_child_sharing(megabytes: int):
    """A parent's ``megabytes`` of touched anonymous memory, and a forked child that shares them copy-on-write
    (what MindSpore's profiler analysis does to a rank); returns (child process, its stop pipe)."""
    import multiprocessing as mp

    import numpy as np

    block = np.ones(megabytes * 2 ** 20 // 8)      # touched: resident, anonymous
    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=child_end.recv)     # waits; touches nothing of the block
    child.start()
    return block, child, parent_end


def test_a_forked_childs_copy_on_write_pages_are_counted_once_in_the_peak():
    block, child, stop = _forked_child_sharing(200)
    try:
        time.sleep(0.5)
        procs = [psutil.Process(), psutil.Process(child.pid)]
        cheap, _ = fp.footprint(procs)
        pss = fp.pss_mb(procs)
        peak = fp.HostPeak()
        peak.sample([os.getpid()])
    finally:
        stop.send(None)
        child.join()
    mine = psutil.Process().memory_full_info().pss / 2 ** 20
    assert cheap > pss + 150, "the cheap figure counts the child's copy-on-write block again"
    assert pss - mine < 100, "the child adds little PSS of its own"
    assert peak.peak_mb == pytest.approx(pss, rel=0.1) and peak.peak_cheap_mb > peak.peak_mb + 150
    del block


def test_pss_is_read_again_only_when_the_cheap_figure_grows_or_time_passes(monkeypatch):
    cheap = iter([1000.0, 1010.0, 1100.0, 1100.0])
    monkeypatch.setattr(fp, "footprint", lambda procs: (next(cheap), 0.0))
    reads = iter([900.0, 990.0, 950.0])
    monkeypatch.setattr(fp, "pss_mb", lambda procs: next(reads))
    monkeypatch.setattr(fp, "tree", lambda pids: [])
    peak = fp.HostPeak()
    assert [peak.sample([]) for _ in range(3)] == [900.0, 900.0, 990.0]     # +1 % skipped, +10 % read
    assert peak.pss_reads == 2
    monkeypatch.setattr(fp, "PSS_EVERY_S", 0.0)
    assert peak.sample([]) == 950.0 and peak.pss_reads == 3 and peak.peak_mb == 990.0, "flat, but time passed"


def test_machine_jobs_lists_live_launchers_and_drops_dead_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(registry, "MACHINE_REGISTRY", tmp_path / "machine")
    registry.register("live-1-2", tmp_path / "r1", host_need_mb=1234)
    dead = dict(job_id="dead-1-2", run_dir="x", launcher_pid=2 ** 22 - 7, launcher_start=1.0)
    (tmp_path / "machine" / "dead-1-2.json").write_text(json.dumps(dead))
    assert [j["job_id"] for j in registry.machine_jobs()] == ["live-1-2"]
    assert not (tmp_path / "machine" / "dead-1-2.json").exists()
    assert registry.machine_jobs(exclude="live-1-2") == []
    registry.unregister("live-1-2")
    assert registry.machine_jobs() == [] and not list((tmp_path / "home" / "runs" / ".jobs").glob("*.json"))


def test_disk_check_sums_places_on_one_disk_and_names_them(tmp_path, monkeypatch):
    cfg = ci(data_dir=str(tmp_path / "not_made_yet"))
    monkeypatch.setattr(disk_space, "free_mb", lambda path: 1000.0)
    with pytest.raises(DataError) as err:
        disk_space.check_disk(cfg, tmp_path / "runs")
    text = str(err.value)
    need = disk_space.RUN_MB_PER_RANK * 8 + disk_space.COMPILE_CACHE_MB + disk_space.DATA_MB
    assert "run folder" in text and "compile cache" in text and "data set (to be made)" in text
    assert f"needs {need:.0f} MB" in text and "1000 MB free" in text and "COURSE_HOME" in text
    monkeypatch.setattr(disk_space, "free_mb", lambda path: need + disk_space.MARGIN_MB + 1)
    disk_space.check_disk(cfg, tmp_path / "runs")


def test_split_steps_and_phase_pipelines_add_to_a_ranks_need():
    from helpers.train.time_split import SPLIT_EVERY_ENV

    base = ci(steps=5)
    split = base.replace(env={SPLIT_EVERY_ENV: "1"})
    assert not hm.splits_steps(base) and hm.splits_steps(split)
    assert hm.rank_need_mb(split) == pytest.approx(hm.rank_need_mb(base) + hm.SPLIT_EXTRA_MB)
    assert not hm.splits_steps(split.replace(accumulation_steps=2, micro_batch=4)), "accumulation is never split"
    phases = base.replace(phase_samplers=("distributed", "stratified"), phase_seeds=(1, 2, 3))
    assert hm.rank_need_mb(phases) == pytest.approx(hm.rank_need_mb(base) + 6 * hm.PHASE_DATASET_MB)
