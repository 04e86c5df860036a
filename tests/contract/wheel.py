"""Reads the installed MindSpore wheel's own files, so contract tests pin the card path's assumptions to them; every
file read must be the one the pins were read from (``pinned_wheel.json``: version, build, tag, each file's sha256).

Rewrite ``pinned_wheel.json`` from the installed wheel, after re-checking the pins against it:
``python -m tests.contract.wheel [relpath ...]`` (the files already listed, plus any named).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import re
import sys
from pathlib import Path

PINNED_FILE = Path(__file__).with_name("pinned_wheel.json")
RECHECK = ("every pin in tests/contract was read from MindSpore {version} (build {commit}, wheel tag {tag}); with "
           "another wheel, re-read what they assume: run `python -m pytest tests/contract` (a failing pin names its "
           "text and file) and re-check the facts read from binaries (the GPU plugins' RPATH and the nvcc rule in "
           "helpers.preflight.gpu_plugin_choice / cuda_libraries, KeepOriginDType and GetCubeMathType in "
           "helpers.core.card_settings, the fusion unit in helpers.topics.comm_fusion), then rewrite "
           "tests/contract/pinned_wheel.json with `python -m tests.contract.wheel`")


@functools.cache
def ms_dir() -> Path:
    """The installed ``mindspore`` package folder (found without importing it)."""
    return Path(importlib.util.find_spec("mindspore").origin).parent


@functools.cache
def pinned() -> dict:
    """The wheel the pins were read from: ``version``, ``commit`` (``mindspore/.commit_id``), ``tag`` (its WHEEL
    file) and ``files`` (path under ``mindspore/`` -> RECORD's ``sha256=...``)."""
    return json.loads(PINNED_FILE.read_text())


def recheck_note() -> str:
    """What a maintainer re-checks when the installed wheel is not the pinned one."""
    return RECHECK.format(**pinned())


def record_hash(data: bytes) -> str:
    """A file's hash as a wheel's RECORD writes it (``sha256=`` + urlsafe base64 without padding)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def installed_build() -> dict:
    """The installed wheel's ``version`` (its metadata), ``commit`` (``mindspore/.commit_id``), ``tag`` (WHEEL) and
    ``record`` (path under ``mindspore/`` -> sha256, from RECORD)."""
    dist = importlib.metadata.distribution("mindspore")
    commit = re.search(r"\[sha1\]:(\w+)", (ms_dir() / ".commit_id").read_text())
    tags = re.findall(r"^Tag: (\S+)$", dist.read_text("WHEEL") or "", flags=re.M)
    record = {}
    for line in (dist.read_text("RECORD") or "").splitlines():
        path, digest, _size = line.rsplit(",", 2)
        if path.startswith("mindspore/") and digest:
            record[path[len("mindspore/"):]] = digest
    return {"version": dist.version, "commit": commit.group(1) if commit else "", "tag": ".".join(tags),
            "record": record}


@functools.cache
def wheel_bytes(relpath: str) -> bytes:
    """The bytes of one file of the wheel, by its path under ``mindspore/`` (e.g. ``lib/libmindspore_profiler.so``);
    refused unless it is the file the pins were read from (its sha256 in ``pinned_wheel.json``)."""
    path = ms_dir() / relpath
    if not path.is_file():
        raise FileNotFoundError(f"the installed wheel has no {relpath} (looked in {ms_dir()})")
    data = path.read_bytes()
    want = pinned()["files"].get(relpath)
    if want is None:
        raise AssertionError(f"{relpath} is read by a pin but not listed in {PINNED_FILE.name}: add it with "
                             f"`python -m tests.contract.wheel {relpath}` (its hash here: {record_hash(data)})")
    if record_hash(data) != want:
        raise AssertionError(f"the installed {relpath} is not the file the pins were read from: {recheck_note()}")
    return data


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


def write_pinned(extra: list[str]) -> dict:
    """``pinned_wheel.json`` from the installed wheel: its version, build and tag, and RECORD's hash of each file
    already listed plus ``extra``."""
    build = installed_build()
    names = sorted(set(json.loads(PINNED_FILE.read_text())["files"] if PINNED_FILE.exists() else []) | set(extra))
    missing = [n for n in names if n not in build["record"]]
    if missing:
        raise SystemExit(f"not in the installed wheel's RECORD: {', '.join(missing)}")
    out = {"version": build["version"], "commit": build["commit"], "tag": build["tag"],
           "files": {n: build["record"][n] for n in names}}
    PINNED_FILE.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    print(f"{PINNED_FILE}: {len(write_pinned(sys.argv[1:])['files'])} files")
