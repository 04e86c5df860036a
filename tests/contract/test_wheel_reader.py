"""The contract tests' reader of the installed wheel: finds what is there, and refuses what is not."""

import pytest

from tests.contract import wheel as W
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


def test_a_file_no_pin_was_read_from_is_refused_with_the_command_to_add_it():
    with pytest.raises(AssertionError, match=r"python -m tests.contract.wheel __init__.py"):
        W.wheel_bytes.__wrapped__("__init__.py")


def test_an_altered_copy_of_a_pinned_file_is_refused(tmp_path, monkeypatch):
    relpath = "device_context/ascend/op_precision.py"
    (tmp_path / relpath).parent.mkdir(parents=True)
    (tmp_path / relpath).write_bytes((W.ms_dir() / relpath).read_bytes() + b"\n")
    monkeypatch.setattr(W, "ms_dir", lambda: tmp_path)
    with pytest.raises(AssertionError, match="is not the file the pins were read from: every pin"):
        W.wheel_bytes.__wrapped__(relpath)
