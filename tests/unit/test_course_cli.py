"""The course runner's command line: the server options reach every chapter (papermill replaced by a recorder, no
notebook runs), each notebook gets only the parameters its cell declares, and the notebooks are the code
checkout's whatever COURSE_HOME says, with a clear error when none matches."""

import json
from pathlib import Path

import papermill
import pytest

from helpers import course
from helpers.core.errors import DataError

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = ["00_environment_setup", "01_load_imbalance", "02_oom_gradient_accumulation", "03_hybrid_parallel",
            "04_profiling"]


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """papermill.execute_notebook recording (notebook, parameters) instead of running; COURSE_HOME a tmp dir."""
    calls = []
    monkeypatch.setattr(papermill, "execute_notebook",
                        lambda src, dst, parameters=None, **kw: calls.append((Path(src).stem, parameters)))
    monkeypatch.setenv("COURSE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COURSE_PROGRESS", "text")
    return calls


@pytest.mark.parametrize("target", ["Ascend", "GPU"])
def test_a_rehearsal_for_a_card_passes_the_target_and_data_to_every_chapter(recorded, tmp_path, target):
    tree = tmp_path / "imagenet"
    rc = course.main(["run", "--preset", "gpu8", "--device-target", target, "--data-dir", str(tree), "--rehearse",
                      "--out", str(tmp_path / "out")])
    assert rc == 0
    assert [stem for stem, _ in recorded] == CHAPTERS
    for stem, params in recorded:
        assert params["preset"] == "gpu8" and params["rehearse"] is True, stem
        assert params["device_target"] == target and params["data_dir"] == str(tree), stem
        assert params["results_path"] == str(tmp_path / "out" / f"gpu8-{target}-rehearsal" / "results" / f"{stem}.json")
    out = tmp_path / "out" / f"gpu8-{target}-rehearsal"
    summary = json.loads((out / "summary.json").read_text())
    assert [r["parameters"]["device_target"] for r in summary] == [target] * 5
    assert f"rehearsed on CPU, standing for {target}" in (out / "index.html").read_text(encoding="utf-8")


def test_each_notebook_gets_only_the_parameters_its_cell_declares(recorded, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="helpers.course"):
        rc = course.main(["run", "--preset", "gpu8", "--device-target", "Ascend", "--world-size", "16",
                          "--global-batch", "2048", "--arch", "resnet101", "--steps", "20", "--out", str(tmp_path)])
    assert rc == 0
    params = dict(recorded)
    for stem in CHAPTERS:
        assert params[stem]["world_size"] == 16 and params[stem]["arch"] == "resnet101", stem
        assert params[stem]["steps"] == 20 and "rehearse" not in params[stem], stem
    assert "global_batch" not in params["02_oom_gradient_accumulation"]          # it sizes its own batches
    assert all(params[s]["global_batch"] == 2048 for s in CHAPTERS if not s.startswith("02"))
    assert any("02_oom_gradient_accumulation" in r.getMessage() and "global_batch" in r.getMessage()
               for r in caplog.records)


def test_every_option_is_a_parameter_of_the_notebooks():
    """The options stay in step with the parameters cells (only chapter 02 lacks global_batch)."""
    declared = {p.stem: set(papermill.inspect_notebook(str(p))) for p in course.notebooks()}
    for name, _ in course.OVERRIDES:
        lacking = sorted(stem for stem, names in declared.items() if name not in names)
        assert lacking == (["02_oom_gradient_accumulation"] if name == "global_batch" else []), name


def test_without_options_only_preset_and_results_path_are_passed(recorded, tmp_path):
    assert course.main(["run", "--preset", "ci", "--only", "01", "--out", str(tmp_path)]) == 0
    (stem, params), = recorded
    assert stem == "01_load_imbalance" and set(params) == {"preset", "results_path"}


def test_a_rehearsal_for_the_cpu_is_refused_before_any_chapter(recorded, tmp_path, capsys):
    assert course.main(["run", "--preset", "gpu8", "--rehearse", "--device-target", "CPU", "--out", str(tmp_path)]) == 2
    assert not recorded and "device_target" in capsys.readouterr().err


# --------------------------------------------------------------- issue 33.1: code and notebooks vs COURSE_HOME

def test_course_home_elsewhere_still_runs_the_repositorys_chapters(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_HOME", str(tmp_path))
    assert [p.stem for p in course.notebooks()] == CHAPTERS
    assert all(p.parent == REPO / "notebooks" for p in course.notebooks())


def test_no_matching_chapter_is_a_loud_error_naming_the_folder_and_the_pattern(recorded, tmp_path, capsys):
    with pytest.raises(DataError) as err:
        course.notebooks(["99"])
    assert str(REPO / "notebooks") in str(err.value) and course.CHAPTER_PATTERN in str(err.value)
    assert "starting with 99" in str(err.value)
    assert course.main(["run", "--only", "99", "--out", str(tmp_path / "out")]) == 2
    message = capsys.readouterr().err
    assert str(REPO / "notebooks") in message and course.CHAPTER_PATTERN in message
    assert not recorded and not (tmp_path / "out").exists()


def test_warning_lines_are_the_stderr_warnings_of_an_executed_notebook(tmp_path):
    from helpers.course import warning_lines

    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "stream", "name": "stderr", "text": [
            "/x/numpy/core/fromnumeric.py:3504: RuntimeWarning: Mean of empty slice.\n", "progress 3/4\n",
            "WARNING:helpers.core.config:dataset_workers lowered\n", "[WARNING] ME(1:2,python):x\n"]},
        {"output_type": "stream", "name": "stdout", "text": ["a UserWarning: in prose is fine here\n"]}]}]}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb))
    assert [line[:12] for line in warning_lines(path)] == ["/x/numpy/cor", "WARNING:help", "[WARNING] ME"]
