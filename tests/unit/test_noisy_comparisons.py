"""Issue 32.5: chapters 02-04 rank two settings' step times only beyond the jobs' own step-to-step noise
(``helpers.conclusions.step_noise``), and the series behind that noise are the ones behind the figures."""

from types import SimpleNamespace

import numpy as np
import pytest

from helpers.chapters import step_profile as S
from helpers.conclusions import step_noise as N
from helpers.core.config import job_config
from helpers.core.step_times import img_per_s, steady_step_s
from helpers.topics.profiling import job_step_s

STEPS = np.array([[9.0, 1.0, 1.3, 1.1, 1.2], [8.0, 1.2, 1.0, 1.4, 1.1]])     # ranks x steps; step 0 compiles


def test_per_step_is_the_series_the_steady_step_time_is_the_median_of():
    for ranks in ("slowest", "mean"):
        assert np.median(N.per_step(STEPS, ranks=ranks)) == pytest.approx(steady_step_s(STEPS, ranks=ranks))
    assert N.per_step(STEPS) == [1.2, 1.3, 1.4, 1.2]
    assert 96 / np.median(N.per_step(STEPS)) == pytest.approx(img_per_s(STEPS, 96)), "chapters 02 and 03's img/s"
    assert N.per_step([[2.0]]) == [2.0], "no step after step 0: all are used, as steady_step_s does"


def test_unprofiled_steps_are_the_ones_job_step_s_times():
    cfg = job_config("ci", steps=5, profile=True, profile_skip_steps=3)
    result = SimpleNamespace(config=cfg, metric=lambda name: STEPS)
    assert N.unprofiled_steps(result) == pytest.approx([1.1, 1.15])
    assert np.median(N.unprofiled_steps(result)) == pytest.approx(job_step_s(result))
    unprofiled = SimpleNamespace(config=cfg.replace(profile=False), metric=lambda name: STEPS)
    assert len(N.unprofiled_steps(unprofiled)) == 4


def test_the_band_is_the_larger_jobs_spread_doubled_or_the_floor():
    assert N.relative_spread([1.0]) is None and N.relative_spread([1.0, 1.0]) == 0.0
    assert N.relative_spread([1.0, 1.1, 1.2]) == pytest.approx(0.1 / 1.1)
    c = N.compare(1.15, [1.0, 1.0, 1.0], [1.0, 1.1, 1.2])
    assert c["band"] == pytest.approx(2 * 0.1 / 1.1) and c["ranked"] is False and c["steps"] == 3
    assert N.compare(1.15, [1.0, 1.0], [1.0, 1.0])["ranked"] is True, "steady steps: 15 % is beyond the noise"
    assert N.compare(1.04, [1.0, 1.0], [1.0, 1.0], floor=0.05)["ranked"] is False, "the floor still applies"
    unmeasured = N.compare(1.5, [1.0], [1.5])
    assert unmeasured["ranked"] is False and unmeasured["tie"] == "not ranked", "no spread and no floor: no ranking"
    assert N.compare(1.5, [1.0], [1.5], floor=0.05)["ranked"] is True and c["tie"] == "within noise"
    one = N.compare(1.04, [1.0], [1.0, 1.0], floor=0.05)
    assert one["spread"] is None and one["band"] == 0.05
    assert "one timed step in a job, so the step-to-step spread was not measured, ranked beyond 5.0%" in \
        N.noise_words(one)
    assert N.noise_words(c, "one run each").startswith("one run each; step-to-step spread ±9.1% (at least 3 steps")


def test_step_shares_are_each_profiled_steps_share_and_fall_back_to_the_jobs_share():
    prof = SimpleNamespace(comm_s=np.array([[0.5, 0.2], [0.3, 0.2]]), step_s=np.array([[1.0, 1.0], [1.0, 0.5]]),
                           comm_share=0.0)
    assert N.step_shares(prof) == pytest.approx([0.4, 0.3])
    table_only = SimpleNamespace(comm_s=np.array([[0.5], [0.3]]), step_s=np.ones((2, 2)), comm_share=0.42)
    assert N.step_shares(table_only) == [0.42], "steps that do not line up: the job's share, its noise unmeasured"
    c = N.compare_shares(-0.1, [0.5, 0.6], [0.4, 0.4])
    assert c["band"] == pytest.approx(2 * np.std([0.5, 0.6], ddof=1)) and c["ranked"] is False
    assert "step-to-step spread ±7.1 points (at least 2 steps a job), ranked beyond 14.1 points" in N.noise_words(c)


def amp_job(level: str, steps) -> S.ProfiledJob:
    """An AMP level's job whose unprofiled steps (1..) took ``steps`` seconds on its one rank."""
    cfg = job_config("ci", world_size=1, global_batch=8, steps=len(steps) + 2, profile=True,
                     profile_skip_steps=len(steps) + 1, amp_level=level)
    a = np.array([[5.0, *steps, 9.0]])
    return S.ProfiledJob(SimpleNamespace(config=cfg, metric=lambda name: a), None)


def amp_with(o1_steps) -> S.Amp:
    jobs = {"O0": amp_job("O0", [1.0, 1.1, 1.2]), "O1": amp_job("O1", o1_steps),
            "O2": amp_job("O2", [1.1, 1.1, 1.1]), "O3": amp_job("O3", [1.1, 1.1, 1.1])}
    return S.Amp(jobs, 1, "native", ("Conv2D",), ["Cast"], {k: {"Cast": 0.0} for k in jobs})


def test_amp_levels_tie_within_their_steps_noise_not_only_within_the_fixed_15_percent():
    """O0's steps moved by ~9 % (a band of ~18 %): O1 at 1.18x is a tie, where the fixed 15 % ranked it slower;
    at 1.45x it is slower."""
    rel = amp_with([1.3, 1.3, 1.3]).relative
    assert rel["rel"]["O1"] == pytest.approx(1.3 / 1.1) and rel["noise"] == pytest.approx(0.1818, abs=1e-4)
    assert "O1" in rel["ties"] and rel["slower"] == []
    rel = amp_with([1.6, 1.6, 1.6]).relative
    assert rel["slower"] == ["O1"]
    steady = amp_with([1.3, 1.3, 1.3])
    steady.jobs["O0"] = amp_job("O0", [1.1, 1.1, 1.1])
    assert steady.relative["noise"] == S.AMP_NOISE and steady.relative["slower"] == ["O1"], "the floor when steady"
