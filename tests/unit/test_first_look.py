"""Chapter 04's first look (helpers.topics.first_look) on canned step records: the per-rank split, its
communication share, its agreement with a profiler's share, and what the chapter records."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from helpers.job.straggler import straggler_verdict
from helpers.topics.first_look import first_look_values, plot_first_look, read_first_look
from tests.unit.test_straggler import GRAD, NET, UPDATE, job


def fake(steps):
    return SimpleNamespace(steps=steps, straggler=straggler_verdict(steps), run_dir="run",
                           config=SimpleNamespace(name="first_look"))


def test_the_first_look_reads_the_split_steps_and_its_comm_share():
    look = read_first_look(fake(job(every=1)))
    comm = look.seconds[:, 2] / look.seconds.sum(axis=1)
    assert look.comm_share == pytest.approx(comm.mean()) and 0 < look.comm_share < NET / (GRAD + NET + UPDATE) + 0.05
    rows = look.rows()
    assert len(rows) == 8 and rows[0][0] == 0 and rows[0][-1] == pytest.approx(comm[0])
    values = first_look_values(look, profiler_comm_share=look.comm_share + 0.03)
    assert values["first_look_agreement"] == pytest.approx(0.03) and values["first_look_verdict"]["rank"] is None
    json.dumps(values)
    assert "no straggler" in __import__("helpers.output.plots", fromlist=["describe"]).describe(plot_first_look(look))


def test_a_job_without_split_steps_has_no_first_look():
    with pytest.raises(ValueError, match="COURSE_TIME_SPLIT_EVERY"):
        read_first_look(fake(job(every=10**6)))


def test_the_straggler_shows_in_the_communication_of_the_others():
    look = read_first_look(fake(job(every=1, slow=2, delay=0.3, cause="compute")))
    assert look.verdict.rank == 2 and look.seconds[2, 1] > GRAD + 0.25
    assert np.delete(look.seconds[:, 2], 2) == pytest.approx(np.full(7, 0.3 + NET), rel=0.1)


def chapter_04(run):
    """Chapter 04's ``Chapter`` as ``first_look`` reads it: the ci baseline, profiled from step 3."""
    from helpers.chapters import step_profile as S
    from helpers.core.config import job_config

    base = job_config("ci", chapter="04", name="baseline", comm_fusion={}, profile=True, profile_skip_steps=3,
                      env={"A": "1"})
    return SimpleNamespace(run=run, base=base, plan=S.PLANS["ci"], progress="none", param_bytes=[4096] * 4)


def test_chapter_04_runs_the_first_look_without_the_profiler_splitting_every_step(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from helpers.chapters import step_profile as S
    from tests.unit.chapter_cases import capture_shown

    from helpers.topics import first_look as F

    shown = capture_shown(monkeypatch, S)
    monkeypatch.setattr(F, "show_md", lambda text: shown.append(text))
    asked = {}

    def run(name, **changes):
        asked.update(changes, name=name)
        return fake(job(every=1, slow=1, delay=0.3))

    look = S.first_look(chapter_04(run))
    assert asked == {"name": "first_look", "profile": False, "steps": 6,      # ci: 4 split steps are judged
                     "env": {"A": "1", "COURSE_TIME_SPLIT_EVERY": "1"}}
    (rows, headers), verdict = shown
    assert headers[1:] == ["compute (s)", "communication (s)", "comm share"] and len(rows) == 8   # the bars: all
    assert look.HEADERS[1:5] == ("data (s)", "compute (s)", "communication (s)", "other (s)")      # parts, recorded
    assert "straggler: rank 1" in verdict and "cause data" in verdict
    diff = S.compare_first_look(look, SimpleNamespace(profile=SimpleNamespace(comm_share=look.comm_share - 0.05)))
    assert diff == pytest.approx(0.05) and f"profiler {look.comm_share - 0.05:.3f}" in shown[-1]


def test_the_code_cells_follow_on_is_the_first_look_unless_it_was_run_otherwise(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from helpers.cells.run import follow_on_config
    from helpers.chapters import step_profile as S
    from tests.unit.chapter_cases import capture_shown

    capture_shown(monkeypatch, S)
    launched = []
    ch = chapter_04(lambda name, **changes: launched.append(name) or fake(job(every=1)))
    cell = ch.base.replace(name="profiler-code")
    ran = follow_on_config(cell, S.first_look_job(ch))               # what ``%%ranks ... --then look_job`` launches
    code_cell = fake(job(every=1, slow=1, delay=0.3))
    from helpers.cells.program import SAME_GRAPH_ENV
    from helpers.core.metrics import THEN_ENV
    from helpers.core.paths import resolve
    from helpers.job.compile_cache import CACHE_ENV

    code_cell.config = ran.replace(conv_impl="im2col", master_port=51234, data_dir=str(resolve(ran.data_dir)),
                                   env={**ran.env, SAME_GRAPH_ENV: "1", CACHE_ENV: "/cache-cell-1"})   # as launched
    assert ch.base.conv_impl == "auto" and ran.name == "profiler-code" and not ran.profile and ran.steps == 6
    assert S.first_look(ch, code_cell).result is code_cell and launched == []        # no launch of its own
    fused = ran.replace(comm_fusion={"allreduce": {"mode": "auto", "config": None}})
    for other in (ran.replace(env={}), ran.replace(env={THEN_ENV: "1"}), ran.replace(steps=9),
                  ran.replace(profile=True), ch.base, fused):
        code_cell.config = other                                     # not the first look: it runs one
        S.first_look(ch, code_cell)
    S.first_look(ch, None)
    assert launched == ["first_look"] * 7


def test_on_cpu_the_code_cells_launch_runs_the_chapters_8_rank_jobs_after_the_first_look():
    """``first_look_job``: on CPU its ``more`` are sections 1-4's jobs on the baseline's ranks, in the notebook's
    order, as ``Chapter.run`` builds them (so it finds them); on a card each keeps a launch of its own."""
    from helpers.chapters import step_profile as S

    ch = chapter_04(None)
    more = S.first_look_job(ch).more
    assert [c.name for c in more] == ["baseline", "no_reduce", "fused_auto", "cell_ids_only"]
    assert more[0] == ch.base and more[1].steps == 3 and not more[1].grad_reduce and more[3].cell_comm_fusion
    ch.plan, ch.param_bytes = {**S.PLANS["cpu"], "bucket_mb": [1], "index_bucket_kb": [64]}, [40000] * 8
    assert [c.name for c in S.first_look_job(ch).more] == ["baseline", "no_reduce", "fused_auto", "size_1mb",
                                                          "index_64kb", "cell_ids_only", "cell_ids_with_fusion"]
    ch.base = ch.base.replace(device_target="GPU")
    assert S.first_look_job(ch).more == ()


def test_the_first_look_measures_its_own_step_to_step_spread():
    look = read_first_look(fake(job(every=1)))
    assert len(look.step_shares) >= 2 and look.comm_share_spread >= 0
    assert look.comm_share_spread == pytest.approx(np.std(look.step_shares, ddof=1))
    assert first_look_values(look, 0.5)["first_look_spread"] == look.comm_share_spread
