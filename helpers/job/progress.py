"""Live per-rank progress of a job: ipywidgets bars in JupyterLab, plain text lines everywhere else.

Text lines are used when there is no widget front end to draw bars: in a terminal, under papermill (the
course runner and the tests set ``COURSE_PROGRESS=text``), or when ipywidgets is missing.
"""

from __future__ import annotations

import os
import sys
import time


def widgets_available() -> bool:
    """True when ipywidgets can be shown (a Jupyter kernel) and ``COURSE_PROGRESS`` is not ``text``."""
    if os.environ.get("COURSE_PROGRESS", "auto") == "text":
        return False
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
            return False
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


class TextProgress:
    """One line per update, at most every ``every_s`` seconds (and always for the first and last)."""

    def __init__(self, title: str, ranks, total: int, every_s: float = 5.0, stream=None):
        self.title, self.total, self.every_s = title, total, every_s
        self.stream = stream or sys.stdout
        self.done = {r: 0 for r in ranks}
        self.loss: dict[int, float] = {}
        self.t0 = time.monotonic()
        self._last = -1e9
        self._print(f"{title}: started {len(self.done)} ranks, {total} steps each")

    def _print(self, line: str):
        print(line, file=self.stream, flush=True)

    def update(self, rank: int, step_done: int, loss: float | None = None):
        self.done[rank] = step_done
        if loss is not None:
            self.loss[rank] = loss
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._print(self._line(now))

    def _line(self, now):
        finished = min(self.done.values())
        losses = [f"{v:.3f}" for _, v in sorted(self.loss.items())]
        return (f"[{now - self.t0:6.1f}s] steps done per rank "
                f"{' '.join(str(self.done[r]) for r in sorted(self.done))} (all >= {finished}/{self.total})"
                + (f" | loss {' '.join(losses)}" if losses else ""))

    def close(self, status: str):
        self._print(self._line(time.monotonic()) + f" | {status}")


class WidgetProgress:
    """A bar and a loss label per rank, plus a status line, in one ipywidgets box."""

    def __init__(self, title: str, ranks, total: int):
        import ipywidgets as w
        from IPython.display import display

        self.total = total
        self.t0 = time.monotonic()
        self.header = w.HTML(f"<b>{title}</b>: starting {len(list(ranks))} ranks…")
        self.bars, self.labels = {}, {}
        rows = []
        for r in ranks:
            self.bars[r] = w.IntProgress(value=0, min=0, max=total, description=f"rank {r}",
                                         layout=w.Layout(width="50%"))
            self.labels[r] = w.Label("")
            rows.append(w.HBox([self.bars[r], self.labels[r]]))
        self.box = w.VBox([self.header, *rows])
        display(self.box)

    def update(self, rank: int, step_done: int, loss: float | None = None):
        self.bars[rank].value = step_done
        if loss is not None:
            self.labels[rank].value = f"{step_done}/{self.total}  loss {loss:.4f}"
        self.header.value = f"<b>running</b> {time.monotonic() - self.t0:.0f} s"

    def close(self, status: str):
        style = "success" if status.startswith("finished") else "danger"
        for bar in self.bars.values():
            bar.bar_style = style
        self.header.value = f"<b>{status}</b> after {time.monotonic() - self.t0:.1f} s"


def make_progress(title: str, ranks, total: int, mode: str = "auto"):
    """``mode``: ``auto`` (widgets when a front end can show them), ``widgets``, ``text`` or ``none``."""
    ranks = list(ranks)
    if mode == "none":
        return NullProgress()
    if mode == "widgets" or (mode == "auto" and widgets_available()):
        return WidgetProgress(title, ranks, total)
    return TextProgress(title, ranks, total)


class NullProgress:
    """A progress display that shows nothing (``mode="none"``)."""

    def update(self, *a, **k):
        pass

    def close(self, status: str):
        pass
