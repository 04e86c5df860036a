"""Where the course's code is, and where it keeps its runs, data and results: two different places.

The code and the chapter notebooks are in the checkout whose ``helpers`` package runs (``code_root``,
``notebooks_dir``), whatever ``$COURSE_HOME`` says. What a run writes is anchored at the course home, so a
notebook run by papermill from any working directory writes to the same places as one opened in JupyterLab.
The course home is ``$COURSE_HOME`` when set (runs, data and results on another disk), else the course
checkout the working directory is in (so a second clone that shares the first clone's virtualenv keeps its
runs, caches and results in its own ``runs/``), else the checkout holding this package, else the working directory.
"""

from __future__ import annotations

import os
import shutil
import time
import tomllib
from pathlib import Path

from helpers.core.errors import DataError

PROJECT_NAME = "ms-distributed-resnet-course"   # [project] name in pyproject.toml: marks a course checkout
JOB_ID_ENV = "COURSE_JOB_ID"    # every process of a job carries its id in this variable (helpers.job.processes)
LAUNCHER_PID_ENV = "COURSE_LAUNCHER_PID"   # a local job's ranks carry the launching process's pid (helpers.job.rank_guard)
CELL_FILE = "cell.py"          # in a cell job's run directory: the %%ranks cell, line for line (helpers.cells)
MORE_PREFIX = "then-"          # <run_dir>/then-<i>/: the i-th further job of a %%ranks --then chain (its config, files)
MIN_FREE_BYTES = 200 * 1024 * 1024              # new_run_dir refuses to start a run below this much free space

_REPO = Path(__file__).resolve().parents[2]


def _is_checkout(folder: Path) -> bool:
    """The same test as ``helpers.__init__._checkout_of`` (kept in step; tests/unit/test_paths.py checks)."""
    if not (folder / "helpers" / "__init__.py").is_file():
        return False
    try:
        with open(folder / "pyproject.toml", "rb") as f:
            return tomllib.load(f).get("project", {}).get("name") == PROJECT_NAME
    except (OSError, tomllib.TOMLDecodeError):
        return False


def checkout_of(path: str | os.PathLike) -> Path | None:
    """The nearest folder at or above ``path`` that is a course checkout (this project's pyproject.toml
    and a ``helpers/`` package), or None."""
    p = Path(path).resolve()
    for folder in (p, *p.parents):
        if _is_checkout(folder):
            return folder
    return None


def code_root() -> Path:
    """The checkout whose ``helpers`` package is in use (a worker needs it first on its PYTHONPATH)."""
    import helpers

    return Path(helpers.__path__[0]).resolve().parent


def notebooks_dir() -> Path:
    """The folder of the chapter notebooks: in the code's checkout, never under ``$COURSE_HOME``."""
    return code_root() / "notebooks"


def course_home() -> Path:
    """The folder runs, data and results live under (the rules are in the module docstring)."""
    env = os.environ.get("COURSE_HOME")
    if env:
        return Path(env).resolve()
    return checkout_of(Path.cwd()) or checkout_of(_REPO) or Path.cwd()


def resolve(path: str | os.PathLike) -> Path:
    """An absolute path: relative ones are taken from the course home."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else course_home() / p


def _check_free_space(folder: Path) -> None:
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return                                   # cannot tell: let mkdir report the real problem
    if free < MIN_FREE_BYTES:
        raise DataError(f"{folder}: only {free / 2**20:.0f} MB free on this disk, fewer than the "
                        f"{MIN_FREE_BYTES / 2**20:.0f} MB a run needs (logs, checkpoints, compile cache). "
                        "Free some space, or set COURSE_HOME (or run_job's run_root) to a folder on a disk "
                        "with room.")


def new_run_dir(chapter: str, name: str, root: str | os.PathLike = "runs") -> Path:
    """A fresh ``runs/<chapter>/<timestamp>-<name>/``; never reuses an existing folder.

    Raises ``DataError`` (naming the folder and the fix) when the runs folder cannot be written or its disk
    has less than ``MIN_FREE_BYTES`` free, instead of failing later inside a job.
    """
    base = resolve(root) / chapter
    _check_free_space(base)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        d = base / (f"{stamp}-{name}" if i == 0 else f"{stamp}-{name}-{i}")
        try:
            d.mkdir(parents=True, exist_ok=False)
            return d
        except FileExistsError:
            continue
        except OSError as e:                     # PermissionError, read-only filesystem, disk full, ...
            raise DataError(f"cannot create the run folder {d}: {e.strerror or e}. The runs folder must be "
                            "writable: set COURSE_HOME (or run_job's run_root) to a writable folder with "
                            "free space, e.g. COURSE_HOME=$HOME/course-runs.") from e
    raise RuntimeError(f"could not create a new run directory under {base}")


def more_dir(run_dir: str | Path, i: int) -> Path:
    """The folder of a ``%%ranks --then`` chain's ``i``-th further job (1, 2, ...): its ``config.json`` and files."""
    return Path(run_dir) / f"{MORE_PREFIX}{i}"
