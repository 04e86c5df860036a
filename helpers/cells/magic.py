"""The ``%%ranks`` cell magic: the cell's code runs on every rank of a job, its result lands in a notebook variable.

    %load_ext helpers.cells
    %%ranks ch.base --out first
    init(); ...; report(step=i, loss=loss); finish(value)

The first argument is the notebook's ``JobConfig`` (a name or expression: ranks, device, data, timeouts), which the
cell reads as ``cfg``; ``--out`` (default ``cell_result``) receives the ``JobResult``; ``--name`` names the job.
"""

from __future__ import annotations

import argparse
import re
import shlex

from helpers.cells.program import SAME_GRAPH_ENV, CellError
from helpers.core.config import JobConfig


USAGE = ("Usage: %%ranks CONFIG [--out NAME] [--name JOB] [--progress auto|text|none] [--same-graph] "
         "[--then FOLLOW_ON]")


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``CellError`` instead of exiting the kernel."""

    def error(self, message):
        raise CellError(f"%%ranks: {message}. {USAGE}")


def parse_magic_line(line: str) -> argparse.Namespace:
    """``CONFIG [--out NAME] [--name JOB] [--progress auto|text|none] [--same-graph]`` -> their values
    (``CellError`` if bad). CONFIG is everything before the first option, so an expression with spaces works:
    ``cfg.replace(steps=2)``. ``--same-graph``: the cell's first compiled graph is the same on every rank (data
    parallel, no rank-dependent groups), so ranks 1.. load rank 0's instead of all compiling it at once.
    ``--then NAME``: a notebook ``FollowOn`` (or None: nothing follows) the same ranks run after the cell, in the
    same launch."""
    first = re.search(r"(?:^|\s)--", line)
    head, tail = (line[:first.start()], line[first.start():]) if first else (line, "")
    ap = _Parser(prog="%%ranks", add_help=False)
    ap.add_argument("--out", default="cell_result")
    ap.add_argument("--name", default=None)
    ap.add_argument("--progress", default=None)
    ap.add_argument("--same-graph", action="store_true")
    ap.add_argument("--then", default=None)
    try:
        args, extra = ap.parse_known_args(shlex.split(tail))
    except ValueError as exc:              # shlex: an unclosed quote
        raise CellError(f"%%ranks {line}: {exc}. {USAGE}") from None
    if extra:
        raise CellError(f"%%ranks {line}: unknown {' '.join(extra)}. {USAGE}")
    args.cfg = head.strip()
    if not args.cfg:
        raise CellError(f"%%ranks: name the job's config first. {USAGE}")
    if not args.out.isidentifier():
        raise CellError(f"%%ranks: --out {args.out!r} is not a Python name")
    return args


def ranks_magic(line: str, cell: str, namespace: dict):
    """Run ``cell`` on the ranks of the config ``line`` names (the cell reads it as ``cfg``); store the ``JobResult``
    in ``namespace``."""
    from IPython.display import Markdown, display

    from helpers.cells.run import run_cell

    args = parse_magic_line(line)
    try:
        cfg = eval(args.cfg, namespace)         # noqa: S307 - the learner's own notebook expression
    except Exception as exc:
        raise CellError(f"%%ranks {line}: {args.cfg} cannot be read: {type(exc).__name__}: {exc}") from None
    if not isinstance(cfg, JobConfig):
        raise CellError(f"%%ranks {line}: {args.cfg} is a {type(cfg).__name__}, not a JobConfig; build one with "
                        "helpers.core.config.job_config(...)")
    if args.name:
        cfg = cfg.replace(name=args.name)
    if args.same_graph:
        cfg = cfg.replace(env={**cfg.env, SAME_GRAPH_ENV: "1"})
    then = follow_on(args.then, namespace, line)
    progress = args.progress or namespace.get("progress", "auto")
    result = run_cell(cell, cfg, namespace, magic_line=f"%%ranks {line}", progress=progress, then=then)
    namespace[args.out] = result
    display(Markdown(returns_table(result, args.out)))


def follow_on(name: str | None, namespace: dict, line: str):
    """The ``FollowOn`` that ``--then NAME`` names in the notebook (None: no option, or the name holds None)."""
    from helpers.cells.run import FollowOn

    if name is None:
        return None
    if not name.isidentifier() or name not in namespace:
        raise CellError(f"%%ranks {line}: --then {name!r} is not a notebook name")
    value = namespace[name]
    if value is not None and not isinstance(value, FollowOn):
        raise CellError(f"%%ranks {line}: --then {name} is a {type(value).__name__}, not a FollowOn "
                        "(helpers.cells.run.FollowOn) or None")
    return value


def cell_text_of(value) -> str:
    """One table cell: floats to 9 significant digits (enough to see equal weights), lists and the rest as written."""
    if isinstance(value, float):
        return f"{value:.9g}"
    return str(value).replace("|", "\\|")


def returns_table(result, out: str) -> str:
    """A markdown table of each rank's ``finish`` value (what the notebook's ``<out>.returns`` holds): one column
    per key when every rank returned a dict with the same keys."""
    values = result.returns
    keys = list(next(iter(values.values()))) if values and all(isinstance(v, dict) for v in values.values()) else []
    if keys and all(list(v) == keys for v in values.values()):
        head = "| rank | " + " | ".join(map(cell_text_of, keys)) + " |\n|---|" + "---|" * len(keys)
        rows = [f"| {r} | " + " | ".join(cell_text_of(v[k]) for k in keys) + " |" for r, v in values.items()]
    else:
        head = "| rank | result |\n|---|---|"
        rows = [f"| {r} | {cell_text_of(v)} |" for r, v in values.items()]
    return (f"ran on {len(values)} ranks in {result.wall_s:.1f} s; each rank's `finish(...)` is in "
            f"`{out}.returns`:\n\n{head}\n" + "\n".join(rows))


def load_ipython_extension(ipython) -> None:
    """``%load_ext helpers.cells`` registers ``%%ranks``."""
    ipython.register_magic_function(lambda line, cell: ranks_magic(line, cell, ipython.user_ns),
                                    magic_kind="cell", magic_name="ranks")
