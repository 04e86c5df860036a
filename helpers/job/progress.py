"""Live per-rank progress of a job: ipywidgets bars in JupyterLab, plain text lines everywhere else.

Text lines are used when there is no widget front end to draw bars: in a terminal, under papermill (the
course runner and the tests set ``COURSE_PROGRESS=text``), or when ipywidgets is missing.
"""

from __future__ import annotations

import os
import sys
import time

from helpers.job.straggler import LiveStraggler, straggler_verdict


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
        self.jobs: dict[int, str] = {}          # rank -> the job of its launch it runs now (``job``)
        self.totals = {r: total for r in self.done}
        self.t0 = time.monotonic()
        self._last = -1e9
        self.live = LiveStraggler(len(self.done))
        self._print(f"{title}: started {len(self.done)} ranks, {total} steps each")

    def _print(self, line: str):
        print(line, file=self.stream, flush=True)

    def update(self, rank: int, step_done: int, loss: float | None = None, record: dict | None = None):
        """``record``: the rank's step record, which the live straggler mark reads (``helpers.job.straggler``)."""
        self.done[rank] = step_done
        if loss is not None:
            self.loss[rank] = loss
        if record is not None:
            self.live.feed(record)
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._print(self._line(now))

    def job(self, rank: int, name: str, steps: int) -> None:
        """``rank`` began another job of its launch (a cell's ``--then`` job, a chained job): its steps count anew."""
        self.jobs[rank], self.totals[rank], self.done[rank] = name, steps, 0

    def queued(self, text: str):
        """Where the job waits (a scheduler's state, reason, place in the queue): printed when it changes."""
        if text != getattr(self, "_queued", None):
            self._queued = text
            self._print(f"[{time.monotonic() - self.t0:6.1f}s] {text}")

    def _line(self, now):
        slowest = min(self.done, key=self.done.get)
        losses = [f"{v:.3f}" for _, v in sorted(self.loss.items())]
        jobs = ", ".join(dict.fromkeys(self.jobs[r] for r in sorted(self.jobs)))
        return (f"[{now - self.t0:6.1f}s] {jobs + ': ' if jobs else ''}steps done per rank "
                f"{' '.join(str(self.done[r]) for r in sorted(self.done))} "
                f"(all >= {self.done[slowest]}/{self.totals[slowest]})"
                + (f" | loss {' '.join(losses)}" if losses else "") + straggler_mark(self.live))

    def close(self, status: str):
        self._print(self._line(time.monotonic()) + f" | {status}" + final_verdict(self.live))


class WidgetProgress:
    """A bar and a loss label per rank, plus a status line, in one ipywidgets box."""

    def __init__(self, title: str, ranks, total: int):
        import ipywidgets as w
        from IPython.display import display

        self.total = total
        self.t0 = time.monotonic()
        self.header = w.HTML(f"<b>{title}</b>: starting {len(list(ranks))} ranks…")
        self.bars, self.labels, self.jobs = {}, {}, {}
        rows = []
        for r in ranks:
            self.bars[r] = w.IntProgress(value=0, min=0, max=total, description=f"rank {r}",
                                         layout=w.Layout(width="50%"))
            self.labels[r] = w.Label("")
            rows.append(w.HBox([self.bars[r], self.labels[r]]))
        self.box = w.VBox([self.header, *rows])
        self.live = LiveStraggler(len(rows))
        display(self.box)

    def update(self, rank: int, step_done: int, loss: float | None = None, record: dict | None = None):
        self.bars[rank].value = step_done
        if record is not None:
            self.live.feed(record)
        if loss is not None:
            self.labels[rank].value = f"{self.jobs.get(rank, '')}{step_done}/{self.bars[rank].max}  loss {loss:.4f}"
        marked = self.live.marked()
        for r, bar in self.bars.items():      # the straggler's bar turns orange while it holds the others back
            bar.bar_style = "warning" if marked and marked[0] == r else ""
        self.header.value = f"<b>running</b> {time.monotonic() - self.t0:.0f} s" + straggler_mark(self.live)

    def job(self, rank: int, name: str, steps: int) -> None:
        """``rank`` began another job of its launch: its bar restarts, its label names the job."""
        self.bars[rank].value, self.bars[rank].max = 0, max(1, steps)
        self.jobs[rank] = f"{name} "

    def queued(self, text: str):
        self.header.value = f"<b>waiting</b> {time.monotonic() - self.t0:.0f} s: {text}"

    def close(self, status: str):
        style = "success" if status.startswith("finished") else "danger"
        for bar in self.bars.values():
            bar.bar_style = style
        self.header.value = f"<b>{status}</b> after {time.monotonic() - self.t0:.1f} s" + final_verdict(self.live)


def straggler_mark(live: LiveStraggler) -> str:
    """`` | straggler: rank r (cause), last N steps`` while one rank has held the others back, else empty."""
    marked = live.marked()
    return f" | straggler: rank {marked[0]} ({marked[1]}), last {live.streak} judged steps" if marked else ""


def final_verdict(live: LiveStraggler) -> str:
    """The job's straggler verdict on the step records the display was given (empty when it was given none)."""
    return f" | {straggler_verdict(live.records).line()}" if len(live.records) > 1 else ""


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

    def job(self, *a, **k):
        pass

    def queued(self, text: str):
        pass

    def close(self, status: str):
        pass
