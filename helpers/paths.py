"""Where the course keeps its runs, data and results.

Everything is anchored at the course home (the repository root, or ``$COURSE_HOME``), so a notebook
run by papermill from any working directory writes to the same places as one opened in JupyterLab.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]


def course_home() -> Path:
    env = os.environ.get("COURSE_HOME")
    if env:
        return Path(env).resolve()
    if (_REPO / "pyproject.toml").exists():
        return _REPO
    return Path.cwd()


def resolve(path: str | os.PathLike) -> Path:
    """An absolute path: relative ones are taken from the course home."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else course_home() / p


def new_run_dir(chapter: str, name: str, root: str | os.PathLike = "runs") -> Path:
    """A fresh ``runs/<chapter>/<timestamp>-<name>/``; never reuses an existing folder."""
    base = resolve(root) / chapter
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        d = base / (f"{stamp}-{name}" if i == 0 else f"{stamp}-{name}-{i}")
        try:
            d.mkdir(parents=True, exist_ok=False)
            return d
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a new run directory under {base}")
