"""A long evaluation between sub-second steps (an ImageNet validation on cards) is progress, not a hang; a rank
stuck inside an evaluation still is a hang, named with its place in the code."""

import numpy as np
import pytest

from helpers.core.errors import JobFailed
from helpers.core.metrics import read_records
from helpers.job.launch import run_job
from helpers.job.stall import STEP_FACTOR
from helpers.train.evaluation import SLOW_EVAL_S
from tests.job_marks import left, marker  # noqa: F401 (marker is a fixture)

pytestmark = pytest.mark.jobs


def records(root, event: str) -> list[dict]:
    return [r for p in sorted(root.rglob("metrics/rank_*.jsonl")) for r in read_records(p) if r["event"] == event]


def phases_job(ci_config, **changes):
    """Chapter 01's shape on 4 ranks: two samplers as phases of one job, each evaluated after its steps."""
    return ci_config.replace(world_size=4, global_batch=32, steps=6, evaluate=True, fail_rank=1, stall_s=3.0,
                             phase_samplers=("distributed", "stratified"), timeout_s=300.0, **changes)


def test_a_long_evaluation_between_sub_second_steps_is_not_called_hung(ci_config, tmp_path, marker):
    cfg = phases_job(ci_config, fail_mode="slow_eval", compile_stall_s=60.0)
    run_job(cfg, progress="none", run_root=tmp_path)
    step_s = float(np.median([r["step_s"] for r in records(tmp_path, "step")]))
    limit = max(cfg.stall_s, STEP_FACTOR * step_s)
    finish_s = max(r["finish_s"] for r in records(tmp_path, "phase_summary"))
    print(f"median step {step_s:.2f} s (stall limit {limit:.1f} s); the longest evaluation {finish_s:.1f} s")
    assert finish_s > limit + SLOW_EVAL_S / 2, "the evaluation outlasted the step-based stall limit"
    assert records(tmp_path, "evaluating"), "the ranks recorded their evaluation's progress"
    assert not left(marker)


def test_a_rank_stuck_inside_an_evaluation_is_named_as_hung(ci_config, tmp_path, marker):
    cfg = phases_job(ci_config, fail_mode="eval_hang", compile_stall_s=25.0)
    with pytest.raises(JobFailed) as info:
        run_job(cfg, progress="none", run_root=tmp_path)
    err = info.value
    assert err.kind == "hang" and err.rank == 1, str(err)
    assert "_maybe_fail_eval" in str(err), "the stuck rank's place in the code is named"
    assert not left(marker)


def test_ranks_held_to_their_cpu_share_leave_no_quota_group_when_one_fails(ci_config, tmp_path, marker):
    from helpers.core.cpu_share import PREFIX, CpuShareUnavailable, cpu_cgroup

    cfg = ci_config.replace(world_size=2, global_batch=16, steps=3, phase_samplers=("distributed", "stratified"),
                            rank_cpu_share=1.0, fail_rank=1, fail_step=2, fail_mode="raise", timeout_s=300.0)
    with pytest.raises(JobFailed) as info:
        run_job(cfg, progress="none", run_root=tmp_path)
    assert info.value.rank == 1, str(info.value)
    held = {r["rank"]: r["cpu_share"] for r in records(tmp_path, "ready")}
    try:
        parent, _ = cpu_cgroup()
    except CpuShareUnavailable:
        parent = None
    if parent is None or not all(v["held"] for v in held.values()):
        pytest.skip(f"no per-rank CPU quota here: {held}")
    assert held == {0: dict(share=1.0, held=True, why=None), 1: dict(share=1.0, held=True, why=None)}
    run_dir = next(tmp_path.rglob("config.json")).parent
    assert not list(parent.glob(f"{PREFIX}{run_dir.name}-*")), "the job's quota groups outlived it"
    assert not left(marker)
