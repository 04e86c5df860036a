"""Shared fixtures: the tiny real dataset is built once per session; jobs write under tmp_path."""

import os

import pytest

os.environ.setdefault("COURSE_PROGRESS", "text")   # no widget front end under pytest
os.environ.setdefault("GLOG_v", "3")
# two test processes share the machine: a job that does not fit beside the other's waits for it (shown in its
# progress) instead of failing the test (helpers.job.host_memory; its own tests unset this)
os.environ.setdefault("COURSE_MEMORY_WAIT_S", "1800")


@pytest.fixture(scope="session", autouse=True)
def mindspore_on_cpu():
    """MindSpore's device set once per test process, before any test runs a kernel: a kernel run first (test_hybrid)
    initialises the default device, and a later test's ms.set_device("CPU") then raises "The runtime has been
    initialized" (test_phases after test_hybrid in one process failed so)."""
    import mindspore as ms

    ms.set_device("CPU")


@pytest.fixture(scope="session")
def standin():
    """The digits stand-in (real images, class-sorted, unequal classes) at the course's data/digits."""
    from helpers.train.data import ensure_standin

    return ensure_standin()


@pytest.fixture()
def ci_config(standin):
    from helpers.core.config import job_config

    return job_config("ci", name="test", chapter="tests")
