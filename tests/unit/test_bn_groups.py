"""BatchNorm groups (``helpers.topics.bn_groups``): how a global batch is grouped, the same images for every
grouping, and the judgement of a grouping's final loss against the seeds' spread."""

import numpy as np
import pytest

from helpers.topics import bn_groups as bg


def test_groups_cut_the_global_batch_into_equal_consecutive_slices():
    assert bg.group_slices(8, 1) == [slice(0, 8)]
    assert bg.group_slices(8, 4) == [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]
    covered = np.concatenate([np.arange(64)[s] for s in bg.group_slices(64, 16)])
    assert covered.tolist() == list(range(64))
    for bad in (0, 3, 128):
        with pytest.raises(ValueError, match="groups"):
            bg.group_slices(64, bad)


def test_n_ranks_with_m_micro_batches_each_hold_n_times_m_groups_between_them():
    n, m, batch = 4, 2, 32
    shares = [bg.rank_groups(batch, n * m, n, r) for r in range(n)]
    assert all(len(s) == m for s in shares)
    assert [s for share in shares for s in share] == bg.group_slices(batch, n * m)
    assert shares[1] == [slice(8, 12), slice(12, 16)]
    with pytest.raises(ValueError, match="ranks"):
        bg.rank_groups(batch, 6, 4, 0)


def test_every_grouping_sees_the_same_images_in_the_same_order_for_a_seed():
    a, b = bg.batch_order(100, 16, 13, seed=3), bg.batch_order(100, 16, 13, seed=3)
    assert a.shape == (13, 16) and np.array_equal(a, b)
    assert not np.array_equal(a, bg.batch_order(100, 16, 13, seed=4))
    per_epoch = 100 // 16
    assert len(set(a[:per_epoch].ravel())) == per_epoch * 16        # an epoch draws no image twice
    with pytest.raises(ValueError, match="batch"):
        bg.batch_order(10, 16, 1, seed=0)


def test_cross_entropy_and_accuracy_match_a_hand_count():
    logits = np.array([[2.0, 0.0], [0.0, 0.0], [0.0, 3.0]])
    labels = np.array([0, 1, 0])
    loss, acc = bg.cross_entropy(logits, labels)
    expected = np.mean([np.log(1 + np.exp(-2.0)), np.log(2.0), np.log(1 + np.exp(3.0))])
    assert loss == pytest.approx(expected) and acc == pytest.approx(1 / 3)


def test_a_grouping_is_judged_beyond_spread_only_when_every_seed_moves_the_same_way_by_more_than_the_noise():
    values = {"1": [1.00, 1.10, 0.90, 1.05, 0.95],
              "4": [1.01, 1.09, 0.92, 1.04, 0.96],          # paired differences straddle 0: within the spread
              "16": [1.30, 1.42, 1.18, 1.37, 1.24]}         # every seed ~0.3 higher: beyond it
    j = bg.judge(values)
    assert j["spread"]["1"]["n"] == 5 and j["spread"]["16"]["mean"] == pytest.approx(1.302)
    assert j["vs_one_group"]["4"]["beyond_spread"] is False
    assert j["vs_one_group"]["16"]["beyond_spread"] is True
    assert j["vs_one_group"]["16"]["mean"] == pytest.approx(0.302)
    assert set(j["vs_one_group"]) == {"4", "16"}
    # the unpaired spread alone would not separate them: the seeds of 1 group span 0.2, the shift is 0.3
    assert j["spread"]["1"]["max"] - j["spread"]["1"]["min"] == pytest.approx(0.2)


def test_final_values_take_the_last_update_per_grouping_and_seed():
    run = lambda v: {"held_out_loss": {"10": 9.0, "20": v}}
    measured = {"updates": 20, "groups": [1, 4], "seeds": [1, 2],
                "runs": {"1": {"1": run(0.5), "2": run(0.6)}, "4": {"1": run(0.7), "2": run(0.8)}}}
    assert bg.final_values(measured) == {"1": [0.5, 0.6], "4": [0.7, 0.8]}


def test_update_distance_is_in_units_of_the_one_process_update():
    one = {"w0": [0.0, 0.0], "w1": [3.0, 4.0]}
    assert bg.update_distance({"w1": [3.0, 4.0]}, one) == 0.0
    assert bg.update_distance({"w1": [3.0, 4.5]}, one) == pytest.approx(0.1)


def fake_bench(diff16=0.05, noise=(0.0, 0.01, -0.01)):
    """A benchmark record of 3 seeds: 4 groups like one group, 16 groups ``diff16`` higher."""
    base = [0.14, 0.12, 0.16]
    finals = {"1": base, "4": [b + n for b, n in zip(base, noise)],
              "16": [b + diff16 + n / 2 for b, n in zip(base, noise)]}
    run = lambda v: {"held_out_loss": {"30": 2 * v, "60": v}}
    bench = {"groups": [1, 4, 16], "seeds": [1, 2, 3], "updates": 60, "batch": 64, "checkpoints": [30, 60],
             "runs": {g: {str(s): run(v) for s, v in zip([1, 2, 3], vals)} for g, vals in finals.items()},
             "machine": {"date_utc": "2026-12-07 05:00"}, "wall_s": 600.0}
    values = bg.final_values(bench)
    bench["final"] = {"held_out_loss": {"by_seed": values, **bg.judge(values)}}
    return bench


def test_each_grouping_names_the_ranks_and_micro_batches_it_stands_for():
    assert "full batch" in bg.layout(1)
    assert bg.layout(4) == "4 micro-batches on 1 rank, or 4 ranks without accumulation"
    assert bg.layout(16) == "4 micro-batches on each of 4 ranks, or 16 ranks"
    assert bg.layout(6) == "6 ranks without accumulation"


def test_the_chapter_records_the_benchmark_per_grouping_with_its_source():
    rec = bg.chapter_record(fake_bench())
    assert rec["source"] == bg.RESULTS_FILE and rec["updates"] == 60 and rec["seeds"] == [1, 2, 3]
    assert "diff" not in rec["groups"]["1"] and rec["groups"]["1"]["images"] == 64
    g16 = rec["groups"]["16"]
    assert g16["images"] == 4 and g16["diff"] == pytest.approx(0.05) and g16["beyond_spread"] is True
    assert rec["groups"]["4"]["beyond_spread"] is False
    rows = bg.table_rows(rec)
    assert rows[0][0] == "1 × 64" and rows[0][-1] == "—"
    assert rows[2][0] == "16 × 4" and "(beyond the spread)" in rows[2][-1] and rows[2][-1].startswith("+0.050")
    assert rows[1][2] == "0.140 0.130 0.150" and len(rows[1]) == 5       # no running averages measured: no column


def test_the_sentence_leads_with_what_moved_beyond_the_spread_and_the_running_averages():
    bench = fake_bench()
    text = bg.verdict_text(bg.chapter_record(bench))
    assert text.startswith("Benchmark, not this run (`bn_groups.json`): after 60 updates 16 groups of 4 moved it +0.050")
    assert "beyond the 3 seeds' spread" in text and "running" not in text
    quiet = bg.verdict_text(bg.chapter_record(fake_bench(diff16=0.0)))
    assert "no grouping moved held-out loss beyond the 3 seeds' spread." in quiet
    running = {"1": [0.7, 0.71, 0.69], "4": [0.4, 0.3, 0.35], "16": [0.2, 0.21, 0.19]}
    bench["final"]["running_loss"] = {"by_seed": running, **bg.judge(running)}
    rec = bg.chapter_record(bench)
    assert rec["groups"]["16"]["running"]["diff"] == pytest.approx(-0.5)
    text = bg.verdict_text(rec)
    assert text.endswith("with one process's running averages (last column), 16 groups moved it -0.50, beyond the spread.")
    row = bg.table_rows(rec)[2]
    assert len(row) == 6 and row[-1].startswith("0.200 ± 0.010; -0.500 ±") and row[-1].endswith("(beyond the spread)")
    assert bg.table_rows(rec)[0][-1] == "0.700 ± 0.010; —"


def test_the_curves_plot_one_line_per_grouping_with_the_seeds_range():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    bg.plot_curves(fake_bench(), ax)
    assert [line.get_label() for line in ax.get_lines()] == ["1 group of 64", "4 groups of 16", "16 groups of 4"]
    assert list(ax.get_lines()[0].get_xdata()) == [30, 60] and ax.get_lines()[0].get_ydata()[-1] == pytest.approx(0.14)
    plt.close(fig)
