"""Call a function in a new Python interpreter (MindSpore state, threads and memory stay out of the caller)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

RESULT_PREFIX = "RESULT "
_RUNNER = ("import importlib, json, sys; m, f = sys.argv[1].split(':'); "
           "r = getattr(importlib.import_module(m), f)(*json.loads(sys.argv[2])); "
           f"print({RESULT_PREFIX!r} + json.dumps(r), flush=True)")


class FreshCallFailed(RuntimeError):
    """The fresh interpreter ended without a result; the message holds the tail of its output."""


def call_fresh(target: str, *args, env: dict | None = None, unset=(), timeout_s: float | None = None,
               keep_output: bool = False):
    """``module:function(*args)`` in a new interpreter with this checkout first on ``PYTHONPATH``; returns its
    JSON-able result (and the process's stdout lines with ``keep_output``). ``env`` adds variables, ``unset``
    removes inherited ones."""
    from helpers.core.paths import code_root, course_home

    path = os.pathsep.join(p for p in (str(code_root()), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {k: v for k, v in os.environ.items() if k not in unset}
    full_env.update({"GLOG_v": "3", **(env or {}), "PYTHONPATH": path})
    proc = subprocess.run([sys.executable, "-c", _RUNNER, target, json.dumps(list(args))], capture_output=True,
                          text=True, env=full_env, timeout=timeout_s, cwd=str(course_home()))
    lines = proc.stdout.splitlines()
    for line in reversed(lines):
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
            return (result, lines) if keep_output else result
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    raise FreshCallFailed(f"{target} in a fresh interpreter failed (rc {proc.returncode}):\n{tail}")
