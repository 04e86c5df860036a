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


# ---- before the first step: the ranks' CPU time (helpers.job.stall.CpuActivity, fed by the launcher's psutil reads)
from helpers.job.stall import (BUSY_WINDOW_S, QUIET_S, STOPPED_S, CpuActivity, quiet_before_first_step,  # noqa: E402
                               stopped_ranks, went_quiet_first)

# CPU seconds per second of one rank, read every second from the ranks of real ci jobs on this machine (2 cores):
COMPILING_8_RANKS = [0.19, 0.21, 0.20, 0.20, 0.21, 0.18, 0.19, 0.20, 0.18, 0.16, 0.21, 0.20, 0.19]   # 8 ranks compiling
WAITING = [0.00, 0.00, 0.01, 0.00, 0.00, 0.00, 0.00, 0.01, 0.00, 0.00]   # in a CPU collective, SIGSTOPped or sleeping


def feed(activity, rank, rates, t0=0.0, cpu0=0.0, stopped=False):
    """Observe ``rank`` once a second using ``rates`` CPU s per s; returns (time, cpu) after the last sample."""
    t, cpu = t0, cpu0
    for rate in rates:
        t, cpu = t + 1.0, cpu + rate
        activity.observe(rank, t, cpu, stopped)
    return t, cpu


def test_a_compiling_rank_stays_busy_and_a_waiting_one_goes_idle_within_the_window():
    a = CpuActivity()
    t, cpu = feed(a, 0, COMPILING_8_RANKS * 5)             # 65 s of compile at 8 ranks on 2 cores
    assert a.last_busy[0] == t
    stop = t
    t, _ = feed(a, 0, WAITING * 6, t, cpu)                  # then 60 s in a collective: ~0.02 CPU s per 10 s
    assert stop <= a.last_busy[0] <= stop + BUSY_WINDOW_S
    assert t - a.last_busy[0] > QUIET_S


def test_a_rank_starved_to_a_twentieth_of_a_core_still_counts_as_compiling():
    a = CpuActivity()
    t, _ = feed(a, 0, [0.05] * 120)
    assert t - a.last_busy[0] <= 2.0


def test_a_stopped_process_is_never_busy_and_is_timed_from_when_it_was_first_seen_stopped():
    a = CpuActivity()
    feed(a, 3, [0.3] * 3)
    feed(a, 3, [0.0] * 20, t0=3.0, cpu0=0.9, stopped=True)
    assert a.last_busy[3] == 3.0 and a.stopped_since[3] == 4.0
    assert stopped_ranks(a.stopped_since, 4.0 + STOPPED_S) == [3]
    assert stopped_ranks(a.stopped_since, 4.0 + STOPPED_S - 1) == []
    feed(a, 3, [0.0], t0=23.0, cpu0=0.9)                    # SIGCONT: running again
    assert a.stopped_since == {}


def test_a_process_never_seen_working_cannot_make_the_job_look_idle():
    """E.g. msrun's ``tail -f`` of a worker log, which carries the rank's variables: watched by mistake, it would
    look idle for ever; only a rank seen working once (importing MindSpore, init()) is judged by its CPU."""
    a = CpuActivity()
    feed(a, 0, [0.0] * 100)
    feed(a, 1, [0.3] * 5 + [0.0] * 95)
    progress = {r: RankProgress(50.0, "ready") for r in (0, 1)}
    assert a.idle_since(progress) == {1: 50.0}
    assert quiet_before_first_step(progress, a.idle_since(progress), 100.0) == []


def progress_at(events, t=0.0):
    return {r: RankProgress(t, ev) for r, ev in events.items()}


def test_before_the_first_step_the_job_is_stuck_only_when_every_rank_still_there_is_idle():
    progress = progress_at({0: "ready", 1: "ready", 2: "ready", 3: "start"})
    idle = {0: 40.0, 1: 41.0, 2: 39.0, 3: 2.0}
    assert quiet_before_first_step(progress, idle, 41.0 + QUIET_S + 1) == [0, 1, 2, 3]
    assert quiet_before_first_step(progress, idle, 41.0 + QUIET_S - 1) == [], "rank 1 worked until 41 s"
    assert quiet_before_first_step(progress, {**idle, 1: 100.0}, 80.0) == [], "a rank still compiling"


def test_the_idle_rule_waits_for_init_and_for_every_rank_to_be_observed():
    assert quiet_before_first_step(progress_at({0: None, 1: None}), {0: 0.0, 1: 0.0}, 500.0) == [], "still in init()"
    # Seen with an 8-rank cell job: three ranks through init() finished and waited in leave_together while five
    # slept between attempts to register with msrun's scheduler, all idle, for 40 s; then they came out.
    progress = progress_at({r: "summary" if r in (0, 2, 6) else None for r in range(8)})
    assert quiet_before_first_step(progress, dict.fromkeys(range(8), 0.0), 500.0) == [], "five ranks still in init()"
    progress = progress_at({0: "ready", 1: "ready"})
    assert quiet_before_first_step(progress, {0: 0.0}, 500.0) == [], "rank 1 on another node: no CPU reading"


def test_ranks_past_their_first_step_are_left_to_the_step_rule():
    progress = progress_at({0: "step", 1: "ready", 2: "summary"})
    assert quiet_before_first_step(progress, {0: 0.0, 1: 0.0, 2: 0.0}, 100.0) == [1]
    assert quiet_before_first_step(progress_at({0: "step", 1: "trained"}), {0: 0.0, 1: 0.0}, 100.0) == []


def test_a_stopped_rank_is_blamed_before_any_other_evidence():
    progress = {r: RankProgress(NOW - 70, "ready") for r in range(4)}
    beats = {r: beat(NOW - 1) for r in range(4)}
    stuck, why = stuck_ranks([0, 1, 2, 3], progress, beats, NOW, stopped=[2])
    assert stuck == [2] and "stopped" in why


def test_a_rank_blocked_in_its_own_collective_is_blamed_not_the_peers_waiting_in_the_train_step():
    progress = {r: RankProgress(NOW - 60, "ready") for r in range(3)} | {3: RankProgress(NOW - 90, "start")}
    beats = {r: beat(NOW - 1, "worker.py:293 _loop") for r in range(3)} | {3: beat(NOW - 1, "worker.py:353 main")}
    idle = {0: NOW - 45, 1: NOW - 44, 2: NOW - 46, 3: NOW - 88}
    assert stuck_ranks([0, 1, 2, 3], progress, beats, NOW, idle)[0] == [3]


def test_two_ranks_at_two_places_are_told_apart_by_who_went_idle_first():
    progress = {r: RankProgress(NOW - 60, "ready") for r in range(2)}
    beats = {0: beat(NOW - 1, "worker.py:293 _loop"), 1: beat(NOW - 1, "worker.py:353 main")}
    stuck, why = stuck_ranks([0, 1], progress, beats, NOW, {0: NOW - 40, 1: NOW - 75})
    assert stuck == [1] and "CPU stopped first" in why
    assert stuck_ranks([0, 1], progress, beats, NOW, {0: NOW - 40, 1: NOW - 42})[0] == [0, 1], "no clear order"


def test_went_quiet_first_takes_the_earliest_group_before_the_first_clear_gap():
    assert went_quiet_first([0, 1, 2, 3], {0: 12.0, 1: 13.0, 2: 30.0, 3: 0.0}) == [3]
    assert went_quiet_first([0, 1, 2], {0: 0.0, 1: 1.0, 2: 30.0}) == [0, 1]
    assert went_quiet_first([0, 1, 2], {0: 0.0, 1: 1.0, 2: 2.0}) == []
    assert went_quiet_first([0, 1], {0: 0.0}) == [], "a rank without a reading"


def test_a_sigstopped_rank_right_after_init_replayed_from_cpu_samples_is_the_one_named():
    """Rank 3 stopped right after its start record; ranks 0-2 compiled ~15 s, then waited in the step's AllReduce."""
    a = CpuActivity()
    for r in range(3):
        t, cpu = feed(a, r, [0.3] * 15)
        end, _ = feed(a, r, WAITING * 6, t, cpu)
    t, cpu = feed(a, 3, [0.3] * 3)                        # importing MindSpore and init(), then stopped
    feed(a, 3, [0.0] * (12 + 60), t, cpu)                  # (state T not seen: only the CPU speaks here)
    progress = {r: RankProgress(1.0, "ready") for r in range(3)} | {3: RankProgress(3.5, "start")}
    idle = a.idle_since(progress)
    assert quiet_before_first_step(progress, idle, end) == [0, 1, 2, 3]
    assert stuck_ranks([0, 1, 2, 3], progress, {}, end, idle)[0] == [3]


def test_the_worker_is_told_from_msrun_and_the_guard_which_name_the_rank_guard_too():
    """The launcher reads each rank's CPU from its worker: the child of a process that *runs* the rank guard. msrun's
    own command line names the guard as well, and msrun's other children (the guards, a ``tail -f`` of each worker
    log) carry the rank's variables: these command lines are the ones seen under a ci job."""
    from helpers.job.watch import RANK_GUARD, runs_module

    msrun = ["/venv/bin/python3.11", "/venv/bin/msrun", "--worker_num=2", "--join=True", "python", "-u", "-m",
             RANK_GUARD, "/runs/x/config.json"]
    guard = ["python", "-u", "-m", RANK_GUARD, "/runs/x/config.json"]
    tail = ["/usr/bin/tail", "-f", "/runs/x/logs/worker_0.log"]
    assert runs_module(guard, RANK_GUARD)
    assert not runs_module(msrun, RANK_GUARD) and not runs_module(tail, RANK_GUARD)
    assert not runs_module(["python", "-u", "-m", "helpers.train.worker", "c.json"], RANK_GUARD)


def test_a_rank_still_going_after_the_others_finished_is_named_with_them_waiting():
    progress = {0: RankProgress(NOW - 70, "summary"), 1: RankProgress(NOW - 70, "step", 0),
                2: RankProgress(NOW - 69, "summary")}
    stuck, why = stuck_ranks([1], progress, {1: {"ours": "cell.py:10 <module>"}}, NOW)
    assert stuck == [1] and why == "ranks 0, 2 finished and wait for them", why
