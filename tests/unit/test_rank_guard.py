"""The rank guard records how its worker ended and ends it when the launcher is gone (real processes, no msrun)."""

import json
import os
import subprocess
import sys

from helpers.core.config import JobConfig
from helpers.job.watch import exit_text
from helpers.job.rank_guard import exit_record_path, process_start, signal_name


def guard(tmp_path, **env):
    cfg = JobConfig(name="guard", world_size=1, global_batch=8).save(tmp_path / "config.json")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MS_", "RANK_", "COURSE_LAUNCHER"))}
    return subprocess.run([sys.executable, "-m", "helpers.job.rank_guard", str(cfg)], env={**clean, **env},
                          capture_output=True, timeout=120)


def test_signal_names():
    assert signal_name(-9) == "SIGKILL" and signal_name(-11) == "SIGSEGV" and signal_name(1) is None


def test_a_worker_that_fails_leaves_an_exit_record_with_its_code(tmp_path):
    done = guard(tmp_path, RANK_ID="0")           # no msrun around it: init() fails
    rec = json.loads(exit_record_path(tmp_path, "0").read_text())
    assert done.returncode == rec["returncode"] != 0 and rec["signal"] is None and rec["reason"] == "exited"
    assert exit_text(rec)[0] == "crash"


def test_the_guard_ends_its_worker_when_the_launcher_is_gone(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start(gone.pid)
    gone.wait()
    done = guard(tmp_path, RANK_ID="2", COURSE_LAUNCHER_PID=str(gone.pid), COURSE_LAUNCHER_START=repr(start))
    rec = json.loads(exit_record_path(tmp_path, "2").read_text())
    assert rec["reason"] == "launcher_gone" and rec["signal"] == "SIGKILL"
    assert done.returncode == 128 + 9
    assert exit_text(rec)[0] == "interrupted"


def test_sigkill_is_reported_with_the_oom_killer_hint():
    kind, text = exit_text({"signal": "SIGKILL", "returncode": -9, "reason": "exited"})
    assert kind == "killed" and "out-of-memory killer" in text and "dmesg" in text


def test_a_process_start_is_read_after_boot_so_a_clock_step_cannot_move_it():
    """Linux: seconds after boot from /proc (what a wall-clock step leaves alone), the same in every process."""
    uptime = float(open("/proc/uptime").read().split()[0])
    here = process_start(os.getpid())
    assert 0 <= here <= uptime
    seen = subprocess.run([sys.executable, "-c", f"from helpers.job.rank_guard import process_start; "
                                              f"print(process_start({os.getpid()}))"],
                          capture_output=True, text=True, check=True).stdout
    assert float(seen) == here


SEGV_AFTER = """
import json, os, signal, sys
from pathlib import Path
run_dir = Path(sys.argv[-1]).parent
if sys.argv[1] == "summary":
    (run_dir / "metrics").mkdir(exist_ok=True)
    (run_dir / "metrics" / "rank_0.jsonl").write_text(json.dumps({"event": "summary", "rank": 0}) + "\\n")
os.kill(os.getpid(), signal.SIGSEGV)
"""


def test_a_rank_killed_by_a_signal_after_its_summary_exits_0_and_before_it_does_not(tmp_path):
    """MindSpore's teardown may crash after the work is done: the guard keeps the record, the job's exit code is 0
    (a batch scheduler then records the job COMPLETED); the same signal before the summary is the rank's failure."""
    cfg = JobConfig(name="guard", world_size=1, global_batch=8).save(tmp_path / "config.json")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MS_", "RANK_", "COURSE_LAUNCHER"))}

    def run(when):
        return subprocess.run([sys.executable, "-m", "helpers.job.rank_guard", str(cfg), "-c", SEGV_AFTER, when],
                              env={**clean, "RANK_ID": "0"}, capture_output=True, timeout=120)
    assert run("summary").returncode == 0
    rec = json.loads(exit_record_path(tmp_path, "0").read_text())
    assert rec["signal"] == "SIGSEGV" and rec["reason"] == "after_summary"
    (tmp_path / "metrics" / "rank_0.jsonl").unlink()
    assert run("before").returncode == 128 + 11
    assert json.loads(exit_record_path(tmp_path, "0").read_text())["reason"] == "exited"
