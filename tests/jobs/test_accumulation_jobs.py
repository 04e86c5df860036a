"""Real 8-rank msrun jobs for chapter 02: accumulation equals the full batch across ranks, an accumulated
training job runs, and a rank over its memory cap fails the job with kind 'oom' leaving no process behind."""

import pytest

from helpers.errors import JobFailed
from helpers.launch import processes_with_env, run_job
from helpers.memory_measure import cap_below, job_memory

pytestmark = pytest.mark.jobs


def processes_with_port(port: int) -> list[int]:
    return [p.pid for p in processes_with_env("MS_SCHED_PORT", str(port))]


def test_accumulated_gradient_equals_the_global_batch_gradient_on_8_ranks(ci_config, tmp_path):
    cfg = ci_config.replace(task="grad_check", conv_impl="native", global_batch=64,
                                              micro_batch=2, accumulation_steps=4, steps=1)
    res = run_job(cfg, progress="text", run_root=tmp_path)
    assert res.ranks == list(range(8))
    for s in res.summaries.values():
        assert s["world"] == 8 and s["micro_batch"] == 2 and s["accumulation_steps"] == 4
        assert s["grad_max_abs_no_bn"] > 1e-3
        assert s["grad_max_abs_diff_no_bn"] <= 1e-6
        assert s["grad_max_abs_diff_bn"] > 1e-4, "micro-batch BatchNorm statistics really change the gradient"
        assert s["builtin_nn_GradAccumulationCell_ratio"] == pytest.approx(4.0, rel=1e-3)
        assert s["builtin_parallel_GradAccumulation_ratio"] == pytest.approx(4.0, rel=1e-3)
    bn_diffs = {round(s["grad_max_abs_diff_bn"], 9) for s in res.summaries.values()}
    assert len(bn_diffs) == 1, "the compared gradients are reduced: the same on every rank"
    assert not processes_with_port(res.config.master_port)


def test_accumulated_training_job_keeps_ranks_identical(ci_config, tmp_path):
    cfg = ci_config.replace(conv_impl="native", micro_batch=2, accumulation_steps=4,
                                              steps=2)
    res = run_job(cfg, progress="text", run_root=tmp_path)
    assert res.metric("loss").shape == (8, 2)
    assert res.weights_identical
    samples = {rec["samples"] for r in res.ranks for rec in res.steps[r]}
    assert samples == {8}, "K micro-batches of 2 per step"
    assert not processes_with_port(res.config.master_port)


def test_a_rank_over_its_memory_cap_fails_with_oom_and_nothing_is_left(ci_config, tmp_path):
    # Measure, then cap: half a memory-pool block (512 MB) below what the measured run reserved leaves
    # room for start-up and compilation but not for MindSpore's CPU memory pool (1 GiB blocks), so the
    # step's first allocation fails.
    cfg = ci_config.replace(conv_impl="native", steps=2)
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
