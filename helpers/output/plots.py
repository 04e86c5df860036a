"""Figures shared by the chapters (matplotlib; each function returns its Figure)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np


def loss_per_rank(result, title: str = "loss per rank", ax=None):
    """One line per rank: each rank's loss on its own batch (they differ: different data, same weights)."""
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(7, 3.5))
    loss = result.metric("loss")
    for r, row in enumerate(loss):
        ax.plot(np.arange(1, len(row) + 1), row, marker="o", ms=3, lw=1, label=f"rank {r}")
    ax.plot(np.arange(1, loss.shape[1] + 1), loss.mean(axis=0), color="k", lw=2.5, label="mean")
    ax.set(xlabel="step", ylabel="training loss", title=title)
    ax.legend(ncol=5, fontsize=7)
    if own:
        fig.tight_layout()
    return ax.figure


def class_heatmaps(hists: dict, class_names=None, title: str = "images per class seen by each rank"):
    """One heatmap per strategy: ranks x classes, each row normalised to the rank's class mix."""
    n = len(hists)
    fig, axes = plt.subplots(1, n, figsize=(3.3 * n, 3.2), sharey=True, squeeze=False)
    for ax, (name, h) in zip(axes[0], hists.items()):
        h = np.asarray(h, dtype=float)
        mix = h / np.maximum(h.sum(axis=1, keepdims=True), 1)
        im = ax.imshow(mix, aspect="auto", cmap="viridis", vmin=0, vmax=max(0.3, float(mix.max())))
        ax.set(title=name, xlabel="class", ylabel="rank" if ax is axes[0][0] else None)
        ax.set_xticks(range(h.shape[1]))
        ax.set_xticklabels([str(i) for i in range(h.shape[1])], fontsize=7)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="share of the rank's images")
    fig.suptitle(title, y=1.03)
    return fig


def per_strategy_curves(series: dict, ylabel: str, title: str, xlabel: str = "step"):
    """One line per strategy (e.g. distinct classes per global step)."""
    fig, ax = plt.subplots(figsize=(7, 3))
    for name, ys in series.items():
        ax.plot(np.arange(1, len(ys) + 1), ys, marker="o", ms=3, label=name)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def strategy_bars(values: dict[str, dict], titles: dict[str, str]):
    """Side-by-side bar charts: one panel per metric, one bar per strategy."""
    fig, axes = plt.subplots(1, len(titles), figsize=(3.4 * len(titles), 3), squeeze=False)
    for ax, (metric, title) in zip(axes[0], titles.items()):
        names = list(values[metric])
        ax.bar(range(len(names)), [values[metric][k] for k in names], color=plt.cm.tab10(np.arange(len(names))))
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig
