"""The out-of-memory texts ``helpers.core.errors.failure_kind`` reads, pinned to the installed wheel's libraries."""

import pytest

from helpers.core.errors import OOM_LOOKALIKES, OOM_TEXTS
from tests.contract.wheel import assert_pinned, in_wheel

PINNED = [(text, rel) for text, rel in OOM_TEXTS if rel is not None]
GPU_PLUGIN, OTHER_GPU_PLUGIN = "lib/plugin/libmindspore_gpu.so.11.6", "lib/plugin/libmindspore_gpu.so.11.1"


@pytest.mark.parametrize("text, relpath", PINNED, ids=[t for t, _ in PINNED])
def test_each_oom_text_is_in_the_wheel_library_named(text, relpath):
    assert_pinned(text, relpath)


@pytest.mark.parametrize("text", [t for t, rel in PINNED if rel == GPU_PLUGIN])
def test_the_gpu_texts_are_in_both_cuda_builds_of_the_plugin(text):
    assert_pinned(text, OTHER_GPU_PLUGIN)


def test_the_one_text_from_outside_the_wheel_is_cudnns_status_name():
    outside = [t for t, rel in OOM_TEXTS if rel is None]
    assert outside == ["CUDNN_STATUS_ALLOC_FAILED"]
    # the plugin prints cuDNN's own status string after its "cuDNN Error: ..." message, from the libcudnn it links
    for text in ("cuDNN Error: ", " | Error Number: ", "cudnnGetErrorString", "libcudnn.so.8"):
        assert_pinned(text, GPU_PLUGIN)
    # not in the wheel: if a later wheel spells it out, pin it there instead
    assert not in_wheel(outside[0], GPU_PLUGIN)


@pytest.mark.parametrize("text, relpath", OOM_LOOKALIKES)
def test_the_lookalikes_set_aside_are_in_the_wheel(text, relpath):
    assert_pinned(text, relpath)
