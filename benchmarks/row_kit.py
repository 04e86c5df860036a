"""The pieces every RESULTS.md row maker uses: the row, its verdict (``judge``) and the list being built."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One line of RESULTS.md: what was measured, the value, its goal and the JSON it comes from."""

    what: str
    measured: float | None       # None: not measured (the note says why)
    goal: str                    # ">= 1.0", "<= 0.6", "0.75..1.25", or "" (informational)
    source: str                  # results/<name>.json
    load: float | str | None = None   # 1-min load average when measured (or "lo-hi" over the runs), if recorded
    note: str = ""
    unit: str = "x"              # "x" for ratios, "s" for seconds


_GOAL = re.compile(r"^\s*(>=|<=|>|<)\s*([0-9.]+)\s*$")
_RANGE = re.compile(r"^\s*([0-9.]+)\s*\.\.\s*([0-9.]+)\s*$")


def judge(value: float | None, goal: str) -> str:
    """'met', 'missed by D (P %)', 'not measured' or '' for rows without a goal."""
    if not goal:
        return ""
    if value is None:
        return "not measured"
    m = _GOAL.match(goal)
    if m:
        op, target = m.group(1), float(m.group(2))
        ok = {">=": value >= target, "<=": value <= target, ">": value > target, "<": value < target}[op]
        if ok:
            return "met"
        gap = abs(target - value)
        return f"missed by {gap:.3g} ({100 * gap / target:.0f} %)" if target else f"missed by {gap:.3g}"
    m = _RANGE.match(goal)
    if m:
        lo, hi = float(m.group(1)), float(m.group(2))
        if lo <= value <= hi:
            return "met"
        gap = lo - value if value < lo else value - hi
        return f"missed by {gap:.3g} (outside {lo:g}..{hi:g})"
    raise ValueError(f"unreadable goal {goal!r}")


def _load(d: dict) -> float | str | None:
    """The 1-min load average of the measurement: the range over its runs when recorded, else at save time."""
    loads = [x["load_avg_1min"] for v in (d.get("runs") or {}).values() if isinstance(v, list)
             for x in v if isinstance(x, dict) and x.get("load_avg_1min") is not None]
    if loads:
        return f"{min(loads):.1f}-{max(loads):.1f}"
    m = d.get("machine") or {}
    if m.get("load_avg_1_5_15"):
        return m["load_avg_1_5_15"][0]
    env = d.get("environment") or {}
    return env.get("load_avg_1min")


def get_in(d, *keys):
    """``d[k1][k2]...``, or None where a key is missing."""
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _run_loads(d: dict, variant: str) -> str:
    loads = [x.get("load_avg_1min") for x in (get_in(d, "runs", variant) or []) if isinstance(x, dict)]
    return "/".join(f"{x:.1f}" for x in loads if x is not None) or "?"


def _best(v) -> str:
    """Note text: the same ratio from each run's fastest steady step (less hit by other jobs' load)."""
    return "" if v is None else f"; from the fastest steady steps: {v:.2f}x"


class Rows(list):
    """The table's rows being built; ``add`` names the source JSON and takes the load from it."""

    def __init__(self, results: dict[str, dict]):
        super().__init__()
        self.results = results

    def add(self, what, value, goal, name, note="", unit="x", load=None):
        self.append(Row(what, None if value is None else float(value), goal, f"results/{name}.json",
                        _load(self.results.get(name, {})) if load is None else load, note, unit))
