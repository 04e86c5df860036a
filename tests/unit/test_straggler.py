"""The straggler verdict (helpers.job.straggler) on canned step records: a data straggler, a compute straggler, a
group of equally slow ranks (no single straggler), jobs without sampled steps, and the live mark."""

import numpy as np
import pytest

from helpers.job.straggler import LiveStraggler, comm_wait_split, step_straggler, straggler_verdict

GRAD, DATA, NET, UPDATE = 0.30, 0.002, 0.02, 0.05


def job(world=8, steps=12, every=2, slow=None, delay=0.0, cause="data", noise=0.01, seed=0, slow_group=()):
    """Step records as the ranks write them: every ``every``-th step sampled (grad / reduce / update timed),
    ``slow`` late by ``delay`` s in its data wait or its forward and backward; ``slow_group`` ranks all 0.1 s late."""
    rng = np.random.default_rng(seed)
    out = {r: [] for r in range(world)}
    for i in range(steps):
        data = DATA + rng.uniform(0, noise / 5, world)
        grad = GRAD + rng.uniform(0, noise, world)
        for r in slow_group:
            grad[r] += 0.1
        if slow is not None:
            (data if cause == "data" else grad)[slow] += delay
        arrive = data + grad
        end = arrive.max() + NET
        for r in range(world):
            rec = dict(event="step", rank=r, step=i, loss=1.0, step_s=end + UPDATE, data_s=float(data[r]),
                       compute_s=float(end + UPDATE - data[r]))
            if i % every == every - 1:
                rec.update(grad_s=float(grad[r]), reduce_s=float(end - arrive[r]), update_s=UPDATE)
            out[r].append(rec)
    return out


@pytest.mark.parametrize("cause", ["data", "compute"])
def test_a_late_rank_is_named_with_its_cause_and_what_the_others_waited(cause):
    v = straggler_verdict(job(slow=5, delay=0.4, cause=cause), {r: f"node{r // 4}" for r in range(8)})
    assert (v.rank, v.node, v.cause, v.method) == (5, "node1", cause, "split")
    assert v.wait_s == pytest.approx(0.4, rel=0.1) and v.lead_s == pytest.approx(0.4, rel=0.1)
    assert v.wait_share == pytest.approx(v.wait_s / (GRAD + 0.4 + NET + UPDATE + DATA), rel=0.1)
    assert v.last_share == 1.0 and v.steps == 5          # 6 sampled steps, the first left out
    assert "rank 5 on node1, cause " + cause in v.line() and "ms per step" in v.line()


def test_even_ranks_give_no_straggler_and_the_spread_measured():
    v = straggler_verdict(job())
    assert v.rank is None and v.cause is None and v.method == "split"
    assert 0 < v.spread_s < 0.02 and v.line().startswith("no straggler: the ranks waited")


def test_a_group_of_equally_slow_ranks_is_no_single_straggler():
    v = straggler_verdict(job(slow_group=(1, 3, 5, 7)))
    assert v.rank is None and v.spread_s > 0.05          # the others did wait, for whichever of the four was last


def test_a_small_delay_below_a_tenth_of_the_step_is_not_a_straggler():
    assert straggler_verdict(job(slow=2, delay=0.02)).rank is None
    assert straggler_verdict(job(slow=2, delay=0.08)).rank == 2


def test_without_sampled_steps_only_a_data_straggler_is_seen():
    v = straggler_verdict(job(every=10**6, slow=3, delay=0.4))
    assert (v.rank, v.cause, v.method) == (3, "data", "data wait") and v.wait_s == pytest.approx(0.4, rel=0.1)
    assert straggler_verdict(job(every=10**6, slow=3, delay=0.4, cause="compute")).rank is None


def test_the_first_sampled_step_is_left_out():
    steps = job(slow=None)
    steps[4][1]["reduce_s"] = 0.0                        # a first run's kernel set-up: everyone waited for rank 4
    for r in steps:
        if r != 4:
            steps[r][1]["reduce_s"] = 4.0
    assert straggler_verdict(steps).rank is None


def test_nothing_to_judge():
    assert straggler_verdict({0: job(world=1)[0]}).method == "none"
    assert straggler_verdict({}).line() == "straggler: no steps to judge"


def test_the_live_mark_needs_the_same_rank_in_the_last_three_judged_steps():
    live = LiveStraggler(8)
    recs = job(slow=6, delay=0.4, cause="compute", steps=8)
    for i in range(8):
        for r in range(8):
            live.feed(recs[r][i])
        assert live.marked() == ((6, "compute") if i >= 5 else None)   # judged: sampled steps 1, 3, 5
    even = job(steps=8)
    live = LiveStraggler(8)
    for i in range(8):
        for r in range(8):
            live.feed(even[r][i])
    assert live.marked() is None and live.judged == [(None, None)] * 4


def test_one_step_data_straggler_on_a_fused_step_and_silence_otherwise():
    recs = job(every=10**6, slow=1, delay=0.3, steps=2)
    assert step_straggler([recs[r][1] for r in range(8)]) == (1, "data")
    recs = job(every=10**6, slow=1, delay=0.3, steps=2, cause="compute")
    assert step_straggler([recs[r][1] for r in range(8)]) is None


def test_a_one_rank_job_has_no_straggler_and_warns_nothing():
    """Chapter 04's AMP jobs run one rank: numpy warned 'Mean of empty slice' into the notebook."""
    import warnings

    recs = job(every=10**6, slow=0, delay=0.3, steps=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert step_straggler([recs[0][1]]) is None
        live = LiveStraggler(1)
        for rec in recs[0]:
            live.feed(rec)
    assert live.marked() is None and live.judged == []


def test_the_text_progress_marks_the_straggler_live_and_ends_with_the_verdict():
    import io

    from helpers.job.progress import TextProgress

    out = io.StringIO()
    bar = TextProgress("job", range(8), 12, every_s=0.0, stream=out)
    recs = job(slow=2, delay=0.4, cause="data")
    lines = []
    for i in range(12):
        for r in range(8):
            bar.update(r, i + 1, 1.0, recs[r][i])
        lines.append(out.getvalue().splitlines()[-1])
    marked = [i for i, line in enumerate(lines) if "straggler: rank 2 (data), last 3 judged steps" in line]
    assert marked and marked[0] == 3          # judged steps 1, 2, 3 (the fused ones show its data wait too)
    bar.close("finished in 1.0 s")
    assert "finished in 1.0 s | straggler: rank 2, cause data" in out.getvalue().splitlines()[-1]
    plain = TextProgress("job", range(8), 12, every_s=0.0, stream=io.StringIO())
    plain.update(0, 1, 1.0)                   # without records (a watch that passes none): no mark, no verdict
    plain.close("finished")
    assert "straggler" not in plain.stream.getvalue()


def test_the_per_rank_split_adds_up_to_the_step_and_shows_where_the_straggler_lost_time():
    from helpers.job.straggler import SPLIT_PARTS, rank_time_split
    from helpers.output.plots import describe, time_split_bars

    ranks, sec, split = rank_time_split(job(slow=4, delay=0.4, cause="compute"))
    assert split and ranks == list(range(8)) and sec.shape == (8, 4)
    step = GRAD + 0.4 + NET + UPDATE
    assert sec.sum(axis=1) == pytest.approx(np.full(8, step), rel=0.05)
    assert sec[4, 1] == pytest.approx(GRAD + 0.4, rel=0.05) and sec[4, 2] == pytest.approx(NET, abs=0.01)
    assert np.delete(sec[:, 2], 4) == pytest.approx(np.full(7, 0.4 + NET), rel=0.1)   # the others wait for it
    fig = time_split_bars(ranks, sec, SPLIT_PARTS, "where each rank's step went", straggler=4)
    assert "rank 4 (straggler)" in describe(fig) and not fig.axes[0].texts
    level = time_split_bars(ranks, np.ones((8, 4)), SPLIT_PARTS, "level", straggler=None)
    assert level.axes[0].texts[0].get_text() == "no straggler: the ranks' steps differ by at most 0%"
    _, fused, split = rank_time_split(job(every=10**6))
    assert not split and fused[:, 2].sum() == 0 and fused[:, 1] == pytest.approx(np.full(8, GRAD + NET + UPDATE),
                                                                                 rel=0.1)


def test_the_allreduce_time_splits_into_waiting_for_the_last_rank_and_the_collective_itself():
    """The last rank to arrive waits for no one: its AllReduce time is the collective's own (NET here); the others'
    excess over it is waiting, 7 of 8 ranks waiting 0.4 s for rank 5."""
    w = comm_wait_split(job(slow=5, delay=0.4))
    assert w["collective_s"] == pytest.approx(NET, rel=0.05) and w["steps"] == 5
    assert w["wait_s"] == pytest.approx(0.4 * 7 / 8, rel=0.05)
    assert w["comm_s"] == pytest.approx(w["wait_s"] + w["collective_s"])
    assert comm_wait_split(job(every=100)) is None      # no sampled step: nothing to split
