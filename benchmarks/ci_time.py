"""``.ci/run`` on a clean clone of the committed HEAD, timed whole and split by test group (issue 18: <= 15 min).

Clones the repository to a temporary folder, runs ``.ci/run`` there (its own venv, then the README's pytest) with
``--durations=0`` so that pytest reports every test's seconds, and sums them per group (``tests/unit``,
``tests/jobs``, each notebook test, the rehearsals, the browser test). With ``-n 2`` the groups' seconds add up to
about twice pytest's wall time. Uncommitted changes are not in the clone. Writes
``benchmarks/results/ci_time.json``.

    python -m benchmarks.ci_time [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks._jobs import save
from helpers.core.paths import resolve

GOAL_S = 900.0
_DURATION = re.compile(r"^([0-9.]+)s (call|setup|teardown)\s+(\S+?)::(\S+)")
_SUMMARY = re.compile(r"^=+ (.*?) in ([0-9.]+)s")


def group_of(path: str, test: str) -> str:
    """``tests/unit``, ``tests/jobs``, ``rehearsal <NN>``, ``notebook <file>`` or the file: where CI time goes."""
    if path.startswith(("tests/unit/", "tests/jobs/")):
        return "/".join(path.split("/")[:2])
    if path.endswith("test_rehearsal.py"):
        return "rehearsal " + test.split("_")[1]
    if path.startswith("tests/notebooks/"):
        return "notebook " + Path(path).stem.removeprefix("test_")
    return path


def parse_pytest_log(text: str) -> dict:
    """Per-group and per-test seconds from pytest's ``--durations`` lines, and its final summary line."""
    groups: dict[str, float] = defaultdict(float)
    tests: dict[str, float] = defaultdict(float)
    summary, pytest_s = None, None
    for line in text.splitlines():
        m = _DURATION.match(line.strip())
        if m:
            secs, _, path, test = float(m.group(1)), m.group(2), m.group(3), m.group(4)
            groups[group_of(path, test)] += secs
            tests[f"{path}::{test}"] += secs
        m = _SUMMARY.match(line.strip())
        if m and ("passed" in m.group(1) or "failed" in m.group(1)):
            summary, pytest_s = m.group(1), float(m.group(2))
    top = sorted(tests.items(), key=lambda kv: -kv[1])[:10]
    return {"summary": summary, "pytest_s": pytest_s,
            "groups_s": {k: round(v, 1) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
            "slowest_tests_s": {k: round(v, 1) for k, v in top}}


def main(argv=None) -> dict:
    """Clone, run ``.ci/run``, parse its pytest output; print and save ``ci_time.json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="keep the clone and its log")
    args = ap.parse_args(argv)
    repo = resolve(".")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="bench_ci_time_"))
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    log = work / "ci_run.log"
    t0 = time.monotonic()
    with open(log, "w") as fh:
        rc = subprocess.run(["bash", ".ci/run"], cwd=clone, stdout=fh, stderr=subprocess.STDOUT,
                            env={**_clean_env(), "PYTEST_ADDOPTS": "--durations=0"}).returncode
    total = time.monotonic() - t0
    parsed = parse_pytest_log(log.read_text(errors="replace"))
    out = {"commit": head, "returncode": rc, "total_s": round(total, 1), "goal": f"<= {GOAL_S:g} s",
           "goal_met": rc == 0 and total <= GOAL_S, **parsed,
           "setup_s": round(total - parsed["pytest_s"], 1) if parsed["pytest_s"] else None,
           "log": str(log) if args.keep else None}
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return save("ci_time", out)


def _clean_env() -> dict:
    """This environment without the course venv's activation, so ``.ci/run`` builds its own as on a fresh machine."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "COURSE_HOME")}
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if "/.venv/" not in p)
    return env


if __name__ == "__main__":
    main()
