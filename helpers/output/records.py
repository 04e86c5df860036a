"""A chapter's recorded results: one JSON file of plain values, written by the notebook's last cell.

Tests, benchmarks and people comparing runs read these files; every value is computed by the run. Every chapter
imports this module first thing, so importing it also gives each figure the chapter shows its description
(``helpers.output.plots.enable_alt_text``: alt text in the notebook and in its HTML handout).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from helpers.core.paths import resolve
from helpers.output.plots import enable_alt_text

enable_alt_text()


def _plain(value):
    """numpy scalars/arrays and tuples -> JSON types; NaN/inf refused (a result must be a number)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"result value {value!r} is not a finite number")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot record a {type(value).__name__} ({value!r}); use numbers, strings, lists, dicts")


def record_results(path: str | Path, show: bool = True, **values) -> dict:
    """Write ``values`` to ``path`` (JSON) and display them; returns the plain dict written."""
    data = _plain(values)
    path = resolve(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)
    if show:
        try:
            from IPython.display import JSON, display

            display(JSON(data, expanded=True))
        except ImportError:
            pass
    return data


def load_results(path: str | Path) -> dict:
    """A recorded results file, read back as a dict (relative paths from the course home)."""
    return json.loads(resolve(path).read_text())
