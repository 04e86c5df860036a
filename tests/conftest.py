"""Shared fixtures: the tiny real dataset is built once per session; jobs write under tmp_path."""

import os
from pathlib import Path

import pytest

from tests.notebooks.chapter_run import BASETEMP, CHAPTER_TESTS, finished_marker

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


@pytest.hookimpl(trylast=True)            # after -m/-k have deselected
def pytest_collection_modifyitems(config, items):
    """Remember which chapter tests run in this session, and put the tests that read their executed notebooks
    (the ``executed_course`` fixture: the website test) last, so that they find them (tests/README.md)."""
    config.stash[CHAPTER_TESTS] = [i.nodeid for i in items if Path(i.path).match("tests/notebooks/test_ch*.py")]
    readers = [i for i in items if "executed_course" in getattr(i, "fixturenames", ())]
    items[:] = [i for i in items if i not in readers] + readers


@pytest.fixture(scope="session", autouse=True)
def session_basetemp(request, tmp_path_factory):
    """This process's pytest temp folder, kept for the hook below."""
    request.config.stash[BASETEMP] = tmp_path_factory.getbasetemp()
    return request.config.stash[BASETEMP]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A chapter test that ended, however, leaves a marker: the website test waits for these, not for a guess."""
    yield
    basetemp = item.config.stash.get(BASETEMP, None)
    if basetemp is not None and item.nodeid in item.config.stash.get(CHAPTER_TESTS, []):
        marker = finished_marker(basetemp, item.nodeid)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
