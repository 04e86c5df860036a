"""Chapter 04's reading of GPU / Ascend profiler output and of comm fusion, pinned to the installed wheel.

Each constant the readers use (op table headers, Ascend trace names, the fusion threshold) is imported from the code
and found in the wheel file MindSpore writes or reads it from; ``assert_pinned`` also shows an altered copy is
refused, so every pin can fail.
"""

import re
import shutil
import subprocess

import pytest

from helpers.topics import amp_kernels as A
from helpers.topics import comm_fusion as F
from helpers.topics import kernel_trace as K
from helpers.topics import rank_profile as R
from tests.contract.wheel import assert_pinned, ms_dir

PROFILER_LIB = "lib/libmindspore_profiler.so"          # ccsrc/tools/profiler/data_saver.cc
FUSION_LIB = "lib/libmindspore_backend_common.so"       # ccsrc/backend/common/pass/communication_op_fusion.cc
MSPROF_EVENT = "profiler/analysis/parser/timeline_event/msprof_event.py"
FWK_EVENT = "profiler/analysis/parser/timeline_event/fwk_event.py"
PROFILER_CONSTANTS = "profiler/common/constant.py"
PARALLEL_CONTEXT = "parallel/_auto_parallel_context.py"


@pytest.mark.parametrize("header", [R.CPU_OP_TYPE_HEADER, R.GPU_OP_TYPE_HEADER, R.GPU_OP_DETAIL_HEADER])
def test_op_table_headers_are_the_profilers(header):
    assert_pinned(header, PROFILER_LIB)
    kind, count, time, _ = R.OP_TABLE_COLUMNS[header]
    assert {kind, count, time} <= set(header.split(",")), "the parser reads columns of this header"


def test_gpu_tables_count_microseconds_and_the_cpu_table_milliseconds():
    assert R.OP_TABLE_COLUMNS[R.GPU_OP_TYPE_HEADER][2:] == ("total_time(us)", 1e-3)
    assert R.OP_TABLE_COLUMNS[R.GPU_OP_DETAIL_HEADER][2:] == ("op_total_time(us)", 1e-3)
    assert "avg_time(ms)" in R.CPU_OP_TYPE_HEADER and R.OP_TABLE_COLUMNS[R.CPU_OP_TYPE_HEADER][3] == 1.0


@pytest.mark.parametrize("part", [R.OP_TYPE_TABLE, R.OP_DETAIL_TABLE])
def test_op_table_file_names(part):
    assert_pinned(part, PROFILER_LIB)
    assert R.gpu_table(ms_dir(), 3, part).name == f"gpu{part}3.csv"


def test_ascend_kernels_name_their_framework_op():
    """msprof_event.py stores the launching framework op's name in the device row's args under this key; fwk_event.py
    builds that name as "<module>::<event>::<full op name>"."""
    assert_pinned(f'_MINDSPORE_OP_KEY = "{K.FRAMEWORK_OP_ARG}"', MSPROF_EVENT)
    assert_pinned("self.args.update({self._MINDSPORE_OP_KEY: event.name})", MSPROF_EVENT)
    sep = K.FRAMEWORK_NAME_SEP
    assert_pinned(f'name = f"{{module_name}}{sep}{{event_name}}{sep}{{full_name}}"', FWK_EVENT)
    assert K.framework_op_type(f"Kernel{sep}KernelLaunch{sep}Default/net/Conv2D-op12") == "Conv2D"


@pytest.mark.parametrize("process", K.DEVICE_OP_PROCESSES["Ascend"])
def test_ascend_trace_processes(process):
    assert_pinned(f'= "{process}"', PROFILER_CONSTANTS)


def test_auto_fusion_sets_a_threshold_of_64():
    """"auto" is a threshold, not one bucket; "size" passes its config as the threshold."""
    assert_pinned("if comm_fusion[_ParallelFusionConfig.MODE] == _ParallelFusionConfig.AUTO:\n"
                  f"            self.set_fusion_threshold_mb(fusion_threshold={F.AUTO_FUSION_THRESHOLD})",
                  PARALLEL_CONTEXT)
    assert_pinned("if comm_fusion[_ParallelFusionConfig.MODE] == _ParallelFusionConfig.SIZE:\n"
                  "            self.set_fusion_threshold_mb(comm_fusion[_ParallelFusionConfig.FUSION_CONFIG])",
                  PARALLEL_CONTEXT)


def test_data_parallel_fusion_threshold_unit():
    """GetAllReduceSplitSegment multiplies the threshold by a constant (``kDefaultThresholdMb2Byte``): read its shift
    from the wheel's binary; the unit is 256 KiB, not the MiB the setting's name suggests."""
    assert_pinned("The split threshold for AllReduce is ", FUSION_LIB)
    if not (shutil.which("nm") and shutil.which("objdump")):
        pytest.skip("binutils (nm, objdump) not installed: the unit rests on the log string and the CPU measurement")
    lib = str(ms_dir() / FUSION_LIB)
    syms = subprocess.run(["nm", "-DC", lib], capture_output=True, text=True, check=True).stdout
    addr = int(next(ln.split()[0] for ln in syms.splitlines()
                    if "CommunicationOpFusion::GetAllReduceSplitSegment" in ln), 16)
    code = subprocess.run(["objdump", "-d", f"--start-address={addr:#x}", f"--stop-address={addr + 0x80:#x}", lib],
                          capture_output=True, text=True, check=True).stdout
    shifts = [int(m, 16) for m in re.findall(r"\bshl\s+\$0x([0-9a-f]+),", code)]
    assert shifts, "no shift in GetAllReduceSplitSegment's first instructions"
    assert 1 << shifts[0] == F.THRESHOLD_UNIT_BYTES and 1 << shifts[0] != 2**20


@pytest.mark.parametrize("device,relpath", [("GPU", "lib/plugin/libmindspore_gpu.so.11.6"),
                                            ("GPU", "lib/plugin/libmindspore_gpu.so.11.1"),
                                            ("Ascend", None)])
def test_kind_aliases_are_the_backends_op_names(device, relpath):
    ascend = {"BNTrainingUpdate": "lib/plugin/libmindspore_ascend.so.2",
              "BNTrainingUpdateGrad": "lib/plugin/libmindspore_ascend.so.2",
              "BatchNormExt": "lib/plugin/libmindspore_ops_ascend.so",
              "BatchNormGradExt": "lib/plugin/libmindspore_ops_ascend.so"}
    aliases = {a for kind, names in A.KIND_TYPES[device].items() for a in names if a != kind}
    assert aliases, f"{device} has aliases"
    for name in aliases:
        assert_pinned(name, relpath or ascend[name])
