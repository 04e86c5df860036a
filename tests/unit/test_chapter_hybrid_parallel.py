"""Chapter 03's steps without launching jobs: layouts per world size, the tables, the refused strategy files, the
hand merge, the comparison with the reference and the values the claims read (from fake job records)."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from helpers.chapters import hybrid_parallel as chapter
from helpers.conclusions import ch03
from helpers.core.config import job_config
from helpers.core.memory_planner import classifier_param_bytes
from helpers.topics import hybrid
from tests.unit.chapter_cases import capture_shown


@pytest.fixture
def shown(monkeypatch):
    """Tables and markdown the steps show, captured instead of displayed."""
    return capture_shown(monkeypatch, chapter)


def setup_for(tmp_path, world=8, device="CPU", **changes):
    base = job_config("ci", device_target=device, world_size=world, **changes)
    layouts, resume = chapter.default_layouts(world)
    return chapter.Setup(base.replace(num_classes=16), layouts, resume, tmp_path)


def fake_run(losses, img_per_s, fc_bytes, shape=(8, 64)):
    """What the steps read of a JobResult: per-rank summaries, a (ranks, steps) loss metric, the job's img/s."""
    losses = np.asarray(losses, dtype=float)
    summaries = {"img_per_s": img_per_s, "classifier_param_bytes": [fc_bytes] * len(img_per_s),
                 "classifier_shape": [list(shape)] * len(img_per_s), "momentum_norm": [0.5] * len(img_per_s),
                 "weight_norm": [20.0] * len(img_per_s)}
    return SimpleNamespace(summary=summaries.__getitem__, metric=lambda name: losses,
                           img_per_s=lambda skip=1: float(np.median(img_per_s)), config=SimpleNamespace(name="job"),
                           launch="job")


def test_layouts_per_world_size():
    assert chapter.default_layouts(8) == (["8x1", "4x2"], "2x4")
    assert chapter.default_layouts(2) == (["2x1", "1x2"], "2x1")
    assert chapter.default_layouts(8, ["4x2"], "8x1") == (["4x2"], "8x1")


def test_setup_names_the_hybrid_and_data_parallel_runs_and_the_path(tmp_path):
    s = setup_for(tmp_path)
    assert (s.hybrid, s.data_parallel) == ("4x2", "8x1")
    assert "PyNative" in s.path_name and "8x1" in s.path_name and s.path_short.startswith("PyNative")
    gpu = setup_for(tmp_path, device="GPU")
    assert "SEMI_AUTO_PARALLEL" in gpu.path_name and chapter.trace_dir(gpu, "4x2") is None
    assert chapter.trace_dir(s, "4x2") == tmp_path / "trace_4x2" and chapter.trace_dir(s, "8x1") is None


def test_classifier_cost_rows_are_the_planner_bytes():
    rows = chapter.classifier_cost_rows("this run", 64)
    assert len(rows) == 4 and rows[1][:2] == ("ResNet-50 (2,048 features)", "100,000")
    dp, two_by_four = classifier_param_bytes(2048, 100_000, 1), classifier_param_bytes(2048, 100_000, 4)
    assert rows[1][2] == dp / 2**20 and rows[1][4] == two_by_four / 2**20
    assert rows[1][5] == pytest.approx(3 * (dp - two_by_four) / 2**20)


def test_oom_rows_say_who_failed():
    oom = dict(dp_layout="8x1", hybrid_layout="4x2", dp_classifier_bytes=2**21, hybrid_classifier_bytes=2**20,
               dp_vms_peak_mb=3326.4, hybrid_vms_peak_mb=None, cap_mb=3289, error_kind="oom",
               hybrid_fits_under_cap=False, hybrid_error_kind="crash")
    dp, hyb = hybrid.oom_rows(oom)
    assert dp == ("8x1 (data parallel)", "2.0", "3326", 3289, "failed: oom")
    assert hyb == ("4x2 (hybrid)", "1.0", "-", 3289, "did not fit: crash")


def test_strategy_table_rows_and_refused_files(tmp_path, shown):
    s = setup_for(tmp_path)
    files = chapter.write_strategies(s)
    assert sorted(files) == ["2x4", "4x2", "8x1"] and all(f.is_file() for f in files.values())
    chapter.show_strategy_table(s, files)
    rows, _ = shown[-1]
    assert [r[0] for r in rows[:2]] == ["fc.weight", "fc.bias"] and rows[0][3] == [0, -1]
    assert rows[0][4] == (8, rows[0][1][1])                    # 16 classes split 2 ways
    assert chapter.check_bad_strategies(s) is True             # 2x2 on 8 ranks, 10 classes split 4 ways
    assert "rejected" in shown[-1] and "not divisible" in shown[-1]


def test_hand_merge_diff_puts_the_shards_together():
    strategy = {"fc.weight": ((2, 2), (0, -1))}
    full = {"fc.weight": np.arange(8.0).reshape(4, 2), "b": np.ones(3)}
    ranks = [{"fc.weight": full["fc.weight"][(r % 2) * 2:(r % 2) * 2 + 2], "b": np.ones(3)} for r in range(4)]
    assert chapter.hand_merge_diff(full, strategy, ranks) == 0.0
    ranks[1]["fc.weight"] = ranks[1]["fc.weight"] + 0.5
    assert chapter.hand_merge_diff(full, strategy, ranks) == 0.5


def test_compare_with_reference_takes_the_worst_of_steps_and_checkpoint():
    hres = fake_run([[1.0, 2.0], [1.5, 2.5]], [1, 1], 0)
    ref = {"step_param_diff": [1e-7, 3e-7], "losses": [[1.0, 1.5], [2.0, 2.5 + 4e-7]],
           "params": {"w": np.zeros(2)}}
    cmp = chapter.compare_with_reference(hres, ref, {"w": np.array([0.0, 5e-7])})
    assert cmp["step_diff"] == [1e-7, 3e-7] and cmp["max_param_diff"] == 5e-7
    assert cmp["per_step"][0] == 0.0 and cmp["loss_diff"] == pytest.approx(4e-7)
    assert cmp["worst"] == [("w", 5e-7)]


def test_recorded_values_feed_the_claims(tmp_path):
    s = setup_for(tmp_path)
    f, c = 64, 16
    runs = {"8x1": fake_run([[2.0, 1.9]] * 8, [10.0] * 8, classifier_param_bytes(f, c, 1)),
            "4x2": fake_run([[2.0, 1.8]] * 8, [9.0] * 8, classifier_param_bytes(f, c, 2))}
    proof = chapter.Proof(tmp_path / "m.ckpt", {}, [1e-7] * 4, [2e-7] * 4, 1e-7, 2e-7)
    oom = dict(cap_mb=3289, dp_oom_reproduced=True, hybrid_fits_under_cap=True, error=None, hybrid_result=None,
               hybrid_error=None, error_kind="oom")
    found = chapter.recorded_values("ci", False, s, feature_dim=f, runs=runs, oom=oom, bad_strategy_rejected=True,
                                    proof=proof, resume={"merged_checkpoint_max_diff": 0.0, "resumed_on_layout": "2x4"})
    assert found["classifier_param_bytes_per_rank"] == {"dp": classifier_param_bytes(f, c, 1),
                                                        "hybrid": classifier_param_bytes(f, c, 2)}
    assert found["img_per_s"] == {"8x1": 10.0, "4x2": 9.0} and found["final_mean_loss"]["4x2"] == 1.8
    assert found["oom"] == {"cap_mb": 3289, "dp_oom_reproduced": True, "hybrid_fits_under_cap": True,
                            "error_kind": "oom"} and found["mem_cap_mb"] == 3289
    no_oom = chapter.recorded_values("ci", False, s, feature_dim=f, runs=runs, oom=None, bad_strategy_rejected=True,
                                     proof=proof, resume={"merged_checkpoint_max_diff": 0.0,
                                                          "resumed_on_layout": "2x4"})
    assert no_oom["oom"] is None and no_oom["dp_oom_reproduced"] is False
    held = {cl.id: cl.holds for cl in ch03.build(no_oom)}
    assert held["hybrid_equals_reference"] and held["classifier_bytes_divided_by_mp"]


def test_the_first_layout_is_the_code_cells_follow_on_and_not_run_again(tmp_path, monkeypatch):
    from helpers.cells.run import follow_on_config

    s = setup_for(tmp_path)
    then = chapter.first_layout_job(s)                         # its strategy file written before the cell runs
    files = {n: s.work / f"strategy_{n}.ckpt" for n in s.layouts}
    assert then.cfg.name == "hybrid-8x1" and Path(then.cfg.strategy_file) == files["8x1"].resolve()
    launched = []
    monkeypatch.setattr(chapter, "run_job", lambda cfg, progress: launched.append(cfg.name) or cfg.name)
    cell = SimpleNamespace(config=follow_on_config(s.base.replace(name="hybrid-code"), then).replace(master_port=50123))
    runs = chapter.run_layouts(s, files, code_cell=cell)
    assert runs["8x1"] is cell and launched == ["hybrid-4x2"]
    assert chapter.run_layouts(s, files) == {"8x1": "hybrid-8x1", "4x2": "hybrid-4x2"}
    # on CPU the launch runs the other layouts after the first, each found again (not run again)
    assert [c.name for c in then.more] == ["hybrid-4x2"] and Path(then.more[0].strategy_file) == files["4x2"].resolve()
    cell.more, launched[:] = [SimpleNamespace(config=then.more[0].replace(name="x"))], []
    runs = chapter.run_layouts(s, files, code_cell=cell)
    assert runs["8x1"] is cell and runs["4x2"] is cell.more[0] and launched == []
