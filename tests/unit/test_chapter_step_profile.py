"""helpers.chapters.step_profile: chapter 04's plan, job settings, tables and recorded values (no jobs launched)."""

from pathlib import Path

import numpy as np
import pytest

from helpers.chapters import step_profile as S
from helpers.conclusions import ch04
from helpers.core.config import FUSE_ALL, job_config
from helpers.topics.kernel_trace import StepBreakdown
from helpers.topics.profiling import JobProfile
from helpers.topics.rank_profile import RankProfile


def test_plan_is_the_presets_with_overrides_that_are_set():
    plan = S.chapter_plan("cpu", False, steps=None, bucket_mb=[2, 4])
    assert plan["steps"] == S.PLANS["cpu"]["steps"] and plan["bucket_mb"] == [2, 4]
    assert S.chapter_plan("gpu8", True) == S.PLANS["rehearsal"]
    assert S.chapter_plan("ci", False) is not S.PLANS["ci"], "a copy: the presets stay as they are"


def test_every_plan_profiles_after_its_unprofiled_steps():
    for plan in S.PLANS.values():
        assert 1 < plan["profile_from"] < plan["steps"] and 1 < plan["amp_profile_from"] < plan["amp_steps"]


def test_fusion_settings_follow_the_plan():
    plan = dict(bucket_mb=[1], index_bucket_kb=[8])
    got = S.fusion_settings(plan, [4096, 4096, 4096, 4096])
    assert list(got) == ["auto", "size 1 MB", "index ~8 KB"]
    assert got["auto"] == ("fused_auto", FUSE_ALL)
    assert got["size 1 MB"][1] == {"allreduce": {"mode": "size", "config": 1}}
    assert got["index ~8 KB"] == ("index_8kb", {"allreduce": {"mode": "index", "config": [2]}})
    assert list(S.fusion_settings(S.PLANS["ci"], [4])) == ["auto"], "ci: unfused against auto only"


def test_amp_note_says_why_only_when_fewer_ranks():
    base = job_config("ci", world_size=2, global_batch=16)
    assert S.amp_ranks_note(2, base, "ci").endswith("8 images per rank.")
    fewer = S.amp_ranks_note(1, base, "ci")
    assert "**1 rank(s)**" in fewer and "fewer than the chapter's 2 in the `ci` preset" in fewer


def test_amp_table_counts_each_kind_and_compares_with_O0():
    kinds = S.amp_kinds(("Conv2D",))
    assert kinds == ["Cast", "Conv2D", "BatchNorm", "BatchNormGrad", "ReLU"]
    rows = S.amp_table_rows({"O0": 2.0, "O3": 3.0}, {"O0": {"Conv2D": (20, 5.04)}, "O3": {"Cast": (7, 1.0)}}, kinds)
    assert rows[0][:3] == ("O0", 2.0, 1.0) and rows[0][3:5] == ("0 / 0.0", "20 / 5.0")
    assert rows[1][:4] == ("O3", 3.0, 1.5, "7 / 1.0")


def test_after_candidates_add_amp_only_when_given():
    rows = [dict(label="auto", step_s=1.0, allreduce_per_step=1, comm_share=0.2)]
    assert S.after_candidates(rows) == {"fusion: auto": (1.0, 1, 0.2)}
    both = S.after_candidates(rows, {"O3": (0.5, 1, 0.1)})
    assert min(both, key=lambda k: both[k][0]) == "fusion auto + AMP O3"


def fake_job(step=1.0, comm=0.5, calls=2, world=2):
    """A ProfiledJob whose result reports ``step`` s per unprofiled step and whose profile has one step per rank."""
    class Result:
        config = job_config("ci", world_size=world, global_batch=8 * world, steps=3, profile=True, profile_skip_steps=2)

        def metric(self, name):
            return np.full((world, 3), step)

    ranks = {r: RankProfile(r, Path("."), [StepBreakdown(0.0, 1.0, step - comm, comm, 0.0, calls, calls, 9)], [[]],
                            [1024] * calls)
             for r in range(world)}
    jp = JobProfile(Path("."), ranks, [2], np.full((world, 1), step), np.zeros((world, 1)))
    return S.ProfiledJob(Result(), jp)


def test_sweep_row_and_recorded_values_from_the_jobs():
    base, fused = fake_job(2.0, 1.0, calls=20), fake_job(1.0, 0.2, calls=1)
    assert S.sweep_row("auto", fused) == dict(label="auto", allreduce_per_step=1, bucket_mb=pytest.approx(4 / 1024),
                                              step_s=1.0, comm_share=pytest.approx(0.2))
    ch = S.Chapter("ci", False, base.result.config, dict(S.PLANS["ci"], amp_world_size=1), [4] * 20)
    sweep = S.Sweep({"unfused (default)": base, "auto": fused})
    sweep.rows = [S.sweep_row(k, j) for k, j in sweep.jobs.items()]
    amp = S.Amp({k: fake_job(1.0, 0.0, calls=0, world=1) for k in S.AMP_LEVELS}, 1, "native",
                ("Conv2D",), ["Cast", "Conv2D"], {k: {"Cast": 0.0, "Conv2D": 20.0} for k in S.AMP_LEVELS})
    cross = S.CrossCheck(1.1, 2.0, 2.2, 1.5)
    facts = dict(mindspore_version="2.10", comm_fusion_module_exists=False, fusion_enabled_by_default=False,
                 o3_same_kernels=True)
    after = dict(label="fusion: auto", before=8.0, after=16.0)
    ids = {"ids_only": base, "ids_with_fusion": None}
    r = S.recorded_values(ch, base, cross, sweep, ids, amp, after, facts)
    assert r["allreduce_per_step"] == {"baseline": 20, "fused": 1}
    assert r["step_time_s"] == {"baseline": 2.0, "fused": 1.0}
    assert r["comm_share_without_profiler"] == pytest.approx(0.25)
    assert r["cell_comm_fusion_allreduce_per_step"] == 20 and r["cell_ids_with_fusion_allreduce_per_step"] is None
    assert r["amp_relative"]["ties"] == ["O1", "O2", "O3"] and r["gradient_tensors"] == 20
    assert r["amp_cast_kernels_per_step"] == {k: 0.0 for k in S.AMP_LEVELS}
    claims = {c.id: c for c in ch04.build(r)}        # the chapter's conclusions read every recorded key they need
    assert claims["fusion_cuts_allreduce_calls"].holds is True


def test_chapter_runs_graph_changing_jobs_in_a_cache_of_their_own(monkeypatch):
    seen = []
    monkeypatch.setattr(S, "run_job", lambda cfg, progress: seen.append(cfg) or cfg)
    base = job_config("ci", compile_cache=True, comm_fusion={})
    ch = S.Chapter("ci", False, base, dict(S.PLANS["ci"]), [4])
    ch.run("plain")
    ch.run("o3", amp_level="O3")
    assert seen[0].name == "plain" and "MS_COMPILER_CACHE_PATH" not in seen[0].env
    assert seen[1].env["MS_COMPILER_CACHE_PATH"].endswith(tuple("0123456789abcdef"))


def test_gradient_bytes_are_the_models_float32_gradients():
    from helpers.train.models import build_model, count_parameters

    cfg = job_config("ci")
    got = S.gradient_bytes(cfg)
    assert sum(got) == 4 * count_parameters(build_model(cfg.arch, 10, cfg.width, cfg.stem, "native"))
    assert len(got) >= 20, "ResNet-18: one tensor per conv, BN scale/shift and the classifier's two"
