"""helpers.chapters.step_profile: chapter 04's plan, job settings, tables and recorded values (no jobs launched)."""

from pathlib import Path

import numpy as np
import pytest

from helpers.chapters import step_profile as S
from helpers.topics.comm_fusion import fusion_settings
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
    got = fusion_settings(plan, [4096, 4096, 4096, 4096])
    assert list(got) == ["auto", "size 1 (~256 KiB)", "index ~8 KB"]
    assert got["auto"] == ("fused_auto", FUSE_ALL)
    assert got["size 1 (~256 KiB)"][1] == {"allreduce": {"mode": "size", "config": 1}}
    assert got["index ~8 KB"] == ("index_8kb", {"allreduce": {"mode": "index", "config": [2]}})
    assert list(fusion_settings(S.PLANS["ci"], [4])) == ["auto"], "ci: unfused against auto only"


def test_amp_note_says_why_only_when_fewer_ranks():
    base = job_config("ci", world_size=2, global_batch=16)
    assert S.amp_ranks_note(2, base, "ci").endswith("8 images per rank.")
    fewer = S.amp_ranks_note(1, base, "ci")
    assert "**1 rank(s)**" in fewer and "(other `ci` jobs: 2; why: appendix)" in fewer


def test_amp_table_counts_each_kind_and_compares_with_O0():
    kinds = S.amp_kinds(("Conv2D",))
    assert kinds == ["Cast", "Conv2D", "BatchNorm", "BatchNormGrad", "ReLU"]
    rows = S.amp_table_rows({"O0": 2.0, "O3": 3.0}, {"O0": {"Conv2D": (20, 5.04)}, "O3": {"Cast": (7, 1.0)}}, kinds)
    assert rows[0][:3] == ("O0", 2.0, 1.0) and rows[0][3:5] == ("0 / 0.0", "20 / 5.0")
    assert rows[1][:4] == ("O3", 3.0, 1.5, "7 / 1.0")
    gpu = {"O0": {"BatchNormWithActivation": (20, 2.0), "BatchNorm": (3, 0.5)}}
    assert S.amp_table_rows({"O0": 2.0}, gpu, ["BatchNorm"], "GPU")[0][3] == "23 / 2.5", "the GPU's names for BatchNorm"


def fake_job(step=1.0, comm=0.5, calls=2, world=2, grads=(), **cfg):
    """A ProfiledJob whose result reports ``step`` s per unprofiled step and whose profile has one step per rank;
    ``cfg``: config fields other than the ci preset's (world size ``world``, 3 steps, profiled from step 2)."""
    config = job_config("ci", **{**dict(world_size=world, global_batch=8 * world, steps=3, profile=True,
                                        profile_skip_steps=2), **cfg})

    class Result:
        def metric(self, name):
            return np.full((config.world_size, config.steps), step)

    Result.config = config
    ranks = {r: RankProfile(r, Path("."), [StepBreakdown(0.0, 1.0, step - comm, comm, 0.0, calls, calls, 9)], [[]],
                            [1024] * calls)
             for r in range(config.world_size)}
    jp = JobProfile(Path("."), ranks, [2], np.full((config.world_size, 1), step), np.zeros((config.world_size, 1)),
                    list(grads))
    return S.ProfiledJob(Result(), jp)


def gpu8_like_chapter(amp_steps, amp_profile_from):
    """Chapter 04 as the gpu8 rehearsal ran it: the preset trains at AMP O2, so the baseline and the fusion sweep are
    O2 jobs; the AMP jobs (O0..O3, fusion auto) run on as many ranks with the plan's ``amp_steps`` / profile start.
    Step times (s) from that run: unfused 2.350, sweep auto 2.363, AMP O0 with fusion auto 1.224."""
    base = dict(amp_level="O2", loss_scale="dynamic")
    baseline = fake_job(2.350, calls=162, comm_fusion={}, **base)
    sweep = S.Sweep({"unfused (default)": baseline, "auto": fake_job(2.363, calls=7, comm_fusion=FUSE_ALL, **base)})
    amp_jobs = {lv: fake_job(t, calls=7, comm_fusion=FUSE_ALL, steps=amp_steps, profile_skip_steps=amp_profile_from,
                             amp_level=lv, loss_scale="dynamic")
                for lv, t in (("O0", 1.224), ("O1", 2.5), ("O2", 2.2), ("O3", 2.6))}
    amp = S.Amp(amp_jobs, 2, "im2col", ("Im2Col",), ["Cast"], {lv: {"Cast": 1.0} for lv in amp_jobs})
    ch = S.Chapter("gpu8", True, baseline.result.config, dict(S.PLANS["rehearsal"], amp_world_size=2), [4])
    return ch, baseline, sweep, amp


def test_before_after_compares_only_jobs_measured_like_the_baseline(monkeypatch):
    """33.2: the AMP jobs ran other steps / another profiler start than the baseline: their step times are not
    measured like it, so none of them may be the "after" (the old code took AMP O0's 1.224 s against the baseline's
    2.350 s: 1.92x). Here the fastest job measured like the baseline is the baseline itself (auto: 2.363 s)."""
    monkeypatch.setattr(S, "show_table", lambda *a: None)
    monkeypatch.setattr(S, "show_md", lambda *a: None)
    ch, baseline, sweep, amp = gpu8_like_chapter(amp_steps=12, amp_profile_from=9)
    out = S.before_after(ch, baseline.step_s, sweep, amp)
    assert out["after"] == pytest.approx(out["before"]), "no AMP job measured otherwise may win"
    assert out["label"] == out["before_label"] == "fusion unfused (default), AMP O2"


def test_before_after_labels_the_amp_level_and_keeps_one_measurement_per_setting(monkeypatch):
    """Measured alike, AMP O0 + fusion auto is a real candidate, labelled with its level against the baseline's O2;
    the AMP O2 job is the sweep's "auto" setting again (gpu8 trains at O2), so only the sweep's measurement counts."""
    monkeypatch.setattr(S, "show_table", lambda *a: None)
    ch, baseline, sweep, amp = gpu8_like_chapter(amp_steps=3, amp_profile_from=2)
    cands = S.after_candidates(baseline, list(sweep.jobs.items()) + [("auto", j) for j in amp.jobs.values()])
    assert list(cands) == ["fusion unfused (default), AMP O2", "fusion auto, AMP O2", "fusion auto, AMP O0",
                           "fusion auto, AMP O1", "fusion auto, AMP O3"]
    assert cands["fusion auto, AMP O2"] is sweep.jobs["auto"]
    out = S.before_after(ch, baseline.step_s, sweep, amp)
    assert out["label"] == "fusion auto, AMP O0" and out["after"] / out["before"] == pytest.approx(2.350 / 1.224)


def test_measured_differently_names_the_fields():
    a, b = job_config("ci"), job_config("ci", steps=12, world_size=1, global_batch=8)
    assert S.measured_differently(a, a.replace(amp_level="O3", comm_fusion={})) == []
    assert S.measured_differently(a, b) == ["world_size", "global_batch", "steps"]


def test_sweep_row_and_recorded_values_from_the_jobs():
    base, fused = fake_job(2.0, 1.0, calls=20), fake_job(1.0, 0.2, calls=1)
    assert S.sweep_row("auto", fused) == dict(label="auto", allreduce_per_step=1, bucket_mb=pytest.approx(4 / 1024),
                                              predicted_buckets=None, step_s=1.0, comm_share=pytest.approx(0.2),
                                              sizes_agree=None)
    on_card = fake_job(1.0, 0.2, calls=2, grads=[2**20] * 4, comm_fusion=FUSE_ALL, device_target="GPU")
    for r, rp in on_card.profile.ranks.items():      # a card's profile: no AllReduce sizes measured
        on_card.profile.ranks[r] = RankProfile(r, Path("."), rp.steps, rp.step_events)
    row = S.sweep_row("auto", on_card)
    assert row["bucket_mb"] == pytest.approx(2.0) and row["predicted_buckets"] == 1 and row["sizes_agree"] is None
    ch = S.Chapter("ci", False, base.result.config, dict(S.PLANS["ci"], amp_world_size=1), [4] * 20)
    sweep = S.Sweep({"unfused (default)": base, "auto": fused})
    sweep.rows = [S.sweep_row(k, j) for k, j in sweep.jobs.items()]
    amp = S.Amp({k: fake_job(1.0, 0.0, calls=0, world=1) for k in S.AMP_LEVELS}, 1, "native",
                ("Conv2D",), ["Cast", "Conv2D"], {k: {"Cast": 0.0, "Conv2D": 20.0} for k in S.AMP_LEVELS})
    cross = S.CrossCheck(1.1, 2.0, 2.2, 1.5)
    facts = dict(mindspore_version="2.10", comm_fusion_module_exists=False, fusion_enabled_by_default=False,
                 o3_same_kernels=True)
    after = dict(label="fusion auto, AMP O0", before_label="fusion unfused (default), AMP O0", before=8.0, after=16.0,
                 after_steps=[1.0, 1.0])
    ids = {"ids_only": base, "ids_with_fusion": None}
    r = S.recorded_values(ch, base, cross, sweep, ids, amp, after, facts)
    assert r["allreduce_per_step"] == {"baseline": 20, "fused": 1}
    assert r["step_time_s"] == {"baseline": 2.0, "fused": 1.0}
    assert r["comm_share_without_profiler"] == pytest.approx(0.25)
    assert r["cell_comm_fusion_allreduce_per_step"] == 20 and r["cell_ids_with_fusion_allreduce_per_step"] is None
    assert r["amp_relative"]["ties"] == ["O1", "O2", "O3"] and r["gradient_tensors"] == 20
    assert r["amp_cast_kernels_per_step"] == {k: 0.0 for k in S.AMP_LEVELS}
    assert r["gradient_mb"] == pytest.approx(80 / 2**20) and r["before_config"] == after["before_label"]
    claims = {c.id: c for c in ch04.build(r)}        # the chapter's conclusions read every recorded key they need
    assert claims["fusion_cuts_allreduce_calls"].holds is True
    assert claims["amp_adds_cast_kernels"].holds is None, "no Cast counted at any level: no verdict"


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


def test_gradient_bytes_follow_the_jobs_class_count():
    cfg = job_config("ci")
    ten, thousand = S.gradient_bytes(cfg), S.gradient_bytes(cfg, 1000)
    features = ten[-2] // (4 * 10)                      # the classifier: weight (classes x features), bias (classes)
    assert len(ten) == len(thousand) and sum(thousand) - sum(ten) == 4 * 990 * (features + 1)


def test_auto_fusion_makes_several_buckets_of_resnet50():
    """34.10: ``auto`` is a threshold (64 x 256 KiB), not one bucket. ResNet-50's 161 gradient tensors (~98 MiB with
    1000 classes) make 6 buckets; the gpu8 rehearsal measured 162 -> 7 AllReduce calls on CPU (the 7th: the dynamic
    loss scale's overflow flag)."""
    grads = S.gradient_bytes(job_config("gpu8"), 1000)
    assert len(grads) == 161 and 97 < sum(grads) / 2**20 < 98
    assert S.predicted_buckets(grads, FUSE_ALL) == 6 and S.predicted_buckets(grads, {}) == 161


def test_a_jobs_gradient_bytes_use_the_class_count_it_recorded(tmp_path):
    from helpers.job.launch import JobResult

    cfg = job_config("ci")
    result = JobResult(tmp_path, cfg, 0, 1.0, summaries={0: {"num_classes": 1000}, 1: {"num_classes": 1000}})
    assert S.job_gradient_bytes(result) == S.gradient_bytes(cfg, 1000)
    with pytest.raises(ValueError, match="no num_classes"):
        S.job_gradient_bytes(JobResult(tmp_path, cfg, 0, 1.0, summaries={0: {}}))
