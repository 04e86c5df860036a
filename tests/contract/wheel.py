"""Reads the installed MindSpore wheel's own files, so contract tests pin the card path's assumptions to them."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path


@functools.cache
def ms_dir() -> Path:
    """The installed ``mindspore`` package folder (found without importing it)."""
    return Path(importlib.util.find_spec("mindspore").origin).parent


@functools.cache
def wheel_bytes(relpath: str) -> bytes:
    """The bytes of one file of the wheel, by its path under ``mindspore/`` (e.g. ``lib/libmindspore_profiler.so``)."""
    path = ms_dir() / relpath
    if not path.is_file():
        raise FileNotFoundError(f"the installed wheel has no {relpath} (looked in {ms_dir()})")
    return path.read_bytes()


def in_wheel(text: str, relpath: str) -> bool:
    """Whether ``text`` occurs verbatim in a wheel file (a C string in a library, a line of Python source)."""
    return text.encode() in wheel_bytes(relpath)


def altered(text: str) -> str:
    """``text`` with one character changed in the middle: a pin must fail on it (each test shows it does)."""
    i = len(text) // 2
    return text[:i] + ("#" if text[i] != "#" else "@") + text[i + 1:]


def assert_pinned(text: str, relpath: str) -> None:
    """``text`` is in the wheel file, and the same check refuses an altered copy (so the pin can fail)."""
    assert in_wheel(text, relpath), f"{text!r} is not in the installed wheel's {relpath}: the card path's assumption changed"
    assert not in_wheel(altered(text), relpath), f"the pin of {text!r} in {relpath} cannot fail"
