"""What msrun starts for every process of a job: runs the worker as a child, records how it ended, ends it if the launcher dies.

msrun is the parent of its workers, so only it learns a worker's exit signal, and it reports the first one it
happens to poll; the guard sees its own child's end at once and writes ``metrics/exit_<who>.json`` (rank or
``scheduler``, return code, signal name, time). It also watches the launching process (``COURSE_LAUNCHER_PID``):
when a notebook kernel dies mid-job, the guard kills its child and exits, and msrun then ends the rest.
``python -m helpers.job.rank_guard config.json [worker...]``: the worker is ``-m helpers.train.worker`` unless
named (a benchmark's script). Stdlib, psutil and `helpers.core.paths` only: it starts in milliseconds and must not
import MindSpore.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from helpers.core.paths import LAUNCHER_PID_ENV

LAUNCHER_START_ENV = "COURSE_LAUNCHER_START"
WATCH_S = 0.5
WORKER = ("-m", "helpers.train.worker")   # the per-rank program unless the launch names another


def exit_record_path(run_dir: Path, who: str) -> Path:
    """``metrics/exit_<rank>.json`` or ``metrics/exit_scheduler.json``."""
    return Path(run_dir) / "metrics" / f"exit_{who}.json"


def process_start(pid: int) -> float:
    """A process's start, to tell it from a later process with the same pid: on Linux seconds after boot from
    ``/proc/<pid>/stat`` (a wall-clock step cannot move it; psutil's ``create_time`` adds the boot time each
    process read at its own import, and a course run whose clock was stepped saw its live kernels as gone), else
    psutil's ``create_time``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()     # after "pid (comm)": state is field 3, starttime 22
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            raise psutil.NoSuchProcess(pid) from None
    except (OSError, IndexError, ValueError):
        pass
    return psutil.Process(pid).create_time()


def launcher_alive(pid: int, start: float) -> bool:
    """True while process ``pid``, started at ``start`` (``process_start``), runs (a reused pid or a zombie does not
    count)."""
    try:
        proc = psutil.Process(pid)
        return abs(process_start(pid) - start) < 0.5 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def signal_name(returncode: int) -> str | None:
    """``SIGKILL`` for a child ended by signal 9 (return code -9), None for a normal exit."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def write_exit_record(run_dir: Path, who: str, returncode: int, reason: str) -> None:
    """Write ``metrics/exit_<who>.json`` (return code, signal name, reason, time) atomically."""
    path = exit_record_path(run_dir, who)
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = dict(who=who, returncode=returncode, signal=signal_name(returncode), reason=reason, time=time.time())
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, path)


def summary_written(run_dir: Path, rank: str) -> bool:
    """Whether ``rank`` has written its summary (among its last records): its work is done."""
    path = Path(run_dir) / "metrics" / f"rank_{rank}.jsonl"
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            return any(b'"event": "summary"' in line for line in f.read().splitlines()[-4:])
    except OSError:
        return False


def work_done(run_dir: Path, who: str) -> bool:
    """A rank: its summary is written; the scheduler: every rank's is (read from the job's config.json)."""
    if who != "scheduler":
        return who.isdigit() and summary_written(run_dir, who)
    try:
        world = int(json.loads((Path(run_dir) / "config.json").read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all(summary_written(run_dir, str(r)) for r in range(world))


def guard(config_path: str, worker: list[str] | tuple[str, ...] = WORKER) -> int:
    """Run ``python -u <worker...> config_path`` and wait for it (or for the launcher's death)."""
    run_dir = Path(config_path).parent
    who = "scheduler" if os.environ.get("MS_ROLE") == "MS_SCHED" else os.environ.get("RANK_ID", "unknown")
    child = subprocess.Popen([sys.executable, "-u", *(worker or WORKER), config_path])
    for sig in (signal.SIGTERM, signal.SIGINT):   # pass a polite stop on to the worker
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    pid, start = int(os.environ.get(LAUNCHER_PID_ENV, "0")), float(os.environ.get(LAUNCHER_START_ENV, "0"))
    reason = "exited"
    while True:
        try:
            code = child.wait(timeout=WATCH_S)
            break
        except subprocess.TimeoutExpired:
            if pid and not launcher_alive(pid, start):
                child.kill()
                code, reason = child.wait(), "launcher_gone"
                break
    if code < 0 and reason == "exited" and work_done(run_dir, who):
        # killed by a signal in MindSpore's teardown after the work was done (SIGSEGV seen 0.8 s after a rank's
        # summary in a 2-node Slurm job): recorded, but the job's exit code says the work was done, so a batch
        # scheduler records the job COMPLETED rather than FAILED
        write_exit_record(run_dir, who, code, "after_summary")
        return 0
    if code != 0 or reason != "exited":
        write_exit_record(run_dir, who, code, reason)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(guard(sys.argv[1], sys.argv[2:]))
