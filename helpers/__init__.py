"""The course's tested library: every notebook calls into these modules (one concern each).

MindSpore logs at WARNING level by default, which floods notebooks with messages about absent GPU/Ascend
plugins; the course sets ``GLOG_v=3`` (errors only) unless the user chose a level.

Two clones sharing one virtualenv: ``pip install -e .`` in clone A makes ``import helpers`` find A's copy
from anywhere, so a notebook of clone B would run A's code and write into A's ``runs/``. When the working
directory is inside another course checkout, this package therefore loads its modules from that checkout's
``helpers/`` (and puts that checkout first on ``sys.path`` for ``data_prep``), and says so on stderr.
"""

import os
import sys

os.environ.setdefault("GLOG_v", "3")


def _checkout_of(path):
    """The nearest folder at or above ``path`` holding this course's pyproject.toml and a helpers/ package
    (the same test as ``helpers.core.paths.checkout_of``, kept stdlib-only and tiny)."""
    import tomllib

    path = os.path.realpath(path)
    while True:
        if os.path.isfile(os.path.join(path, "helpers", "__init__.py")):
            try:
                with open(os.path.join(path, "pyproject.toml"), "rb") as f:
                    if tomllib.load(f).get("project", {}).get("name") == "ms-distributed-resnet-course":
                        return path
            except (OSError, ValueError):
                pass
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def _follow_working_checkout():
    try:
        here = _checkout_of(os.getcwd())
    except OSError:                          # the working directory was deleted
        return
    mine = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    if here is None or here == mine:
        return
    target = os.path.join(here, "helpers")
    __path__[:] = [target]                   # every helpers.x submodule now loads from the notebook's checkout
    if here not in sys.path:
        sys.path.insert(0, here)             # and so does data_prep
    print(f"helpers: using {target} (this notebook's checkout, the working directory {os.getcwd()} is in it), "
          f"not {os.path.join(mine, 'helpers')} where the environment was installed", file=sys.stderr)


_follow_working_checkout()
