"""The processes of one job, found by a marker in their environment: list them, stop them, kill what is left."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

from helpers.core.paths import JOB_ID_ENV

GRACE_S = 8.0           # after SIGINT, how long msrun gets to stop its workers before the sweep


def processes_with_env(name: str, value: str) -> list[psutil.Process]:
    """Every live process (but this one) whose environment has ``name=value``: a job's processes by its
    id, by msrun's ``MS_SCHED_PORT``, or anything a test started with a marker of its own."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and p.environ().get(name) == value:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def kill_processes_with_env(name: str, value: str, rounds: int = 3, wait_s: float = 3.0) -> list[psutil.Process]:
    """SIGKILL every process carrying ``name=value`` (a process may fork while we kill: a few rounds);
    returns what is still alive (nothing, normally)."""
    for _ in range(rounds):
        left = processes_with_env(name, value)
        if not left:
            return []
        for p in left:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        wait_ended(left, wait_s)
    return processes_with_env(name, value)


def ended(p: psutil.Process) -> bool:
    """Gone, or a zombie: it runs nothing and holds no memory, socket or file, only a table entry until its parent
    (here often PID 1, once msrun is killed) reaps it."""
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_ended(procs: list[psutil.Process], timeout: float) -> None:
    """Until every process in ``procs`` has ended (``ended``) or ``timeout`` seconds passed. ``psutil.wait_procs``
    waits for the reap too: ~0.7 s per killed grandchild here, over a second for each job's end."""
    deadline = time.monotonic() + timeout
    while procs and time.monotonic() < deadline:
        procs = [p for p in procs if not ended(p)]
        if procs:
            time.sleep(0.02)


def job_processes(job_id: str) -> list[psutil.Process]:
    """Every live process whose environment carries this job's id (msrun, scheduler, workers, helpers)."""
    return processes_with_env(JOB_ID_ENV, job_id)


def job_workers(job_id: str) -> list[psutil.Process]:
    """The job's live rank processes (msrun starts them with ``MS_ROLE=MS_WORKER``; its scheduler is MS_SCHED)."""
    found = []
    for p in job_processes(job_id):
        try:
            if p.environ().get("MS_ROLE") == "MS_WORKER":
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def stop_job(procs: list[subprocess.Popen], job_id: str, grace_s: float = GRACE_S) -> None:
    """SIGINT to msrun, wait up to ``grace_s``, then SIGKILL whatever of the job is still alive."""
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if all(p.poll() is not None for p in procs) and not job_processes(job_id):
            break
        time.sleep(0.25)
    kill_processes_with_env(JOB_ID_ENV, job_id)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def end_orphan_job(job_id: str) -> int:
    """SIGKILL what is left of a job whose launcher died; returns how many processes were still alive."""
    found = len(job_processes(job_id))
    kill_processes_with_env(JOB_ID_ENV, job_id)
    return found
