"""Reading and judging exercise answers, shared by ``helpers.exercises.ch00`` .. ``_ch04``.

Strict on purpose: an answer is right only in the type the prompt asks for (a tuple where the prompt writes
one, ``int`` for a count or a rank; numpy integers count as ints, as the course's helpers return them), and
a wrongly typed answer gets a hint that names its type. ``checker`` keeps every checker from raising. The
checker of an edit to a ``%%ranks`` cell reads its ``JobResult`` (``on_ranks``): ``cell_returns``, ``cell_tree``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import numpy as np

CELL_FILE = "cell.py"      # a %%ranks cell's source in its run folder (helpers.cells.program.CELL_FILE)
RUN_NAME = "on_ranks"      # the notebook variable the chapters' %%ranks cells store their JobResult in


def say(ok: bool | None, text: str) -> bool:
    """Print the verdict (the notebooks show it under the cell) and return True only when right."""
    head = "not attempted yet" if ok is None else ("right" if ok else "wrong, because")
    print(f"{head}: {text}" if ok is not False else f"{head} {text}")
    return bool(ok)


def checker(func):
    """A checker never raises in a notebook (papermill runs through them): an error is a 'wrong' verdict."""
    @functools.wraps(func)
    def checked(answer, *args, **kwargs) -> bool:
        try:
            return func(answer, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 -- an odd answer must not stop the notebook
            return say(False, f"the checker could not read {answer!r} ({type(exc).__name__}: {exc}); "
                               "answer in the form the exercise shows")
    return checked


def as_int(value):
    """``value`` as an int when it is one (numpy integers too); None for a bool, float, string, ..."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def read_count(answer, ask: str):
    """``(count, None)`` for a whole-number answer; else ``(None, verdict)`` once the reason is said (not
    attempted: ``set answer = <ask>``; wrongly typed: its type named)."""
    if answer is None:
        return None, say(None, f"set answer = {ask}")
    got = as_int(answer)
    if got is None:
        return None, say(False, f"the exercise asks for a whole number (int), got {kind_of(answer)}")
    return got, None


def kind_of(value) -> str:
    """Names a wrongly typed answer in a hint."""
    if isinstance(value, (bool, np.bool_)):
        return f"the bool {value!r}, not a number"
    if isinstance(value, str):
        return f"the string {value!r} (text, not a number: drop the quotes)"
    if isinstance(value, (float, np.floating)):
        return f"the float {value!r}, not a whole number (int)"
    return f"a {type(value).__name__} {value!r}"


def tuple_error(answer, what: str, n: int | None = None, str_at: int | None = None) -> str | None:
    """Why ``answer`` is not the tuple ``what`` (``n`` items; ints, a string at ``str_at``), or None."""
    if not isinstance(answer, tuple):
        return f"the exercise asks for a tuple {what}, got {kind_of(answer)}"
    if n is not None and len(answer) != n:
        return f"the exercise asks for a tuple {what} of {n} items, got {len(answer)}: {answer!r}"
    for i, item in enumerate(answer):
        if i == str_at and not isinstance(item, str):
            return f"item {i} of the tuple {what} is a string, got {kind_of(item)}"
        if i != str_at and as_int(item) is None:
            return f"the tuple {what} holds whole numbers (int), but item {i} is {kind_of(item)}"
    return None


def cell_returns(run, keys: tuple[str, ...], todo: str):
    """``(returns, None)``: each rank's ``finish`` dict in ``run`` (a ``%%ranks`` cell's ``JobResult``) when every
    one holds ``keys``; else ``(None, verdict)`` once the reason is said (no run yet: ``todo``)."""
    if run is None:
        return None, say(None, f"{todo}; then set answer and pass the cell's result too: (answer, {RUN_NAME})")
    if isinstance(run, dict):
        return None, say(False, f"pass {RUN_NAME} itself (the cell's JobResult), not a dict such as "
                                f"{RUN_NAME}.returns")
    returns = getattr(run, "returns", None)
    if not isinstance(returns, dict) or getattr(run, "run_dir", None) is None:
        return None, say(False, f"the second argument is the code cell's result {RUN_NAME} (a JobResult with "
                                f".returns and .run_dir), got a value of type {type(run).__name__}")
    lacking = [k for k in keys
               if not returns or not all(isinstance(v, dict) and k in v for v in returns.values())]
    if lacking:
        got = next((sorted(v) for v in returns.values() if isinstance(v, dict)), None)
        what = f"whose ranks returned {got}" if got is not None else "with no rank's finish(...) dict"
        return None, say(False, f"{RUN_NAME} comes from another cell (run {Path(run.run_dir).name}, {what}), "
                                f"without {', '.join(map(repr, lacking))}: not this chapter's code cell; {todo}")
    return returns, None


def cell_tree(run):
    """``(ast of the cell that made run, None)``; ``(None, verdict)`` when its ``cell.py`` cannot be read."""
    path = Path(run.run_dir) / CELL_FILE
    try:
        return ast.parse(path.read_text()), None
    except (OSError, SyntaxError, ValueError) as exc:
        return None, say(False, f"the source of the cell that made {RUN_NAME} is not readable ({path}: "
                                f"{type(exc).__name__}); run the chapter's code cell again")


def cell_run(run, keys: tuple[str, ...], todo: str):
    """``(returns, tree, None)``: a ``%%ranks`` cell's run read whole (``cell_returns``, then ``cell_tree``); else
    ``(None, None, verdict)`` once the reason is said."""
    returns, verdict = cell_returns(run, keys, todo)
    if returns is None:
        return None, None, verdict
    tree, verdict = cell_tree(run)
    return (returns, tree, None) if tree is not None else (None, None, verdict)
