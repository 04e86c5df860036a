"""Real msrun jobs for chapter 02: a rank over its memory cap fails the job with kind 'oom' leaving no
process behind (2 ranks: what is tested is one rank's failure). The gradient check (accumulated == full batch
without BatchNorm, the built-in cells' factor K) and the accumulated training run are chapter 02's own jobs,
asserted in tests/notebooks/test_ch02.py rather than run twice in CI."""

import pytest

from helpers.core.errors import JobFailed
from helpers.job.processes import processes_with_env
from helpers.job.launch import run_job
from helpers.topics.memory_runs import cap_below, job_memory

pytestmark = pytest.mark.jobs


def processes_with_port(port: int) -> list[int]:
    return [p.pid for p in processes_with_env("MS_SCHED_PORT", str(port))]


def test_a_rank_over_its_memory_cap_fails_with_oom_and_nothing_is_left(ci_config, tmp_path):
    # Measure, then cap: half a memory-pool block (512 MB) below what the measured run reserved leaves
    # room for start-up and compilation but not for MindSpore's CPU memory pool (1 GiB blocks), so the
    # step's first allocation fails.
    cfg = ci_config.replace(conv_impl="native", steps=2, world_size=2, global_batch=16)   # any rank over its cap
    measured = job_memory(run_job(cfg, progress="text", run_root=tmp_path / "measured"))
    cap = cap_below(measured["max_vms_peak"], 512)
    with pytest.raises(JobFailed) as info:
        run_job(cfg.replace(mem_cap_mb=cap, name="capped"), progress="text", run_root=tmp_path / "capped")
    err = info.value
    assert err.kind == "oom", str(err)
    assert err.rank is not None and f"cap {cap} MB" in str(err) and "accumulation_steps" in str(err)
    (run_dir,) = [p for p in (tmp_path / "capped").glob("*/*") if p.is_dir()]
    port = __import__("json").loads((run_dir / "config.json").read_text())["master_port"]
    assert not processes_with_port(port)
