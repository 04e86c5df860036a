"""Figures shared by the chapters (matplotlib; each function returns its Figure), and every figure's description.

Importing this module (``helpers.output.records`` does, and every chapter imports that first) makes each figure a
notebook shows carry a one-line description of what it shows (``describe``; ``set_description`` overrides it): the
alt text of the figure in JupyterLab and in the chapter's HTML handout.
"""

from __future__ import annotations

import base64
import io

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.container import BarContainer

DESCRIPTION_ATTR = "_course_description"   # where set_description() keeps an explicit description on the figure
MAX_NAMES = 8                              # legend or category names listed per panel before "... (N in all)"


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


# ---------------------------------------------------------------- descriptions (alt text)
def time_split_bars(ranks, seconds, parts, title: str, straggler: int | None = None):
    """A stacked bar per rank: its mean seconds per step in each part (``parts``, e.g. data / compute /
    communication / other); the straggler's tick label is marked."""
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(ranks) + 2), 3.4))
    x, bottom = np.arange(len(ranks)), np.zeros(len(ranks))
    for j, name in enumerate(parts):
        ax.bar(x, seconds[:, j], bottom=bottom, label=name, width=0.7)
        bottom = bottom + seconds[:, j]
    ax.set_xticks(x, [f"rank {r}" + (" (straggler)" if r == straggler else "") for r in ranks], rotation=30,
                  fontsize=8)
    ax.set(ylabel="seconds per step", title=title)
    ax.legend(fontsize=8, ncol=len(parts))
    if straggler is None and len(ranks):    # level bars are the finding: say so on the figure
        spread = float((bottom.max() - bottom.min()) / bottom.mean()) if bottom.mean() > 0 else 0.0
        ax.text(0.5, 0.5, f"no straggler: the ranks' steps differ by at most {spread:.0%}", transform=ax.transAxes,
                ha="center", fontsize=9, bbox=dict(facecolor="white", alpha=0.8, edgecolor="none"))
    fig.tight_layout()
    who = f"; rank {straggler} (straggler) is marked" if straggler is not None else "; no straggler"
    return set_description(fig, f"Figure: {title}: one stacked bar per rank of {len(ranks)}, seconds per step in "
                                f"{', '.join(parts)}{who}")


def set_description(fig, text: str):
    """Give ``fig`` an explicit one-line description, used instead of the one built from the figure; returns ``fig``."""
    setattr(fig, DESCRIPTION_ATTR, " ".join(str(text).split()))
    return fig


def _names(names) -> str:
    names = [n for n in names if n and not n.startswith("_")]
    return ", ".join(names[:MAX_NAMES]) + (f", ... ({len(names)} in all)" if len(names) > MAX_NAMES else "")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _marks(ax) -> str:
    """What one axes draws (lines, bars, heatmaps, shaded spans, points) and the names its legend or ticks give."""
    kinds = []
    lines = [ln for ln in ax.get_lines() if ln.get_visible()]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if lines:
        kinds.append(_plural(len(lines), "line"))
    if bars:
        kinds.append(_plural(sum(len(c) for c in bars), "bar"))
    for im in ax.get_images():
        bar = getattr(im, "colorbar", None)
        label = (bar.ax.get_ylabel() or bar.ax.get_xlabel()) if bar else ""
        kinds.append("a heatmap" + (f" (colour: {label})" if label else ""))
    shapes = [c for c in ax.collections if c.get_visible() and getattr(c, "colorbar", None) is None]
    if shapes:
        kinds.append("points" if all(type(c).__name__ == "PathCollection" for c in shapes) else "shaded spans")
    legend = ax.get_legend()
    named = _names(t.get_text() for t in legend.get_texts()) if legend else ""
    if not named and bars:                       # categories: the tick labels along the bars' base, unless numbers
        horizontal = all(getattr(c, "orientation", "vertical") == "horizontal" for c in bars)
        ticks = [t.get_text() for t in (ax.get_yticklabels() if horizontal else ax.get_xticklabels())]
        named = _names(ticks) if any(t and not t.lstrip("-−").replace(".", "").isdigit() for t in ticks) else ""
    if not named and shapes and ax.texts:        # points labelled in place (annotate)
        named = _names(t.get_text() for t in ax.texts)
    return " and ".join(kinds) + (f" ({named})" if named else "")


def _panel(ax) -> str:
    """One axes as 'title: y against x, marks'."""
    title = ax.get_title() or ax.get_title("left") or ax.get_title("right")
    x, y = ax.get_xlabel(), ax.get_ylabel()
    axes = f"{y} against {x}" if x and y else (f"{y} (y axis)" if y else f"{x} (x axis)" if x else "")
    body = ", ".join(p for p in (axes, _marks(ax)) if p)
    return f"{title}: {body}" if title and body else title or body


def describe(fig) -> str:
    """A one-line description of what ``fig`` shows: its explicit one (``set_description``), else built from its
    title, each panel's title, axes labels and marks (lines, bars, heatmaps) with their legend names."""
    explicit = getattr(fig, DESCRIPTION_ATTR, None)
    if explicit:
        return explicit
    bars = {id(im.colorbar.ax) for ax in fig.axes for im in ax.get_images() if getattr(im, "colorbar", None)}
    panels = [d for d in (_panel(ax) for ax in fig.axes if id(ax) not in bars and ax.get_visible()) if d]
    title = " ".join(fig.get_suptitle().split())
    if len(panels) == 1:
        text = f"{title}. {panels[0]}" if title else panels[0]
    elif panels:
        text = (f"{title}. " if title else "") + f"{len(panels)} panels: " + "; ".join(
            f"({i}) {p}" for i, p in enumerate(panels, 1))
    else:
        text = title or "a figure without title, labels or legend"
    return "Figure: " + " ".join(text.split())


def markdown_image(png_base64: str, alt: str) -> str:
    """``![alt](data:image/png;base64,...)``, the alt text escaped so markdown keeps it verbatim."""
    text = alt.replace("&", "&amp;").replace("\\", "\\\\")
    for ch in "[]`*_":
        text = text.replace(ch, "\\" + ch)
    text = text.replace("<", "&lt;").replace(">", "&gt;")
    return f"![{text}](data:image/png;base64,{png_base64})"


def _png_base64(fig) -> str | None:
    """The PNG the notebook shows for ``fig`` (the inline backend's own renderer when one is registered), base64."""
    if not fig.axes and not fig.lines:          # shown as nothing, like IPython's print_figure (core/pylabtools.py)
        return None
    try:
        from IPython import get_ipython

        data = get_ipython().display_formatter.formatters["image/png"].lookup(fig)(fig)
    except (ImportError, AttributeError, KeyError):     # no IPython, or no PNG renderer registered for figures
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        data = buf.getvalue()
    data = data[0] if isinstance(data, tuple) else data     # a retina renderer returns (data, size)
    if data is None:                                         # nothing drawn (a figure without axes)
        return None
    return base64.b64encode(data).decode("ascii") if isinstance(data, bytes) else data


def figure_bundle(fig):
    """What IPython shows for a figure besides its PNG: the description as ``text/plain``, a ``text/markdown``
    image with it as alt text, and it as the PNG's ``alt`` metadata; None for an empty figure.

    nbconvert 7.17's HTML export (template ``lab``) writes an ``image/png`` output without alt (``lab/base.html.j2``,
    block ``data_png``), then gives every ``<img>`` lacking one "No description has been provided for this image"
    and warns "Alternative text is missing on N image(s)" (``exporters/html.py``); it prefers ``text/markdown`` to
    ``image/png`` (``HTMLExporter.default_config``, ``display_data_priority``) and renders a markdown image's text as
    ``alt``. Only the ``classic`` template reads ``alt`` from the PNG's metadata (``classic/base.html.j2``)."""
    png = _png_base64(fig)                       # first: drawing the figure fills in its tick labels
    if png is None:
        return None
    alt = describe(fig)
    return {"text/markdown": markdown_image(png, alt), "text/plain": alt}, {"image/png": {"alt": alt}}


def enable_alt_text(shell=None) -> bool:
    """Make the running IPython (or ``shell``) show every matplotlib figure with its description; False outside."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False
    shell.display_formatter.mimebundle_formatter.for_type_by_name("matplotlib.figure", "Figure", figure_bundle)
    return True


enable_alt_text()


def throughput_bars(ax, global_batch: int, steps: dict[str, list[float]]) -> None:
    """Images per second per run: a bar at the median timed step and a whisker over the fastest and slowest one,
    with the number of timed steps (two steps cannot rank two runs that differ by less than their spread)."""
    for i, (name, times) in enumerate(steps.items()):
        rate = global_batch / np.asarray(times)
        mid = float(global_batch / np.median(times))      # as the job's img_per_s: the batch over the median step
        ax.bar(i, mid, color=f"C{i}")
        ax.errorbar(i, mid, yerr=[[mid - rate.min()], [rate.max() - mid]], color="k", capsize=6)
        ax.annotate(f"median of\n{len(times)} steps", (i, 0), ha="center", va="bottom", fontsize=8, color="white",
                    xytext=(0, 4), textcoords="offset points")
    ax.set(xticks=range(len(steps)), xticklabels=[k.replace("_", " ") for k in steps], ylabel="images / s")


def rank_memory_bars(ax, peaks: dict[str, list], ready, title: str, note: str | None = None) -> None:
    """Each run's peak memory per rank side by side, the memory before the first step as a tick, whole-rank axis;
    ``note`` (e.g. what a cap counts that the bars do not show) under the title."""
    ranks = np.arange(len(ready))
    width = 0.8 / len(peaks)
    for i, (name, mb) in enumerate(peaks.items()):
        ax.bar(ranks + (i - (len(peaks) - 1) / 2) * width, mb, width, label=name)
    ax.plot(ranks, ready, "k_", ms=14, label="before first step")
    ax.set(xlabel="rank", ylabel="MB", xticks=ranks, xlim=(-0.6, len(ranks) - 0.4))
    ax.set_title(title + (f"\n({note})" if note else ""), fontsize=10 if note else None)
    ax.legend(fontsize=8, loc="lower right")
