"""Code written in a notebook cell, run on every rank: ``%%ranks`` in the kernel, ``report``/``finish`` on the ranks.

Importing this package on a rank is light (no IPython, no MindSpore); ``%load_ext helpers.cells`` registers the
magic in a notebook (``helpers.cells.magic``).
"""

from helpers.cells.reporting import finish, report


def load_ipython_extension(ipython) -> None:
    """``%load_ext helpers.cells``: registers the ``%%ranks`` cell magic."""
    from helpers.cells.magic import load_ipython_extension as load

    load(ipython)


__all__ = ["finish", "report", "load_ipython_extension"]
