"""The time split runs TrainOneStepCell's work as three graphs: what it copies of the installed wheel is pinned here."""

import pytest

from helpers.train.time_split import WHEEL_ASSUMES
from helpers.train.worker import CACHE_PATH_ENV, CACHED_GRAPH_NAMES
from tests.contract.wheel import assert_pinned

PINS = [(text, path) for path, texts in WHEEL_ASSUMES.items() for text in texts]


@pytest.mark.parametrize("text, relpath", PINS, ids=[t[:40] for t, _ in PINS])
def test_the_train_step_the_split_copies_is_the_wheels(text, relpath):
    assert_pinned(text, relpath)


@pytest.mark.parametrize("relpath, text", sorted(CACHED_GRAPH_NAMES.items()))
def test_cached_graphs_are_named_by_compile_order_in_the_wheel(relpath, text):
    assert_pinned(text, relpath)


def test_the_cache_folder_variable_is_the_wheels():
    assert_pinned(CACHE_PATH_ENV, "context.py")
