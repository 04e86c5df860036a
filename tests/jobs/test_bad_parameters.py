"""Bad job parameters through the launcher: one ConfigError naming every bad field, before anything runs.

Each config is built with ``dataclasses.replace`` (``JobConfig.replace`` would validate it already), so
``run_job``'s own first step, ``cfg.validate()``, is what refuses it: no run directory, no process.
"""

import dataclasses
import math
import subprocess
import time

import psutil
import pytest

from helpers.job import launch
from helpers.core.errors import ConfigError
from helpers.job.launch import run_job

pytestmark = pytest.mark.jobs

CASES = {
    "non-integer sizes (accepted before)": dict(steps=2.5, global_batch=64.0, image_size=32.0, seed=1.5),
    "watchdog times": dict(timeout_s=math.nan, stall_s=math.inf, compile_stall_s=0.0),
    "placement": dict(master_port=80, node_rank=1, threads_per_rank=0, dataset_workers=0),
    "unknown names": dict(arch="resnet19", stem="tiny", sampler="random", bad_images="delete",
                          fail_mode="explode", comm_fusion={"allgather": {"mode": "index", "config": [1]}}),
    "mixed": dict(accumulation_steps="2", profile_skip_steps=-1, timeout_s="600", device_target="TPU",
                  micro_batch=2.0, fail_step=0.5),
}


@pytest.fixture()
def no_launch(monkeypatch):
    """Every Popen the launcher makes, recorded (and refused): none may happen."""
    calls = []

    def popen(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"run_job started a process for a bad config: {args}")

    monkeypatch.setattr(launch.subprocess, "Popen", popen)
    assert launch.subprocess is subprocess
    return calls


def refused(cfg, run_root):
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        run_job(cfg, progress="text", run_root=run_root)
    elapsed = time.perf_counter() - t0
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children, "a process was started"
    assert not run_root.exists(), f"a run directory was made: {list(run_root.rglob('*'))}"
    return info.value, elapsed


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_job_names_every_bad_field_at_once_before_launch(case, ci_config, tmp_path, no_launch):
    bad = CASES[case]
    err, elapsed = refused(dataclasses.replace(ci_config, **bad), tmp_path / "runs")
    assert elapsed < 0.5, f"took {elapsed:.2f} s"
    assert sorted(err.fields) == sorted(bad)
    lines = str(err).splitlines()
    assert len(lines) == len(bad)
    for field, line in zip(err.fields, lines):
        assert line.startswith(f"{field}: ") and line.endswith(f"(got {bad[field]!r})"), line
    assert not no_launch


def test_all_cases_together_are_one_error(ci_config, tmp_path, no_launch):
    everything = {k: v for case in CASES.values() for k, v in case.items()}
    err, elapsed = refused(dataclasses.replace(ci_config, **everything), tmp_path / "runs")
    assert elapsed < 0.5
    assert sorted(err.fields) == sorted(everything) and len(everything) >= 20
    assert not no_launch


def test_missing_input_files_are_refused_before_launch(ci_config, tmp_path, no_launch):
    """run_job checks the strategy file and the checkpoint (helpers.job.input_checks) before it launches."""
    cfg = dataclasses.replace(ci_config, strategy_file=str(tmp_path / "none.json"),
                              init_checkpoint=str(tmp_path / "no_ckpt"))
    err, _ = refused(cfg, tmp_path / "runs")
    assert "strategy_file: no such file" in str(err) and "init_checkpoint: no such file" in str(err)
    assert not no_launch
