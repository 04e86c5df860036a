"""The card settings' names (helpers.core.card_settings, helpers.train.card_runtime) and the profiler's analysis
point (helpers.train.profiler_session) pinned to the installed MindSpore wheel's own files."""

import inspect

import pytest

from helpers.core.card_settings import (ASCEND_FP16_MATMUL, ASCEND_KEEP_DTYPE, ASCEND_KEEP_DTYPE_SOCS,
                                        DETERMINISTIC_ENV, GPU_CONV_TF32, GPU_DETERMINISTIC_CONV_ALGO)
from helpers.job.multinode import NCCL_HOST_IDENTITY
from helpers.train.card_runtime import SCHEDULER_ROLE, ascend_soc
from tests.contract.wheel import assert_pinned

OP_PRECISION = "device_context/ascend/op_precision.py"
GPU_PRECISION, GPU_TUNING = "device_context/gpu/op_precision.py", "device_context/gpu/op_tuning.py"


@pytest.mark.parametrize("mode", [ASCEND_KEEP_DTYPE, ASCEND_FP16_MATMUL])
def test_ascend_precision_modes_are_the_ones_precision_mode_accepts(mode):
    assert_pinned(f'        "{mode}",\n', OP_PRECISION)     # an entry of precision_mode's supported_modes
    assert_pinned(f"- {mode}: ", OP_PRECISION)              # and documented there


def test_mindspore_default_mode_depends_on_the_chip():
    """The GE backend's log lines for the mode it picks when none is set, and the SoC versions in the plugin's map."""
    for mode in (ASCEND_KEEP_DTYPE, ASCEND_FP16_MATMUL):
        assert_pinned(f"Set precision_mode {mode}, soc_version is ", "lib/libmindspore_ge_backend.so")
    for soc in ASCEND_KEEP_DTYPE_SOCS + ("ascend910",):
        assert_pinned(f"\0{soc}\0", "lib/plugin/libmindspore_ascend.so.2")


def test_the_soc_version_is_read_as_the_wheel_reads_it():
    call = "MSContext.get_instance().get_ascend_soc_version()"
    assert call in inspect.getsource(ascend_soc)
    assert_pinned(call, "train/model.py")
    assert_pinned("if ascend_target == 'ascend910':", "train/model.py")


def test_set_deterministic_sets_hccl_and_te_environment():
    assert_pinned("def set_deterministic(deterministic):", "device_manager.py")
    assert_pinned("it is suggested to set deterministic computing before", "device_manager.py")
    for name, value in DETERMINISTIC_ENV.items():
        assert_pinned(f'os.environ["{name}"] = "{value}"', "device_manager.py")


def test_gpu_tf32_switch_and_deterministic_convolution_algorithm():
    assert_pinned(f"def {GPU_CONV_TF32}(value):", GPU_PRECISION)
    assert_pinned(f"\0{GPU_CONV_TF32}\0", "lib/plugin/libmindspore_gpu.so.11.6")
    assert_pinned("Conv operators. If not configured, the framework defaults\n            to ``True``.", GPU_PRECISION)
    for fn in ("conv_wgrad_algo", "conv_dgrad_algo"):
        assert_pinned(f"def {fn}(mode):", GPU_TUNING)
    assert_pinned(f"- {GPU_DETERMINISTIC_CONV_ALGO}: This algorithm expresses the convolution as a matrix product "
                  "without actually explicitly forming\n            the matrix that holds the input tensor data. "
                  "The results are deterministic.", GPU_TUNING)
    assert_pinned(f"\0{GPU_DETERMINISTIC_CONV_ALGO}\0", "lib/plugin/libmindspore_gpu.so.11.6")


def test_msrun_scheduler_role_name():
    assert_pinned(f'"{SCHEDULER_ROLE}"]', "parallel/_ps_context.py")


def test_bundled_nccl_identifies_a_host_by_boot_id_or_nccl_hostid():
    for text in NCCL_HOST_IDENTITY:
        assert_pinned(text, "lib/plugin/gpu11.6/libnccl.so.2")


def test_the_profile_is_analysed_inside_the_step_that_ends_the_schedule():
    """profiler_session.announced relies on this: RECORD_AND_SAVE -> NONE runs on_trace_ready in prof.step(), and
    tensorboard_trace_handler's handler analyses there, synchronously by default."""
    assert_pinned("(ProfilerAction.RECORD_AND_SAVE, ProfilerAction.NONE): [\n"
                  "                self.prof_interface.stop,\n"
                  "                self.prof_interface.finalize,\n"
                  "                self._trace_ready,", "profiler/profiler_action_controller.py")
    assert_pinned("analyse_flag: bool = True, async_mode: bool = False):", "profiler/profiler.py")
    assert_pinned("prof_inst.analyse(async_mode=async_mode)", "profiler/profiler.py")
