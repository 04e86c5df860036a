"""Chapter 02's memory and throughput panels: whole-rank axis, the cap's measure named, throughput with its spread."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from helpers.output.plots import rank_memory_bars, throughput_bars  # noqa: E402


def test_memory_bars_have_one_tick_per_rank_and_the_note_in_the_title():
    fig, ax = plt.subplots()
    rank_memory_bars(ax, {"full": [300, 310], "acc": [200, 205]}, [150, 150], "peak RSS", "the cap counts address space")
    assert list(ax.get_xticks()) == [0, 1] and ax.get_xlim() == (-0.6, 1.6)
    assert "address space" in ax.get_title() and len(ax.patches) == 4
    plt.close(fig)


def test_throughput_shows_the_median_step_its_range_and_how_many_steps():
    fig, ax = plt.subplots()
    throughput_bars(ax, 64, {"full_batch": [0.5, 0.6], "accumulated": [0.7, 0.9, 0.8]})
    heights = [p.get_height() for p in ax.patches]
    assert heights == [64 / 0.55, 64 / 0.8]
    assert [t.get_text() for t in ax.texts] == ["median of\n2 steps", "median of\n3 steps"]
    plt.close(fig)
