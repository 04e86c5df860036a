"""benchmarks.job_phases on a run directory written by hand with known times."""

import json
import os

import pytest

from benchmarks.job_phases import job_phases, phases_since


def _job(root, chapter, name, t0, ranks):
    d = root / chapter / name
    (d / "metrics").mkdir(parents=True)
    (d / "logs").mkdir()
    (d / "config.json").write_text(json.dumps({"world_size": len(ranks)}))
    os.utime(d / "config.json", (t0, t0))
    for r, events in enumerate(ranks):
        (d / "metrics" / f"rank_{r}.jsonl").write_text(
            "".join(json.dumps({"event": e, "rank": r, "time": t0 + t, **extra}) + "\n" for e, t, extra in events))
    (d / "msrun.log").write_text("done\n")
    os.utime(d / "msrun.log", (t0 + 30, t0 + 30))
    return d


def _train(start, step0, last):
    return [("start", start, {}), ("step", step0, {"step": 0}), ("step", step0 + 1, {"step": 1}),
            ("summary", last, {})]


def test_phases_take_the_slowest_rank(tmp_path):
    d = _job(tmp_path, "01", "a", 1000.0, [_train(18, 26, 27), _train(20, 25, 28)])
    p = job_phases(d)
    assert p["launch_s"] == pytest.approx(20) and p["first_step_s"] == pytest.approx(6)
    assert p["rest_s"] == pytest.approx(2) and p["exit_s"] == pytest.approx(2) and p["total_s"] == pytest.approx(30)
    assert p["world_size"] == 2 and p["chapter"] == "01"


def test_a_job_of_phases_has_its_first_step_at_each_ranks_first_step_0(tmp_path):
    phase2 = [("step", 40, {"step": 0}), ("step", 41, {"step": 1})]       # the second phase numbers from 0 again
    d = _job(tmp_path, "01", "p", 1000.0, [_train(18, 26, 27) + phase2, _train(20, 25, 28) + phase2])
    p = job_phases(d)
    assert p["first_step_s"] == pytest.approx(6) and p["rest_s"] == pytest.approx(15)


def test_a_task_without_steps_has_no_first_step(tmp_path):
    d = _job(tmp_path, "02", "g", 1000.0, [[("start", 10, {}), ("summary", 25, {})]])
    p = job_phases(d)
    assert p["first_step_s"] == 0 and p["rest_s"] == pytest.approx(15)


def test_only_jobs_after_the_start_are_summed(tmp_path):
    _job(tmp_path, "00", "old", 500.0, [_train(18, 26, 27)])
    _job(tmp_path, "01", "a", 1000.0, [_train(18, 26, 27)])
    _job(tmp_path, "01", "b", 1100.0, [_train(18, 26, 27)])
    s = phases_since(tmp_path, 900.0)
    assert s["all"]["jobs"] == 2 and set(s["chapters"]) == {"01"}
    assert s["all"]["launch_s"] == pytest.approx(36) and s["all"]["total_s"] == pytest.approx(60)
    assert (tmp_path / "00" / "empty").mkdir() or job_phases(tmp_path / "00" / "empty") is None
