"""The contract tests' reader of the installed wheel: finds what is there, and refuses what is not."""

import pytest

from tests.contract.wheel import altered, assert_pinned, in_wheel, ms_dir


def test_reads_a_known_string_of_the_wheel():
    assert (ms_dir() / "lib").is_dir()
    assert in_wheel("Please set env CUDA_HOME", "lib/libmindspore_hardware_abstract.so")


def test_altered_text_is_refused():
    text = "Please set env CUDA_HOME"
    assert altered(text) != text and len(altered(text)) == len(text)
    with pytest.raises(AssertionError):
        assert_pinned(altered(text), "lib/libmindspore_hardware_abstract.so")


def test_missing_file_is_named():
    with pytest.raises(FileNotFoundError, match="no lib/none.so"):
        in_wheel("x", "lib/none.so")
