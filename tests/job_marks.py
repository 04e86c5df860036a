"""A value every process of a test's job inherits (the launcher and sbatch copy the environment), to find what the
job left behind."""

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
