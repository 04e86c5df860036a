"""The chapter-04 figures: where each rank's step goes, one step on every rank, fusion and precision sweeps."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

COLORS = dict(compute="#4c72b0", comm="#c44e52", data="#8c8c8c", other="#dddddd")


def plot_rank_breakdown(profiles: dict, title: str = "where each rank's step goes (profiled steps)"):
    """Stacked bars per rank (compute / communication / data wait / other), one panel per job profile."""
    n = len(profiles)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.2), sharey=True, squeeze=False)
    for ax, (label, jp) in zip(axes[0], profiles.items()):
        ranks = np.array(sorted(jp.ranks))
        bottom = np.zeros(len(ranks))
        for key, values, name in (("compute", jp.compute_s, "compute"), ("comm", jp.comm_s, "communication"),
                                  ("data", jp.data_s, "data wait"), ("other", jp.other_s, "other")):
            v = values.mean(axis=1)
            ax.bar(ranks, v, bottom=bottom, color=COLORS[key], label=name)
            bottom += v
        ax.set(xlabel="rank",
               title=f"{label}: comm {jp.comm_share:.0%}, {jp.allreduce_per_step} AllReduce/step")
        ax.set_xticks(ranks)
        ax.title.set_fontsize(9)
    axes[0][0].set_ylabel("seconds per step")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_step_timeline(jp, step: int = -1, title: str | None = None, ax=None):
    """One profiled step on every rank on a shared clock: data wait, compute and communication kernels."""
    if not jp.has_timeline:
        raise ValueError(f"{jp.run_dir}: no kernel timeline (GPU: only the per-type op tables could be read)")
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(9, 0.35 * len(jp.ranks) + 1.2))
    k = step % len(jp.profiled_steps)
    ranks = sorted(jp.ranks)
    t0 = min(jp.ranks[r].steps[k].start_us for r in ranks)
    for i, r in enumerate(ranks):
        ev = jp.ranks[r].step_events[k]
        first = jp.ranks[r].steps[k].start_us
        data = jp.data_s[i, k]
        if data > 0:
            ax.broken_barh([((first - t0) / 1e3 - data * 1e3, data * 1e3)], (r - 0.4, 0.8),
                           color=COLORS["data"])
        for key, sel in (("compute", [e for e in ev if not e.comm]), ("comm", [e for e in ev if e.comm])):
            bars = [((e.start_us - t0) / 1e3, max(e.dur_us / 1e3, 0.01)) for e in sel]
            ax.broken_barh(bars, (r - 0.4, 0.8), color=COLORS[key])
    ax.legend(handles=[Patch(color=COLORS["compute"], label="compute kernels"),
                       Patch(color=COLORS["comm"], label="communication kernels"),
                       Patch(color=COLORS["data"], label="data wait (metrics)")],
              fontsize=7, loc="upper right")
    ax.set(xlabel="ms (shared clock)", ylabel="rank", yticks=ranks,
           title=title or f"profiled step {jp.profiled_steps[k]} across {len(ranks)} ranks")
    ax.invert_yaxis()
    if own:
        ax.figure.tight_layout()
    return ax.figure


def plot_fusion_sweep(rows: list[dict], title: str = "communication fusion: step time vs bucket size"):
    """Two panels from sweep rows (``label``, ``bucket_mb``, ``allreduce_per_step``, ``step_s``): step time vs
    mean bucket size (log x), and step time vs AllReduce calls per step. A row without a positive size (unknown)
    cannot sit on a log axis: it is named in the left panel's title instead of silently dropped. Fewer than
    ``MIN_SWEEP_POINTS`` rows make no curve: one bar per setting, its calls and bucket size in its label."""
    if len(rows) < MIN_SWEEP_POINTS:
        return _fusion_bars(rows, title)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    unsized = [row["label"] for row in rows if not np.isfinite(row["bucket_mb"]) or row["bucket_mb"] <= 0]
    for row in rows:
        for ax, x in ((a, row["bucket_mb"]), (b, row["allreduce_per_step"])):
            if ax is a and row["label"] in unsized:
                continue
            ax.scatter([x], [row["step_s"]], s=30)
            ax.annotate(row["label"], (x, row["step_s"]), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
    a.set(xscale="log", xlabel="mean AllReduce size (MiB: measured on CPU, else gradients / calls)",
          ylabel="step time (s, no profiler)")
    if unsized:
        a.set_title(f"no size for: {', '.join(unsized)}", fontsize=8)
    b.set(xscale="log", xlabel="AllReduce calls per step (measured)", ylabel="step time (s, no profiler)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


MIN_SWEEP_POINTS = 3


def _fusion_bars(rows: list[dict], title: str):
    """One horizontal bar per fusion setting: its step time, labelled with its AllReduce calls and bucket size."""
    def size(mb) -> str:
        return f"{mb:.2f} MiB" if np.isfinite(mb) and mb > 0 else "size unknown"

    fig, ax = plt.subplots(figsize=(7, 0.6 * len(rows) + 1.6))
    ax.barh([f"{r['label']}\n{r['allreduce_per_step']:.0f} calls, {size(r['bucket_mb'])}" for r in rows],
            [r["step_s"] for r in rows], color=[f"C{i}" for i in range(len(rows))])
    ax.set(xlabel="step time (s, no profiler)", title=title)
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def plot_reduction_cost(t_alone: float, t_profiled: float, t_base: float):
    """Horizontal bars: step time with no gradient reduction, the profiled baseline and the baseline without profiler."""
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.barh(["no reduction", "baseline, profiled", "baseline"], [t_alone, t_profiled, t_base],
            color=["#55a868", "#c44e52", "#4c72b0"])
    ax.set(xlabel="seconds per step", title="the reduction's cost, measured without the profiler")
    fig.tight_layout()
    return fig


def plot_amp_steps(step_s: dict, device_target: str, world_size: int):
    """One bar per mixed-precision level: its step time without the profiler."""
    fig, ax = plt.subplots(figsize=(6, 2.8))
    ax.bar(list(step_s), list(step_s.values()), color=["#4c72b0", "#dd8452", "#55a868", "#c44e52"])
    ax.set(ylabel="seconds per step (no profiler)", title=f"mixed precision on {device_target}, {world_size} rank(s)")
    fig.tight_layout()
    return fig


def show_baseline(jp, world_size: int) -> None:
    """Section 1's figures: where each rank's profiled step went, then one step's timeline across the ranks when
    the profile has one."""
    plot_rank_breakdown({"baseline (unfused)": jp})
    plt.show()
    if jp.has_timeline:
        plot_step_timeline(jp, title=f"one profiled step across {world_size} ranks, baseline")
        plt.show()
