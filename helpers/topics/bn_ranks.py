"""Chapter 01's BatchNorm probe read from a job: how far apart the ranks' batch statistics and losses are per split."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from helpers.output.tables import show_md, show_table

FIGURES = ("rank_spread", "loss_spread_own", "loss_spread_shared")
CLAIM_KEYS = ("bn_rank", "device_target", "sync_batchnorm_error")   # what a chapter records for its BatchNorm claims


def probes(result) -> list[dict]:
    """Each rank's ``bn_probe`` record of one phase (``helpers.train.evaluation.judge``), by rank; [] if none."""
    return [result.summaries[r]["bn_probe"] for r in sorted(result.summaries) if "bn_probe" in result.summaries[r]]


def phase_figures(result) -> dict | None:
    """One phase's figures: the ranks' batch-mean spread (mean over BatchNorm layers, in channel std; the same on
    every rank) and the std over ranks of their loss on their next batches, with their own batch statistics and
    with the shared ones."""
    p = probes(result)
    if not p:
        return None
    return {"rank_spread": float(np.mean(p[0]["layers"])),
            "loss_spread_own": float(np.std([x["loss_own"] for x in p])),
            "loss_spread_shared": float(np.std([x["loss_shared"] for x in p])),
            "shared_statistics": bool(p[0]["shared_statistics"])}


def by_seed(by_seed_results: dict) -> dict | None:
    """``{figure: {split: [one value per seed]}}`` from ``{seed: {split: JobResult}}``; None without a probe."""
    out = {f: {} for f in FIGURES}
    for results in by_seed_results.values():
        for k, r in results.items():
            fig = phase_figures(r)
            if fig is None:
                return None
            for f in FIGURES:
                out[f].setdefault(k, []).append(fig[f])
    return out


def means(figures: dict) -> dict:
    """``{figure: {split: mean over seeds}}``."""
    return {f: {k: float(np.mean(v)) for k, v in per.items()} for f, per in figures.items()}


def table_rows(figures: dict) -> list[tuple]:
    """(split, batch-mean spread, loss spread with own statistics, with shared statistics), means over seeds."""
    m = means(figures)
    return [(k, round(m["rank_spread"][k], 3), round(m["loss_spread_own"][k], 3), round(m["loss_spread_shared"][k], 3))
            for k in m["rank_spread"]]


def z_matrix(result) -> np.ndarray:
    """Ranks x channels: each rank's batch mean of the drawn BatchNorm layer's channels, minus the ranks' mean,
    in units of the channel's std (``helpers.train.batchnorm.rank_spread``)."""
    return np.array([x["z"] for x in probes(result)])


def plot_rank_statistics(results: dict, title: str):
    """One heatmap per split: ranks x channels of ``z_matrix``, one colour scale centred on 0."""
    z = {k: z_matrix(r) for k, r in results.items()}
    top = max(0.05, max(float(np.abs(m).max()) for m in z.values()))
    fig, axes = plt.subplots(1, len(z), figsize=(3.3 * len(z), 3.0), sharey=True, squeeze=False)
    for ax, (k, m) in zip(axes[0], z.items()):
        im = ax.imshow(m, aspect="auto", cmap="RdBu_r", vmin=-top, vmax=top)
        ax.set(title=k, xlabel="channel", ylabel="rank" if ax is axes[0][0] else None)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="rank's batch mean - ranks' mean (channel std)")
    fig.suptitle(title, y=1.04)
    return fig


def show(results: dict, figures: dict, seed: int, text: str):
    """``text`` (the section's result), the table of ``figures`` (``by_seed``) and the heatmaps of ``results``
    (one seed's phases); returns the figure."""
    show_md(text)
    show_table(table_rows(figures), ["strategy", "batch means apart (channel std)", "loss spread: own statistics",
                                     "shared"])
    return plot_rank_statistics(results, f"each rank's batch mean, last BatchNorm layer (seed {seed})")
