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


def step_time_per_rank(result, ax=None, skip_first: bool = True):
    """Stacked bars per rank: time waiting for data vs compute (+ communication) per step, averaged."""
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(7, 3))
    s = slice(1, None) if skip_first and result.metric("step_s").shape[1] > 1 else slice(None)
    data = result.metric("data_s")[:, s].mean(axis=1)
    comp = result.metric("compute_s")[:, s].mean(axis=1)
    ranks = np.arange(len(data))
    ax.bar(ranks, comp, label="compute + communication")
    ax.bar(ranks, data, bottom=comp, label="data wait")
    ax.set(xlabel="rank", ylabel="seconds per step", title="mean step time per rank (first step excluded)")
    ax.legend(fontsize=8)
    if own:
        fig.tight_layout()
    return ax.figure
