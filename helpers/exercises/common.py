"""Reading and judging exercise answers, shared by ``helpers.exercises.ch00`` .. ``_ch04``.

Strict on purpose: an answer is right only in the type the prompt asks for (a tuple where the prompt writes
one, ``int`` for a count or a rank; numpy integers count as ints, as the course's helpers return them), and
a wrongly typed answer gets a hint that names its type. ``checker`` keeps every checker from raising.
"""

from __future__ import annotations

import functools

import numpy as np


def say(ok: bool | None, text: str) -> bool:
    """Print the verdict (the notebooks show it under the cell) and return True only when right."""
    head = "not attempted yet" if ok is None else ("right" if ok else "wrong, because")
    print(f"{head}: {text}" if ok is not False else f"{head} {text}")
    return bool(ok)


def checker(func):
    """A checker never raises in a notebook (papermill runs through them): an error is a 'wrong' verdict."""
    @functools.wraps(func)
    def checked(answer) -> bool:
        try:
            return func(answer)
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
