"""A ``%%ranks --then`` chain (``FollowOn.more``): its jobs' configs in the run folder, each read back as its own job,
found again by the chapters, and run with its own course variables on the ranks."""

import json
import os

import pytest

from helpers.cells.run import chained_job
from helpers.core.config import JobConfig, job_config
from helpers.core.errors import ConfigError
from helpers.core.metrics import FOLLOW_ON_EVENT, MORE_SUMMARY_EVENT, THEN_ENV, metrics_path
from helpers.core.paths import more_dir
from helpers.job.compile_cache import CACHE_ENV, chain_cache, compile_cache_dir
from helpers.job.launch import chain_parts, load_result
from helpers.job.plan import plan_more


def write_records(run_dir, rank, recs):
    path = metrics_path(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"rank": rank, **x}) + "\n" for x in recs))


def chain_run(tmp_path, world=2):
    """A run folder as a cell with a follow-on and two more jobs leaves it (2, 1 and 3 steps)."""
    cfg = JobConfig(world_size=world, global_batch=8 * world, steps=2, env={THEN_ENV: "1"}, name="code")
    cfg.save(tmp_path / "config.json")
    for i, steps in ((1, 1), (2, 3)):
        more_dir(tmp_path, i).mkdir()
        cfg.replace(name=f"more{i}", steps=steps, env={}).save(more_dir(tmp_path, i) / "config.json")
    for r in range(world):
        step = lambda s, t: {"event": "step", "step": s, "step_s": 0.1, "data_s": 0.0, "loss": 1.0, "time": t}  # noqa: E731
        write_records(tmp_path, r, [
            {"event": "start", "host": "h", "time": 0.0}, step(0, 1.0),
            {"event": FOLLOW_ON_EVENT, "more": 0, "time": 2.0}, step(0, 3.0), step(1, 4.0),
            {"event": FOLLOW_ON_EVENT, "more": 1, "time": 5.0}, step(0, 6.0),
            {"event": MORE_SUMMARY_EVENT, "more": 1, "steps": 1, "checksum": "a", "time": 7.0 + r},
            {"event": FOLLOW_ON_EVENT, "more": 2, "time": 8.0}, step(0, 9.0), step(1, 9.5), step(2, 9.9),
            {"event": MORE_SUMMARY_EVENT, "more": 2, "steps": 3, "checksum": "b", "time": 10.0},
            {"event": "summary", "steps": 2, "checksum": "c", "result": {"rank": r}, "time": 11.0}])
    return cfg


def test_each_job_of_a_chain_is_read_as_its_own_job(tmp_path):
    chain_run(tmp_path)
    res = load_result(tmp_path)
    assert [len(res.steps[r]) for r in res.ranks] == [2, 2] and res.returns == {0: {"rank": 0}, 1: {"rank": 1}}
    assert [len(res.cell_steps[r]) for r in res.ranks] == [1, 1]
    first, second = res.more
    assert (first.run_dir, first.config.name, second.run_dir) == (more_dir(tmp_path, 1), "more1", more_dir(tmp_path, 2))
    assert [x["step"] for x in second.steps[0]] == [0, 1, 2] and first.summary("steps") == [1, 1]
    assert second.summary("checksum") == ["b", "b"] and second.weights_identical
    assert first.wall_s == pytest.approx(3.0)          # the slowest rank: its follow_on record to its summary
    assert first.metric("step_s").shape == (2, 1)


def test_records_are_cut_where_each_job_began():
    step, then, more = {"event": "step"}, {"event": FOLLOW_ON_EVENT, "more": 0}, {"event": FOLLOW_ON_EVENT, "more": 1}
    assert chain_parts([step, then, step, more]) == [[step], [then, step], [more]]       # a cell, its chain
    assert chain_parts([step, more, step]) == [[], [step], [more, step]]                  # a worker job, its chain
    old = {"event": FOLLOW_ON_EVENT}                     # written before chains: a cell's follow-on
    assert chain_parts([step]) == [[], [step]] and chain_parts([step, old]) == [[step], [old]]


def test_a_chapter_finds_a_job_its_code_cell_ran_whatever_its_name_or_cache(tmp_path):
    chain_run(tmp_path)
    res = load_result(tmp_path)
    asked = res.more[1].config.replace(name="other", env={CACHE_ENV: "/somewhere"})
    assert chained_job(res, asked) is res.more[1]
    assert chained_job(res, res.config.replace(env={})) is res        # the first follow-on: the launch's own result
    assert chained_job(res, res.config.replace(env={}, timeout_s=1.0)) is res     # a chain's launch sums timeouts
    assert chained_job(res, asked.replace(steps=9)) is None and chained_job(None, asked) is None


def test_a_chained_job_on_other_ranks_or_mindspore_variables_or_a_cap_is_refused_before_launch():
    cfg = job_config("ci", world_size=2, global_batch=16)
    for job, why in ((cfg.replace(world_size=4, global_batch=32), "world_size"),
                     (cfg.replace(env={"MS_DEV_X": "1"}), "MS_DEV_X"), (cfg.replace(mem_cap_mb=900), "address space")):
        with pytest.raises(ConfigError, match=why):
            plan_more(cfg, (job,))
    files = plan_more(cfg, (cfg.replace(name="a", env={CACHE_ENV: "/own"}), cfg.replace(name="b")))
    assert sorted(files) == ["then-1/config.json", "then-2/config.json"]
    assert JobConfig(**json.loads(files["then-2/config.json"])).name == "b"


def test_a_chain_caches_its_graphs_apart_from_a_lone_job_of_its_first_config():
    cfg = job_config("ci")
    files = plan_more(cfg, (cfg.replace(name="a", steps=2),))
    chained = chain_cache(cfg, files).env[CACHE_ENV]
    assert chained.startswith(str(compile_cache_dir(cfg))) and chained != str(compile_cache_dir(cfg))
    assert chained != chain_cache(cfg, plan_more(cfg, (cfg.replace(name="a", steps=3),))).env[CACHE_ENV]
    assert chain_cache(cfg, {}) == cfg and CACHE_ENV not in chain_cache(cfg.replace(compile_cache=False), files).env


def test_a_chained_job_runs_with_its_own_course_variables(monkeypatch):
    from helpers.train.chain import use_job_env

    launched = JobConfig(env={"COURSE_TIME_SPLIT_EVERY": "1", "MS_COMPILER_CACHE_PATH": "/c", THEN_ENV: "1"})
    monkeypatch.setenv("COURSE_TIME_SPLIT_EVERY", "1")
    monkeypatch.setenv("MS_COMPILER_CACHE_PATH", "/c")
    monkeypatch.setenv("HYBRID_NO_CHECKPOINT", "0")       # recorded by monkeypatch, so restored afterwards
    use_job_env(JobConfig(env={"HYBRID_NO_CHECKPOINT": "1"}), launched, own=(THEN_ENV,))
    assert "COURSE_TIME_SPLIT_EVERY" not in os.environ and os.environ["HYBRID_NO_CHECKPOINT"] == "1"
    assert os.environ["MS_COMPILER_CACHE_PATH"] == "/c"       # MindSpore read it at start: it stays


def test_jobs_run_in_turn_on_cpu_only_and_not_in_a_cards_rehearsal():
    from helpers.job.plan import runs_in_turn

    assert runs_in_turn(JobConfig(device_target="CPU"))
    assert not runs_in_turn(JobConfig(device_target="GPU")) and not runs_in_turn(JobConfig(device_target="Ascend"))
    assert not runs_in_turn(JobConfig(device_target="CPU", rehearsal=True)), "the rehearsal runs the card's path"
