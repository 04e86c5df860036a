"""The stall rules: the limit per phase, and which stalled rank is blamed from the strongest evidence down."""

from helpers.job.stall import RankProgress, frozen_before, stall_limit, stalled_ranks, stuck_ranks

NOW = 1000.0


def beat(t, ours="worker.py:260 _loop"):
    return {"time": t, "ours": ours}


def test_the_limit_is_the_compile_allowance_before_the_first_step_then_grows_with_the_median_step():
    assert stall_limit(60, 900, RankProgress(0, "ready"), []) == 900
    assert stall_limit(60, 900, RankProgress(0, "step", 3), [0.5, 0.4]) == 60
    assert stall_limit(60, 900, RankProgress(0, "step", 3), [14.0, 15.0, 13.0]) == 140


def test_only_ranks_past_their_limit_and_not_finished_are_stalled():
    progress = {0: RankProgress(NOW - 70, "step", 5), 1: RankProgress(NOW - 10, "step", 6),
                2: RankProgress(NOW - 500, "ready"), 3: RankProgress(NOW - 999, "summary")}
    assert stalled_ranks(60, 900, progress, [0.5], NOW) == [0]


def test_a_rank_behind_while_others_move_is_blamed():
    progress = {0: RankProgress(NOW - 70, "step", 5), 1: RankProgress(NOW - 1, "step", 40)}
    assert stuck_ranks([0], progress, {}, NOW)[0] == [0]


def test_when_all_stall_the_rank_with_fewer_steps_is_blamed():
    progress = {0: RankProgress(NOW - 70, "step", 5), 1: RankProgress(NOW - 65, "step", 6)}
    assert stuck_ranks([0, 1], progress, {}, NOW)[0] == [0]


def test_a_rank_without_a_heartbeat_is_blamed_over_ranks_waiting_in_a_collective():
    progress = {r: RankProgress(NOW - 70, "step", 5) for r in range(4)}
    beats = {0: beat(NOW - 1), 1: beat(NOW - 1), 2: beat(NOW - 65), 3: beat(NOW - 1)}
    assert stuck_ranks([0, 1, 2, 3], progress, beats, NOW)[0] == [2]


def test_a_rank_somewhere_else_than_its_peers_is_blamed():
    progress = {r: RankProgress(NOW - 70, "step", 5) for r in range(4)}
    beats = {r: beat(NOW - 1) for r in range(4)}
    beats[1] = beat(NOW - 1, "data.py:80 next_batch")
    stuck, why = stuck_ranks([0, 1, 2, 3], progress, beats, NOW)
    assert stuck == [1] and "worker.py:260 _loop" in why


def test_when_every_rank_waits_at_the_same_place_all_are_named():
    progress = {r: RankProgress(NOW - 70, "step", 5) for r in range(3)}
    beats = {r: beat(NOW - 1) for r in range(3)}
    assert stuck_ranks([0, 1, 2], progress, beats, NOW)[0] == [0, 1, 2]


def test_a_heartbeat_that_stopped_long_before_the_failure_marks_a_hang():
    beats = {0: beat(NOW - 1), 1: beat(NOW - 33), 2: beat(NOW - 2)}
    assert frozen_before([0, 1, 2], beats, NOW) == [1]
    assert frozen_before([0, 1, 2], {r: beat(NOW - 1) for r in range(3)}, NOW) == []
