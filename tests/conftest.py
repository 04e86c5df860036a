"""Shared fixtures: the tiny real dataset is built once per session; jobs write under tmp_path."""

import os

import pytest

os.environ.setdefault("COURSE_PROGRESS", "text")   # no widget front end under pytest
os.environ.setdefault("GLOG_v", "3")


@pytest.fixture(scope="session")
def standin():
    """The digits stand-in (real images, class-sorted, unequal classes) at the course's data/digits."""
    from helpers.train.data import ensure_standin

    return ensure_standin()


@pytest.fixture()
def ci_config(standin):
    from helpers.core.config import job_config

    return job_config("ci", name="test", chapter="tests")
