"""Two workshop users on one machine at the same time: their course runs must not interfere.

Each "user" is a separate Python process with its own ``COURSE_HOME`` (so its own ``runs/``, results and
compile cache) that starts a tiny 8-rank job through ``helpers.job.launch.run_job`` with the ci preset at the
same moment as the other. Both must succeed, on different master ports, in different run directories,
and leave no process behind. The port reservation that makes this hold (``free_port``) is checked on its
own too: two processes asking for many ports at once never get the same one.
A second clone sharing the first clone's virtualenv (``pip install -e .`` done in the first) runs its own
helpers in the launcher and every rank, and writes its runs into its own ``runs/``.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.jobs

REPO = Path(__file__).resolve().parents[2]

USER_JOB = """
import json, os, sys, time
from helpers.core.config import job_config
from helpers.job.launch import run_job
from helpers.core.paths import course_home
go = float(sys.argv[2])
time.sleep(max(0.0, go - time.time()))           # both users press Run at the same moment
cfg = job_config("ci", name="workshop", chapter="00", task="noop", data_dir=sys.argv[1], steps=2)
t0 = time.time()
r = run_job(cfg, progress="none")
print(json.dumps({"home": str(course_home()), "port": r.config.master_port, "run_dir": str(r.run_dir),
                  "ranks": r.ranks, "rc": r.returncode, "start": t0, "end": time.time()}))
"""

PORTS = """
import json, sys, time
from helpers.job.launch import free_port
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
print(json.dumps([free_port() for _ in range(150)]))
"""


def user_env(home: Path) -> dict:
    env = dict(os.environ, COURSE_HOME=str(home), COURSE_PROGRESS="text")
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def job_processes_of(home: Path) -> list[int]:
    """Processes still running a job of this user (their config lives under the user's COURSE_HOME)."""
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "helpers.train.worker" in cmd and str(home) in cmd:
            left.append(p.pid)
    return left


def test_two_users_run_jobs_at_once_without_interfering(standin, tmp_path):
    homes = [tmp_path / "alice", tmp_path / "bob"]
    go = time.time() + 3.0
    procs = []
    for home in homes:
        home.mkdir()
        procs.append(subprocess.Popen([sys.executable, "-c", USER_JOB, str(standin), str(go)], cwd=home,
                                      env=user_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    alice, bob = outs
    assert alice["port"] != bob["port"], "both users' jobs were given the same master port"
    assert alice["run_dir"] != bob["run_dir"]
    for home, o in zip(homes, outs):
        assert o["home"] == str(home)
        assert Path(o["run_dir"]).is_relative_to(home / "runs"), "a run directory outside the user's home"
        assert o["ranks"] == list(range(8)) and o["rc"] == 0
        assert (Path(o["run_dir"]) / "config.json").exists()
        assert json.loads((Path(o["run_dir"]) / "config.json").read_text())["master_port"] == o["port"]
        assert not job_processes_of(home), "a job process outlived run_job"
    # the two jobs really overlapped in time (otherwise the test proves nothing about interference)
    assert max(o["start"] for o in outs) < min(o["end"] for o in outs)


def test_free_port_never_gives_two_launchers_the_same_port(tmp_path):
    go = str(time.time() + 2.0)
    procs = [subprocess.Popen([sys.executable, "-c", PORTS, go], stdout=subprocess.PIPE, text=True,
                              env=user_env(tmp_path)) for _ in range(2)]
    ports = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    together = ports[0] + ports[1]
    from helpers.job.launch import PORT_LOCK_DIR

    for port in set(together):                  # hand the test's reservations back
        (PORT_LOCK_DIR / str(port)).unlink(missing_ok=True)
    assert len(set(together)) == len(together), "free_port handed the same port out twice"


SECOND_CLONE_JOB = """
import json, sys
from helpers.core.config import job_config
from helpers.job.launch import run_job
from helpers.core.paths import course_home
cfg = job_config("ci", name="clone", chapter="00", task="noop", data_dir=sys.argv[1], steps=2)
r = run_job(cfg, progress="none")
print(json.dumps({"home": str(course_home()), "run_dir": str(r.run_dir), "rc": r.returncode}))
"""


def test_a_second_clone_sharing_the_virtualenv_runs_its_own_helpers(standin, tmp_path):
    """Clone B's notebook (working directory B/notebooks, virtualenv installed from this repository) runs
    B's helpers in the launcher and in every rank, and writes its run under B/runs."""
    import shutil

    clone = tmp_path / "clone_b"
    clone.mkdir()
    shutil.copy(REPO / "pyproject.toml", clone)
    for pkg in ("helpers", "data_prep"):
        shutil.copytree(REPO / pkg, clone / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (clone / "notebooks").mkdir()
    seen = tmp_path / "imported_from"
    seen.mkdir()
    with open(clone / "helpers" / "__init__.py", "a") as f:     # every process records whose helpers it runs
        f.write("\nif os.environ.get('SEEN_DIR'):\n"
                "    open(os.path.join(os.environ['SEEN_DIR'], str(os.getpid())), 'w').write(__path__[0])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_HOME", "PYTHONPATH")}
    env.update(COURSE_PROGRESS="text", SEEN_DIR=str(seen))
    p = subprocess.run([sys.executable, "-c", SECOND_CLONE_JOB, str(standin)], cwd=clone / "notebooks", env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["home"] == str(clone) and out["rc"] == 0
    assert Path(out["run_dir"]).is_relative_to(clone / "runs")
    assert f"helpers: using {clone / 'helpers'}" in p.stderr
    ranks = [f.read_text() for f in seen.iterdir()]
    assert len(ranks) >= 9, "the launcher and 8 ranks should all have imported the clone's helpers"
    assert set(ranks) == {str(clone / "helpers")}
