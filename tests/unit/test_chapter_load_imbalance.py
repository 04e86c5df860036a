"""Chapter 01's steps without launching jobs: the planned splits, the figures from (fake) job records, the
per-preset choice, the ImageNet-scale table on small labels, the errata, the values the claims read."""

from types import SimpleNamespace

import numpy as np
import pytest

from helpers.topics import seen_classes

from helpers.chapters import load_imbalance as chapter
from helpers.conclusions.ch01 import chapter01_claims
from helpers.job.launch import JobResult
from helpers.job.straggler import straggler_verdict
from tests.unit.chapter_cases import capture_shown

LABELS = np.repeat(np.arange(10), 40)          # 10 classes x 40 images, class-sorted


@pytest.fixture
def shown(monkeypatch):
    """Tables and markdown the steps show, captured instead of displayed."""
    return capture_shown(monkeypatch, chapter)


def fake_result(classes_per_rank, accuracy, step_s=(9.0, 1.0, 1.2)):
    """A job's records: rank r reads ``classes_per_rank[r]`` (one class list per step), 2 images of each."""
    steps = {r: [{"step": j, "rank": r, "class_counts": [[c, 2] for c in cs], "step_s": step_s[j] * (1 + 0.1 * r),
                  "data_s": 0.001 * (r + 1), "loss": 2.0 + 0.1 * r - 0.2 * j}
                 for j, cs in enumerate(per_step)]
             for r, per_step in enumerate(classes_per_rank)}
    summaries = {r: {"num_classes": 10, "accuracy": accuracy} for r in steps}

    def metric(name):
        return JobResult.metric(SimpleNamespace(steps=steps), name)

    return SimpleNamespace(steps=steps, summaries=summaries, wall_s=12.0, metric=metric,
                           straggler=straggler_verdict(steps))


def fake_results():
    mixed = [[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [0, 2, 4, 6, 8]],
             [[5, 6, 7, 8, 9], [0, 1, 2, 3, 4], [1, 3, 5, 7, 9]]]
    shuffled = [[[0, 3, 7], [1, 4], [2, 9]], [[5, 8], [6, 2, 1], [0, 4, 9]]]
    return {"contiguous": fake_result([[[0]] * 3, [[5]] * 3], 0.10),
            "distributed": fake_result([[[0]] * 3, [[0]] * 3], 0.11),
            "distributed_shuffle": fake_result(shuffled, 0.12),
            "stratified": fake_result(mixed, 0.13)}


def test_the_planned_splits_show_the_class_sorted_failures():
    plan = chapter.plan_splits(LABELS, world_size=8, seed=0, global_batch=40)
    rows = {k: rest for k, *rest in plan.rows}
    assert list(rows) == list(chapter.STRATEGIES) == list(plan.shards)
    assert rows["stratified"][0] <= min(v[0] for v in rows.values()) and rows["contiguous"][0] > 0.5
    assert rows["distributed"][1] == 1, "5 images per rank x 8 ranks: 40 consecutive images, one class"
    assert rows["stratified"][1] == 10


@pytest.mark.parametrize("preset, rehearse, override, want", [
    ("ci", False, None, 1), ("cpu", False, None, 2), ("gpu8", False, None, 8), ("gpu8", True, None, 1),
    ("cpu", False, 3, 3)])
def test_imagenet_shards_read_per_preset(preset, rehearse, override, want):
    assert chapter.imagenet_shards_to_read(preset, rehearse, override) == want


def test_measured_figures_and_recorded_values_feed_the_claims(shown):
    results = fake_results()
    measured = chapter.measure(results, np.full(10, 40))
    assert measured.summary["min_classes_per_step"] == {"contiguous": 2, "distributed": 1,
                                                        "distributed_shuffle": 4, "stratified": 10}
    assert measured.summary["mean_batch_classes"]["contiguous"] == 1.0
    assert measured.step_spread["contiguous"] == pytest.approx(1.1)
    assert measured.data_wait_ms["contiguous"] == pytest.approx(2.0)
    rows = chapter.timing_rows(results, measured)
    # seconds per step: the slowest rank's (1.1x) over its steps; this job of its own built its graph in step 0
    assert rows[0][0] == "contiguous" and rows[0][1] == pytest.approx((1.1 + 1.32) / 2, abs=1e-3)
    later = fake_result([[[0]] * 3, [[5]] * 3], 0.1)
    for recs in later.steps.values():        # a later phase of one job: its first step is counted
        for i, rec in enumerate(recs):
            rec["job_step"] = 8 + i
    assert seen_classes.seconds_per_step(later) == pytest.approx((9.9 + 1.1 + 1.32) / 3, abs=1e-3)

    plan = chapter.plan_splits(LABELS, 8, 0, 40)
    base = SimpleNamespace(steps=3)
    index = SimpleNamespace(classes=tuple(f"c{i}" for i in range(10)), labels=LABELS)
    inet = {"max_tv": {"stratified": 0.001, "distributed_shuffle": 0.03}, "split_s": 0.5, "shards_read": 1}
    values = chapter.recorded_values("ci", False, base, index, plan, measured, inet, "no class_column")
    assert values["stratified_class_spread"] <= 1 < values["contiguous_class_spread"]
    assert values["class_column_rejected"] is True and values["imagenet_shards_iterated"] == 1
    claims = {c.id: c for c in chapter01_claims(values)}
    assert claims["homogeneous_batches"].holds is True and claims["imagenet_scale"].holds is True
    assert values["straggler"]["contiguous"]["rank"] is None and claims["time_verdict"].holds is True


def test_imagenet_scale_table_on_small_labels(shown):
    out = chapter.imagenet_scale(2, labels=np.repeat(np.arange(4), 50))
    assert out["shards_read"] == 2 and out["split_s"] > 0
    assert out["max_tv"]["stratified"] <= out["max_tv"]["distributed_shuffle"]
    (rows, headers), = shown
    assert headers == ["split", "time", "max TV"] and "2 shard(s) read" in rows[1][0]


def test_class_column_errata_reports_the_type_error(shown):
    error = chapter.class_column_errata()
    assert error and "class_column" in error
    assert "TypeError" in shown[0] and "num_shards" in shown[0]


def test_tables_and_figures_from_fake_jobs(shown):
    import matplotlib

    matplotlib.use("Agg")
    results = fake_results()
    measured = chapter.measure(results, np.full(10, 40))
    base = SimpleNamespace(steps=3, batch_per_rank=2, global_batch=4)
    index = SimpleNamespace(classes=tuple(f"c{i}" for i in range(10)))
    figs = [chapter.plot_class_mix(measured, index, base), chapter.plot_step_coverage(measured, index, base),
            chapter.plot_loss_per_rank(results), chapter.show_summary(measured),
            chapter.plot_time_split(results, measured)]
    chapter.show_timing(results, measured)
    assert all(f is not None for f in figs)
    (summary, headers), (timing, _) = shown
    assert [r[0] for r in summary] == list(chapter.STRATEGIES) and len(headers) == 4 == len(summary[0])
    assert [r[0] for r in timing] == list(chapter.STRATEGIES)
    assert all(row[-1].startswith("none") for row in timing)    # the verdicts: 1-2 ms data waits of 1 s steps


def test_one_job_runs_the_splits_and_seeds_as_phases_and_shows_their_time_without_the_first_step(shown, monkeypatch,
                                                                                                  tmp_path):
    from helpers.core.metrics import MetricsWriter
    from helpers.job.launch import load_result
    from helpers.train.phases import phase_names

    kinds = list(chapter.STRATEGIES)
    launched = []

    def fake_run_job(cfg, progress="auto", files=None):
        launched.append(cfg)
        cfg.save(tmp_path / "config.json")
        phases = phase_names(cfg)
        for r in range(cfg.world_size):
            out = MetricsWriter(tmp_path, r)
            for job_step, (i, k) in enumerate((i, k) for i in range(cfg.steps) for k in phases):
                out.write("step", step=i, job_step=job_step, phase=k, loss=1.0 + 0.1 * int(k[-1]),
                          class_counts=[[0, 1]], step_s=30.0 if job_step == 0 else 1.0, data_s=0.0)
            for k in phases:
                out.write("phase_summary", phase=k, train_s=3.0, finish_s=0.5, accuracy=0.1 * int(k[-1]),
                          start_digest=f"seed{k[-1]}")
            out.write("summary", phases=phases, phase_rounds=2, num_classes=10)
            out.close()
        return load_result(tmp_path, wall_s=40.0)

    monkeypatch.setattr(chapter, "run_job", fake_run_job)
    base = chapter.job_config("ci", rehearse=False, chapter="01", evaluate=True).replace(world_size=2,
                                                                                         global_batch=4, steps=3)
    results, repeats = chapter.run_strategies(base, "none", one_job=True, seeds=(1, 2))
    assert len(launched) == 1 and launched[0].phase_samplers == chapter.PHASE_ORDER and launched[0].phase_seeds == (1, 2)
    assert sorted(chapter.PHASE_ORDER) == sorted(kinds) and chapter.PHASE_ORDER[0] != "contiguous", \
        "the compiling first phase reads ahead: the contiguous split's slow reader must not start there"
    assert list(results) == kinds and chapter.same_start(results) is True and repeats["same_start"] is True
    assert repeats["accuracy"]["stratified"] == pytest.approx([0.1, 0.2])
    assert repeats["final_loss"]["contiguous"] == pytest.approx([1.1, 1.2])
    assert chapter.phase_seconds(results["contiguous"]) == pytest.approx((2.0, 0.5))   # 2 later steps, evaluation
    text = " ".join(str(x) for x in shown)
    assert "one digest per seed on every rank" in text and "first step (30.0 s" in text
    assert ("contiguous", 2.0, 0.5, 0.1) in shown[-1][0]
    shown.clear()
    fig = chapter.show_repeats(repeats)
    (rows, headers), = shown
    assert fig is not None and rows[-1] == ("stratified", "0.150 ± 0.071", "1.150 ± 0.071")
    assert headers[0] == "strategy (2 seeds: mean ± std)"


def test_seeds_that_share_a_start_are_not_repeats():
    one = {"a": SimpleNamespace(summaries={0: {"start_digest": "x"}})}
    assert chapter.seeds_same_start({1: one, 2: one}) is False, "two seeds, one starting state"
    other = {"a": SimpleNamespace(summaries={0: {"start_digest": "y"}})}
    assert chapter.seeds_same_start({1: one, 2: other}) is True


@pytest.mark.parametrize("preset, rehearse, override, want", [
    ("cpu", False, None, (1, 2, 3, 4, 5)), ("ci", False, None, (1, 2)), ("gpu8", True, None, (1, 2)),
    ("cpu", False, [7, 8], (7, 8))])
def test_seeds_per_preset(preset, rehearse, override, want):
    assert chapter.chapter_seeds(preset, rehearse, override) == want
    assert len(chapter.SEEDS["cpu"]) >= 5, "issue 32: at least 5 seeds at cpu"
