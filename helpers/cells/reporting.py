"""What a cell's code calls on a rank to show its progress and hand back its result: ``report`` and ``finish``.

``report(step=i, loss=...)`` writes the rank's step record (the launcher's live progress, hang detection and
straggler verdict read it); ``finish(value)`` keeps the rank's result, which the launcher collects into
``JobResult.returns``. Outside a launched job (a plain script, the notebook kernel) both do nothing.
"""

from __future__ import annotations

import time

import numpy as np

_state: dict = {"out": None, "last": None, "result": None, "finished": False, "start": None}


def attach(out, **start) -> None:
    """Used by ``helpers.cells.rank_main``: send this rank's records to the ``MetricsWriter`` ``out``; its ``start``
    record (``start`` fields) is written when the cell's ``init()`` returns (``started``), or else with its first
    record: the launcher's watch reads a first record as "init() has returned" (``helpers.job.stall``)."""
    _state.update(out=out, last=time.perf_counter(), result=None, finished=False, start=start)


def started() -> None:
    """Write the rank's ``start`` record once, before its first other record."""
    if _state["out"] is not None and _state["start"] is not None:
        _state["out"].write("start", **_state["start"])
        _state["start"] = None


def plain(value):
    """``value`` as JSON can hold it: numpy scalars and arrays as numbers and lists, MindSpore tensors too."""
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def report(step: int, loss=None, **fields) -> None:
    """One step done on this rank: its number (from 0), its loss, and any other numbers to keep (``data_s``: the
    seconds the step waited for its batch, read by the straggler verdict). ``step_s`` is timed here: the seconds
    since the previous ``report`` (the first: since the cell started)."""
    out = _state["out"]
    if out is None:
        return
    started()
    now = time.perf_counter()
    rec = {k: plain(v) for k, v in fields.items()}
    out.write("step", step=int(step), loss=None if loss is None else float(plain(loss)), step_s=now - _state["last"],
              **rec)
    _state["last"] = time.perf_counter()


def finish(value=None) -> None:
    """This rank's result (numbers, strings, lists, dicts; tensors and arrays become lists)."""
    _state["result"], _state["finished"] = plain(value), True


def result():
    """What ``finish`` kept on this rank (None when it was not called)."""
    return _state["result"]


def summary() -> dict:
    """The rank's summary fields: its ``finish`` value and whether ``finish`` was called."""
    return {"result": _state["result"], "finished": _state["finished"]}
