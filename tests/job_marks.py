"""A value every process of a test's job inherits (the launcher and sbatch copy the environment), to find what the
job left behind; the two ways a test ends a job from outside it: a user's Stop, and its launcher's death."""

import _thread
import contextlib
import signal
import subprocess
import threading
import time
import uuid

import pytest

from helpers.job.processes import processes_with_env

MARK = "COURSE_TEST_JOB"


@pytest.fixture()
def marker(monkeypatch):
    """This test's value of ``MARK``, set in the test's environment so its jobs inherit it."""
    value = uuid.uuid4().hex
    monkeypatch.setenv(MARK, value)
    return value


def left(marker: str) -> list:
    """The processes still carrying ``marker``: a finished or failed job must leave none."""
    return processes_with_env(MARK, marker)


@contextlib.contextmanager
def interrupted_once(ready, timeout_s: float = 240):
    """Inside the block, this process gets the SIGINT a notebook user's Stop raises once ``ready()`` is true (or
    after ``timeout_s``: a lost interrupt must not leave the job running to its timeout); yields a list that holds
    the time it was sent when ``ready()`` came true."""
    sent: list[float] = []

    def interrupt():
        try:
            deadline = time.time() + timeout_s
            while time.time() < deadline:
                if ready():
                    sent.append(time.time())
                    break
                time.sleep(0.5)
        finally:
            _thread.interrupt_main(signal.SIGINT)

    # what a notebook user's interrupt raises, whatever handler an earlier test left in this process
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        yield sent
    finally:
        signal.signal(signal.SIGINT, previous)


def kill_launcher_when(launcher: subprocess.Popen, ready, marker: str, timeout_s: float = 240) -> float:
    """Kill ``launcher`` (a notebook kernel, papermill) once ``ready()`` is true and its job's processes run; returns
    the seconds until none of them was left (at most 30 s are waited)."""
    try:
        deadline = time.time() + timeout_s
        while time.time() < deadline and not ready():
            time.sleep(0.2)
        assert ready(), "the job never got going"
        assert len(left(marker)) >= 2, "the job's processes are not there to be ended"
        launcher.kill()
        launcher.wait()
        died = time.time()
        while left(marker) and time.time() - died < 30:
            time.sleep(0.2)
        return time.time() - died
    finally:
        launcher.kill()
