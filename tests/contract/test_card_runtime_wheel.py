"""The card settings' names (helpers.core.card_settings, helpers.train.card_runtime) and the profiler's analysis
point (helpers.train.profiler_session) pinned to the installed MindSpore wheel's own files."""

import inspect
import re
import shutil
import subprocess

import pytest

from helpers.core.card_settings import (ASCEND_CONV_HF32, ASCEND_FP16_MATMUL, ASCEND_KEEP_DTYPE,
                                        ASCEND_KEEP_DTYPE_SOCS, ASCEND_MATMUL_HF32, DETERMINISTIC_ENV, GPU_CONV_TF32,
                                        GPU_DETERMINISTIC_CONV_ALGO, ascend_float32_calls)
from helpers.job.multinode import NCCL_HOST_IDENTITY
from helpers.train.card_runtime import SCHEDULER_ROLE, ascend_soc
from tests.contract.wheel import assert_pinned, ms_dir, wheel_bytes

OP_PRECISION = "device_context/ascend/op_precision.py"
OPS_ASCEND = "lib/plugin/libmindspore_ops_ascend.so"
GPU_PRECISION, GPU_TUNING = "device_context/gpu/op_precision.py", "device_context/gpu/op_tuning.py"


@pytest.mark.parametrize("mode", [ASCEND_KEEP_DTYPE, ASCEND_FP16_MATMUL])
def test_ascend_precision_modes_are_the_ones_precision_mode_accepts(mode):
    assert_pinned(f'        "{mode}",\n', OP_PRECISION)     # an entry of precision_mode's supported_modes
    assert_pinned(f"- {mode}: ", OP_PRECISION)              # and documented there


def test_mindspore_default_mode_depends_on_the_chip():
    """The GE backend's log lines for the mode it picks when none is set, the SoC names KeepOriginDType looks for, and
    the 910A's SoC version in the plugin's map; the docstring's unqualified default is what the pin records."""
    for mode in (ASCEND_KEEP_DTYPE, ASCEND_FP16_MATMUL):
        assert_pinned(f"Set precision_mode {mode}, soc_version is ", "lib/libmindspore_ge_backend.so")
    for soc in ASCEND_KEEP_DTYPE_SOCS:
        assert_pinned(f"\0{soc}\0", OPS_ASCEND)
    assert_pinned("\0ascend910\0", "lib/plugin/libmindspore_ascend.so.2")
    assert_pinned(f'The framework sets the configuration to "{ASCEND_KEEP_DTYPE}" by default.', OP_PRECISION)


def test_the_hf32_switches_and_their_stated_defaults():
    """The two calls the workers make where float32 is kept, with the defaults their docstrings state (CANN's), and
    the switches the Ascend kernels read (conv's unset default is HF32 on, matmul's off)."""
    assert [name for name, _ in ascend_float32_calls("ascend910b")] == ["precision_mode", ASCEND_CONV_HF32,
                                                                        ASCEND_MATMUL_HF32]
    for name in (ASCEND_CONV_HF32, ASCEND_MATMUL_HF32):
        assert_pinned(f"def {name}(value):", OP_PRECISION)
        assert_pinned(f"raise RuntimeError(\"The '{name}' can not be set repeatedly.\")", OP_PRECISION)
    assert_pinned("Whether to convert FP32 to HF32 for Conv operators. CANN enables FP32 to HF32\n"
                  "    for Conv operators by default.", OP_PRECISION)
    assert_pinned("Whether to convert FP32 to HF32 for Matmul operators. CANN disables FP32 to HF32\n"
                  "    for Matmul operators by default.", OP_PRECISION)
    assert_pinned("The default value of allow_matmul_hf32 and allow_conv_hf32 are set by CANN.",
                  "lib/plugin/ascend/libmindspore_ascend_res_manager.so")
    for symbol in ("_ZN9mindspore6device6ascend9OpApiUtil15GetCubeMathTypeEb",
                   "_ZN9mindspore6device6ascend9OpApiUtil15IsAllowConvHF32Ev",
                   "_ZN9mindspore6device6ascend9OpApiUtil17IsAllowMatmulHF32Ev"):
        assert_pinned(symbol, OPS_ASCEND)


def test_keep_origin_dtype_looks_for_exactly_these_soc_names():
    """AclUtil::KeepOriginDType's code loads the SoC names it searches the SoC version for: read from its
    disassembly, so a chip added or dropped there shows here."""
    if not (shutil.which("nm") and shutil.which("objdump")):
        pytest.skip("binutils (nm, objdump) not installed: the SoC names rest on the string pins")
    lib = str(ms_dir() / OPS_ASCEND)
    syms = subprocess.run(["nm", "-DC", lib], capture_output=True, text=True, check=True).stdout
    addr = int(next(ln.split()[0] for ln in syms.splitlines() if "AclUtil::KeepOriginDType()" in ln), 16)
    code = subprocess.run(["objdump", "-d", f"--start-address={addr:#x}", f"--stop-address={addr + 0x240:#x}", lib],
                          capture_output=True, text=True, check=True).stdout
    data = wheel_bytes(OPS_ASCEND)
    targets = [int(x, 16) for x in re.findall(r"lea\s+0x[0-9a-f]+\(%rip\),%rsi\s+#\s+([0-9a-f]+)", code)]
    loaded = {data[a:data.find(b"\0", a)].decode(errors="replace") for a in targets if a < len(data)}
    # (in this library .rodata's addresses are its file offsets: readelf -S shows both at 0x312e000)
    assert {s for s in loaded if s.startswith("ascend")} == set(ASCEND_KEEP_DTYPE_SOCS)


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
