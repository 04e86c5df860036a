"""benchmarks/RESULTS.md builder: goals judged, rows from each benchmark's JSON, markdown shape (no jobs)."""

import json
import re

import pytest

from benchmarks.table import Row, collect, goal_rows, judge, render, write_results_md

MACHINE = {"cores": 2, "cpu": "Test CPU", "load_avg_1_5_15": [1.5, 2.0, 2.5], "date_utc": "2026-01-01 00:00"}


@pytest.mark.parametrize("value, goal, expected", [
    (1.2, ">= 1.0", "met"),
    (1.0, ">= 1.0", "met"),
    (0.75, ">= 1.0", "missed by 0.25 (25 %)"),
    (0.5, "<= 0.6", "met"),
    (0.9, "<= 0.6", "missed by 0.3 (50 %)"),
    (900.0, "<= 600", "missed by 300 (50 %)"),
    (0.4, "< 0.5", "met"),
    (1.0, "0.75..1.25", "met"),
    (1.5, "0.75..1.25", "missed by 0.25 (outside 0.75..1.25)"),
    (None, ">= 1.0", "not measured"),
    (3.0, "", ""),
])
def test_judge(value, goal, expected):
    assert judge(value, goal) == expected


def test_judge_rejects_an_unreadable_goal():
    with pytest.raises(ValueError):
        judge(1.0, "about one")


def _results():
    m = {"machine": {"load_avg_1_5_15": [7.25, 6.0, 5.0]}}
    return {
        "vs_model_train": {**m, "preset": "ci", "world_size": 8, "global_batch": 64, "ratio": 1.4,
                           "ratios": {"ours_over_model_train": 1.4, "ours_over_model_train_fused": 0.97}},
        "vs_mindcv": {**m, "ratio": None, "error": "mindcv unusable: ImportError: no module"},
        "scaling": {**m, "preset": "ci", "efficiency": 0.62},
        "course_time": {"ci": {"total_s": 480.0, "all_ok": True, "machine": {"load_avg_1_5_15": [3.0, 2, 1]},
                               "jobs": {"all": {"jobs": 10, "launch_s": 200.0, "first_step_s": 100.0,
                                                "rest_s": 90.0, "exit_s": 5.0, "total_s": 395.0},
                                        "jobs": [{"world_size": 8}] * 9 + [{"world_size": 1}]},
                               "noop_job": {"world_size": 8, "seconds": [12.0, 14.0], "median_s": 13.0}}},
        "knobs": {**m, "ratios": {"threads_2": 0.9, "workers_2": 1.1}, "reference": {"threads_2": "base"},
                  "recommendation": {"threads_per_rank": 1, "dataset_workers": 2}},
        "launch_overhead": {"ratio_run_job_over_msrun": 0.74},
        "comm_fusion": {"preset": "cpu", "step_time_ratio_fused_over_baseline": 0.48,
                        "allreduce_per_step": {"baseline": 62, "fused": 1}},
        "hybrid": {"layouts": {"2x4": {"classifier_bytes_vs_dp": 0.25, "img_per_s_vs_dp": 0.77}}},
        "accumulation": {"cases": {"oom_experiment": {"activation_ratio_accumulated_over_full": 0.3,
                                                      "throughput_ratio_accumulated_over_full": 0.91}},
                         "planner": {"planner_vs_measured_slope_ratio": 0.99}},
        "sampler": {"speedup_vs_iterating": 35.0, "stratified_all_shards_s": 0.2,
                    "max_tv": {"stratified": 0.001}, "environment": {"load_avg_1min": 0.5}},
    }


def _by_what(rows):
    return {r.what: r for r in rows}


def test_goal_rows_cover_every_benchmark_and_judge_them():
    rows = _by_what(goal_rows(_results()))
    mt = rows["our worker / Model.train (DATA_PARALLEL), img/s"]
    # without the fusion our worker uses, Model.train is a weaker baseline: shown, never judged
    assert (mt.measured, mt.goal, mt.load) == (1.4, "", 7.25) and "not equal terms" in mt.note
    fused = rows["our worker / Model.train with the preset's comm fusion, img/s"]
    assert (fused.goal, judge(fused.measured, fused.goal)) == (">= 1.05", "missed by 0.08 (8 %)")
    cv = rows["our worker / mindcv trainer, img/s"]
    assert cv.measured is None and "ImportError" in cv.note
    assert rows["8 ranks / 1 process (all cores), img/s at the same global batch"].measured == 0.62
    ci = rows["whole course, preset ci, seconds"]
    assert (ci.measured, ci.goal, ci.load, ci.unit) == (480.0, "<= 360", 3.0, "s")
    assert rows["whole course, preset cpu, seconds"].measured is None      # no cpu entry yet
    launch = rows["course ci: seconds launching jobs (msrun start to the last rank through init())"]
    assert launch.measured == 200.0 and "10 jobs, 20 s each" in launch.note and "of the course's 480 s" in launch.note
    floor = rows["course ci: 8-rank jobs x an empty 8-rank job's seconds (the start-up floor)"]
    assert floor.measured == 9 * 13.0 and "9 jobs x 13.0 s" in floor.note and "24% of the course" in floor.note
    assert rows["knob workers_2 / base, img/s"].goal == ""
    assert "dataset_workers" in rows["knobs: recommended ci/cpu preset settings"].note
    assert rows["hybrid 2x4: img/s / pure DP"].measured == 0.77
    assert rows["stratified split, worst shard's max TV"].load == 0.5
    assert rows["memory planner / measured activation slope"].goal == "0.75..1.25"


def test_load_is_the_range_over_the_runs_when_they_record_it():
    res = {"scaling": {"efficiency": 0.7, "machine": {"load_avg_1_5_15": [1.0, 1, 1]},
                       "runs": {"8_ranks": [{"load_avg_1min": 9.24}, {"load_avg_1min": 16.55}],
                                "1_process": [{"load_avg_1min": 7.64}], "_failed": {}}}}
    row = _by_what(goal_rows(res))["8 ranks / 1 process (all cores), img/s at the same global batch"]
    assert row.load == "7.6-16.6"
    assert "| 7.6-16.6 |" in render([row], MACHINE)


def test_goal_rows_without_results_still_list_issue_7_goals_as_not_measured():
    rows = goal_rows({})
    assert {r.what for r in rows} >= {"our worker / Model.train with the preset's comm fusion, img/s",
                                      "our worker / mindcv trainer, img/s",
                                      "whole course, preset ci, seconds", "whole course, preset cpu, seconds"}
    assert all(r.measured is None for r in rows)


def test_render_is_one_markdown_table_with_the_machine_line():
    rows = [Row("a | b", 1.23456, ">= 1.0", "results/x.json", 2.0), Row("t", 700.0, "<= 600", "results/c.json",
                                                                       unit="s"),
            Row("info", None, "", "results/k.json", note="n")]
    text = render(rows, MACHINE)
    assert "2 cores" in text and "2026-01-01 00:00" in text and "1.50 / 2.00 / 2.50" in text
    table = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert len(table) == 2 + len(rows)
    assert all(len(re.split(r"(?<!\\)\|", ln)) == 9 for ln in table)   # 7 columns; "a \\| b" stays one cell
    assert "| 1.23x | >= 1.0 | met | 2.0 |" in text
    assert "| 700 s | <= 600 | missed by 100 (17 %) |" in text
    assert "| info | — | — | (info) |" in text


def test_collect_and_write_results_md(tmp_path):
    (tmp_path / "scaling.json").write_text(json.dumps({"efficiency": 0.9, "preset": "ci"}))
    (tmp_path / "broken.json").write_text("{not json")
    assert set(collect(tmp_path)) == {"scaling"}
    out = tmp_path / "RESULTS.md"
    text = write_results_md(tmp_path, out)
    assert out.read_text() == text and "| 0.9x | >= 0.9 | met |" in text


def test_mindcv_is_judged_only_on_equal_terms():
    unequal = _by_what(goal_rows({"vs_mindcv": {"ratio": 1.48}}))["our worker / mindcv trainer, img/s"]
    assert unequal.goal == "" and "not equal terms" in unequal.note
    equal = _by_what(goal_rows({"vs_mindcv": {"ratio": 1.1, "equal_terms": True}}))["our worker / mindcv trainer, img/s"]
    assert (equal.goal, judge(equal.measured, equal.goal)) == (">= 1.05", "met")
    assert "nn.Conv2d" in equal.note and "same comm fusion" in equal.note
    info = _by_what(goal_rows({"vs_mindcv": {"ratio": 1.0, "equal_terms": True,
                                             "ours_im2col_over_mindcv_fused": 2.1}}))
    row = info["our worker with the preset's im2col convolution / mindcv fused, img/s"]
    assert (row.measured, row.goal) == (2.1, "") and "not equal terms" in row.note
    assert "our worker / mindcv as its train.py runs (no comm fusion), img/s" not in info   # not run: no row


def test_hybrid_row_shows_each_layouts_median_and_range_and_the_load_of_its_runs():
    runs = {"8x1": [{"img_per_s": 100.0, "load_avg_1min": 2.0}], "2x4": [{"img_per_s": 80.0, "load_avg_1min": 9.0}]}
    hyb = {"preset": "cpu", "num_classes": 1000, "repeats": 3, "runs": runs, "layouts": {
        "8x1": {"img_per_s": 100.0, "img_per_s_runs": [90.0, 100.0, 120.0]},
        "2x4": {"img_per_s": 80.0, "img_per_s_runs": [70.0, 80.0, 85.0], "img_per_s_vs_dp": 0.8,
                "classifier_bytes_vs_dp": 0.25}}}
    row = _by_what(goal_rows({"hybrid": hyb}))["hybrid 2x4: img/s / pure DP"]
    assert row.note == "cpu preset, 1000 classes; median of 3: 2x4 80 img/s (runs 70-85) vs 8x1 100 img/s (runs 90-120)"
    assert row.load == "2.0-9.0" and judge(row.measured, row.goal) == "met"


def test_course_timings_table_has_a_column_per_timed_preset():
    from benchmarks.table import course_timings

    assert course_timings({}) == "" and course_timings(None) == ""
    ct = {"ci": {"total_s": 600.0, "machine": {"date_utc": "2026-12-02 20:00"},
                 "chapters": {"00_env": {"seconds": 90.0, "ok": True}, "01_x": {"seconds": 150.0, "ok": False}},
                 "jobs": {"chapters": {"00": {"jobs": 2, "launch_s": 41.0}}}}}
    text = course_timings(ct)
    assert "| chapter | `ci` (2026-12-02 20:00) |" in text
    assert "| `00_env` | 1.5 min (2 jobs, launches 41 s) |" in text
    assert "| `01_x` | 2.5 min FAILED |" in text and "| **total** | **10.0 min** |" in text


def test_measured_on_groups_result_files_by_cpu():
    from benchmarks.table import measured_on

    text = measured_on({"a": {"machine": {"cpu": "AMD EPYC"}}, "b": {"ratio": 1.0},
                        "course_time": {"benchmark": "course_time", "ci": {"machine": {"cpu": "Intel Xeon"}}},
                        "c": {"machine": {"cpu": "AMD EPYC"}}})
    assert "**AMD EPYC**: a, c" in text and "**Intel Xeon**: course_time (ci)" in text
    assert "**not recorded**: b" in text
    assert measured_on({}) == ""


def test_sampler_phases_row_judges_one_job_against_one_job_each():
    res = {"sampler_phases": {"preset": "ci", "steps": 4, "repeats": 3, "one_job_over_own_jobs": 0.55,
                              "median_s": {"one_job": 55.0, "own_jobs": 100.0}, "max_loss_diff": 0.0}}
    row = _by_what(goal_rows(res))["chapter 01's four splits: one job (phases) / one job each, wall seconds"]
    assert (row.measured, judge(row.measured, row.goal)) == (0.55, "met")
    assert "55.0 s vs 100.0 s" in row.note and "loss difference between the two ways 0.0" in row.note


def test_empty_job_row_states_the_import_floor_when_measured():
    job = {k: {"median": v, "min": v, "max": v} for k, v in {
        "wall_s": 16.0, "until_processes_start_s": 1.5, "import_mindspore_s": 6.0, "init_s": 6.5,
        "init_spread_s": 2.8, "after_last_rank_ready_s": 0.9, "import_cpu_s": 1.4, "import_floor_s": 6.3}.items()}
    what = "empty 8-rank job (msrun -> every rank through init() -> exit), seconds"
    row = _by_what(goal_rows({"startup": {"repeats": 3, "empty_job": job}}))[what]
    assert row.note.endswith("one import mindspore takes 1.40 CPU s, so 9 processes need 6.3 s of these cores "
                             "before any init()")
    del job["import_cpu_s"], job["import_floor_s"]      # an older JSON: no floor, the rest of the note stays
    assert "CPU s" not in _by_what(goal_rows({"startup": {"repeats": 3, "empty_job": job}}))[what].note


def test_ci_time_reads_pytest_durations_by_group_and_the_table_shows_them():
    from benchmarks.ci_time import parse_pytest_log

    log = """
============================= slowest durations =============================
460.74s call     tests/notebooks/test_rehearsal.py::test_04_rehearsal
436.52s call     tests/notebooks/test_ch02.py::test_02_oom_gradient_accumulation
63.73s setup    tests/jobs/test_profiling_jobs.py::test_what_mindspore_writes_on_cpu
58.05s call     tests/jobs/test_faults.py::test_a_stopped_rank_is_a_hang_of_that_rank_not_a_crash
1.50s call     tests/unit/test_strategy.py::test_merge_then_resplit_round_trip
136.94s call     tests/browser/test_jupyterlab.py::test_chapter00_runs_in_jupyterlab
============ 984 passed, 1 skipped in 1688.30s (0:28:08) =============
"""
    got = parse_pytest_log(log)
    assert got["summary"] == "984 passed, 1 skipped" and got["pytest_s"] == 1688.3
    assert got["groups_s"] == {"rehearsal 04": 460.7, "notebook ch02": 436.5, "tests/browser/test_jupyterlab.py": 136.9,
                               "tests/jobs": 121.8, "tests/unit": 1.5}
    assert next(iter(got["slowest_tests_s"])) == "tests/notebooks/test_rehearsal.py::test_04_rehearsal"
    row = _by_what(goal_rows({"ci_time": {"commit": "abc1234", "returncode": 0, "total_s": 1800.0,
                                          "setup_s": 111.7, **got}}))[".ci/run on a clean clone, seconds"]
    assert (row.measured, judge(row.measured, row.goal)) == (1800.0, "missed by 900 (100 %)")
    assert row.note.startswith("commit abc1234: 984 passed, 1 skipped; pytest 1688 s, venv and installs 112 s")
    assert "rehearsal 04 461, notebook ch02 436" in row.note


def test_course_seconds_splits_each_chapter_into_job_phases_and_the_time_outside_jobs():
    from benchmarks.table import course_seconds

    assert course_seconds(None) == "" and course_seconds({"ci": {"total_s": 1.0}}) == ""
    phases = {"jobs": 2, "launch_s": 28.0, "first_step_s": 23.0, "rest_s": 1.4, "exit_s": 0.2, "total_s": 53.0}
    ct = {"ci": {"chapters": {"00_environment_setup": {"seconds": 64.0, "ok": True}},
                 "jobs": {"chapters": {"00": phases}}}}
    text = course_seconds(ct)
    assert "| `00_environment_setup` | 64 | 2 | 28 | 23 | 1 | 0 | 11 |" in text
    assert "| **total** | **64** | **2** | **28** | **23** | **1** | **0** | **11** |" in text


def test_time_split_rows_judge_the_overhead_and_the_agreement():
    d = {"preset": "ci", "every": 10, "overhead": 0.021, "split_step_extra": 0.21, "mean_step_ratio_on_over_off": 1.02,
         "agreement": {"comm_share_difference": 0.18, "first_look_comm_share": 0.40, "profiler_comm_share": 0.58}}
    rows = {r.what: r for r in goal_rows({"time_split": d}) if r.source == "results/time_split.json"}
    over = rows["time split: extra step time of the always-on split (sampled steps)"]
    agree = rows["time split: communication share, |first look - profiler| (chapter 04)"]
    assert judge(over.measured, over.goal) == "met" and "one step in 10 split" in over.note and "21 %" in over.note
    assert judge(agree.measured, agree.goal).startswith("missed by 0.03") and "first look 0.400" in agree.note


def test_memory_lever_rows_are_informational_planner_and_plain_ratios():
    lever = {"slope_ratio_vs_plain": 1.13, "step_time_ratio_vs_plain": 1.33, "batches": [32, 64, 128],
             "max_loss_diff_vs_plain": 0.0}
    d = {"measured": {"im2col": {
        "levers": {"plain": {"slope_mib_per_image": 3.6}, "recompute_block": lever},
        "planner": {"plain step (fp32)": {"planned": 3.34, "measured": 3.6, "planned_over_measured": 0.93,
                                          "where": "CPU: measured"},
                    "recompute each residual block (one at a time)": {"planned": 0.99, "measured": None,
                                                                      "planned_over_measured": None, "where": "x"}}}}}
    rows = {r.what: r for r in goal_rows({"memory_levers": d}) if r.source == "results/memory_levers.json"}
    assert set(rows) == {"memory levers (im2col): plain step (fp32), planner / measured MiB per image",
                         "memory levers (im2col): recompute_block / plain, MiB per image"}
    assert all(r.goal == "" for r in rows.values())
    rec = rows["memory levers (im2col): recompute_block / plain, MiB per image"]
    assert rec.measured == 1.13 and "step time 1.33x plain" in rec.note


def test_batchnorm_group_rows_are_informational_paired_differences():
    from tests.unit.test_bn_groups import fake_bench

    d = {**fake_bench(), "judged_on": "held_out_loss"}
    rows = {r.what: r for r in goal_rows({"bn_groups": d}) if r.source == "results/bn_groups.json"}
    row = rows["BatchNorm groups: 16 x 4 minus 1 x 64, held-out loss after 60 updates"]
    assert row.goal == "" and row.measured == pytest.approx(0.05) and "beyond the seeds' spread" in row.note
    assert "within" in rows["BatchNorm groups: 4 x 16 minus 1 x 64, held-out loss after 60 updates"].note
