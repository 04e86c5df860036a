"""helpers.topics profiling modules (kernel_trace, rank_profile, profiling, merged_trace, comm_fusion, amp_kernels): pure functions on files written like MindSpore's (no processes).

The readers are tested on real profiler output in tests/jobs/test_profiling_jobs.py; here the events are
written in the exact shape MindSpore 2.10's CPU profiler writes them (trace_view.json: a list, string
``ts``/``dur`` in microseconds, kernels in the process named ``CPU OP``, scopes in ``Scope Layer``).
"""

import json

import numpy as np
import pytest

from helpers.topics import amp_kernels as amp
from helpers.topics import comm_fusion as F
from helpers.topics import kernel_trace as K
from helpers.topics import merged_trace as M
from helpers.topics import profile_plots as plots
from helpers.topics import profiling as P
from helpers.topics import rank_profile as R
from helpers.train import profiler_session as PS


def kernel(name, ts, dur, pid=2):
    return {"ph": "X", "name": name, "pid": pid, "tid": 0, "ts": f"{ts:.3f}", "dur": f"{dur:.3f}", "cat": "",
            "args": {"type": "HostCpuOps"}}


META = [{"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "CPU OP"}},
        {"ph": "M", "name": "process_name", "pid": 3, "tid": 0, "args": {"name": "Scope Layer"}}]
AR = "Default/grad_reducer-DistributedGradReducer/AllReduce-op{}"
CONV = "Default/network-WithLossCell/_backbone-ResNet/stem-SequentialCell/0-Conv2d/Conv2D-op0"
BN = "Gradients/Default/network-WithLossCell/_backbone-ResNet/BatchNormGrad-op3"


def fake_trace(steps=3, t0=1.7e15, step_us=10_000.0, n_ar=2):
    """Per step: conv 0..1000, bn 1000..2000, then n_ar AllReduces of 500 us each, back to back."""
    ev = list(META)
    for k in range(steps):
        base = t0 + k * step_us
        ev.append(kernel(CONV, base, 1000))
        ev.append(kernel(BN, base + 1000, 1000))
        for i in range(n_ar):
            ev.append(kernel(AR.format(i), base + 2000 + 500 * i, 500))
        ev.append({"ph": "X", "name": "Default", "pid": 3, "tid": 0, "ts": f"{base:.3f}", "dur": "3000.000"})
    return ev


def test_op_type_and_comm():
    assert K.op_type(AR.format(39)) == "AllReduce"
    assert K.op_type(CONV) == "Conv2D"
    assert K.op_type("Default/AllReduce-op1") == "AllReduce"
    assert K.is_comm(AR.format(1)) and not K.is_comm(BN)
    assert K.is_comm("Default/AllGather-op2") and K.is_comm("x/Broadcast-op0")


def test_op_events_keep_only_kernels_sorted_as_floats():
    ev = K.op_events(fake_trace(steps=2))
    assert len(ev) == 2 * 4 and all(isinstance(e.start_us, float) for e in ev)
    assert [e.start_us for e in ev] == sorted(e.start_us for e in ev)
    assert "Default" not in {e.name for e in ev}, "scope-layer spans are not kernels"


def test_split_steps_by_execution_count():
    steps = K.split_steps(K.op_events(fake_trace(steps=3, n_ar=5)))
    assert len(steps) == 3 and all(len(s) == 7 for s in steps)
    assert max(e.end_us for e in steps[0]) <= min(e.start_us for e in steps[1])


def test_split_steps_kernel_running_twice_per_step():
    ev = [K.OpEvent("a", t, 1) for t in (0, 10, 100, 110)] + [K.OpEvent("b", t, 1) for t in (20, 120)]
    steps = K.split_steps(ev)
    assert len(steps) == 2 and [e.start_us for e in steps[1]] == [100, 110, 120]


def test_split_steps_refuses_partial_steps():
    ev = [K.OpEvent("a", t, 1) for t in (0, 10, 20)] + [K.OpEvent("b", t, 1) for t in (5, 15)]
    with pytest.raises(ValueError, match="whole steps"):
        K.split_steps(ev, n_steps=2)


def test_union_length():
    assert K.union_length([]) == 0
    assert K.union_length([(0, 2), (1, 3), (5, 6)]) == 4
    assert K.union_length([(5, 6), (0, 10)]) == 10


def test_step_breakdown_compute_comm_idle():
    ev = K.split_steps(K.op_events(fake_trace(steps=1, n_ar=3)))[0]
    b = K.step_breakdown(ev)
    assert b.compute_s == pytest.approx(0.002) and b.comm_s == pytest.approx(0.0015)
    assert b.idle_s == pytest.approx(0.0) and b.span_s == pytest.approx(0.0035)
    assert b.allreduce_calls == 3 == b.comm_calls and b.kernels == 5


def test_step_breakdown_gap_is_idle():
    b = K.step_breakdown([K.OpEvent("x/Conv2D-op0", 0, 100), K.OpEvent("x/AllReduce-op0", 300, 100)])
    assert b.idle_s == pytest.approx(200e-6) and b.comm_s == pytest.approx(100e-6)


def test_allreduce_elements_from_framework_lines():
    lines = ["Conv2D;Conv2D-op0;931081623;input_1:[8, 3, 32, 32];input_2:[8, 3, 3, 3];",
             "AllReduce;AllReduce-op1;931081623;input_1:[10];",
             "AllReduce;AllReduce-op3;931081623;input_1:[64, 64, 3, 3];",
             "AllReduce;AllReduce-op1;931081623;input_1:[10];",
             "AllReduce;AllReduce-op3;931081623;input_1:[64, 64, 3, 3];",
             "AllReduce;AllReduce-op9;931081623;input_1:[];"]
    assert K.shape_elements(lines[0]) == 8 * 3 * 32 * 32 + 8 * 27
    assert K.allreduce_elements(lines[:5], n_steps=2) == [10, 64 * 64 * 9]
    assert K.shape_elements(lines[-1]) == 1, "a scalar has one element"


def test_overhead_ratio():
    s = np.array([[9.0, 1.0, 1.0, 1.2, 1.2], [9.0, 1.0, 1.0, 1.2, 1.2]])
    assert P.overhead_ratio(s, profiled_from=3) == pytest.approx(1.2)
    with pytest.raises(ValueError):
        P.overhead_ratio(s, profiled_from=1)


def test_fusion_split_indices():
    assert F.fusion_split_indices([4, 4, 4, 4], 8) == [2]
    assert F.fusion_split_indices([4, 4, 4, 4], 100) == []
    assert F.fusion_split_indices([4, 4, 4, 4], 1) == [1, 2, 3]
    idx = F.fusion_split_indices([1] * 62, 10)
    assert idx == sorted(set(idx)) and len(idx) + 1 == 7


def test_merge_one_process_per_rank_on_a_shared_clock():
    traces = {r: fake_trace(steps=2, t0=1.7e15 + 50 * r) for r in range(3)}
    steps = {r: [{"step": 1, "time": (1.7e15 + 20_000) / 1e6, "step_s": 0.02, "data_s": 0.001, "loss": 2.0}]
             for r in range(3)}
    merged = M.merge_trace_events(traces, steps)
    json.dumps(merged)   # serialisable
    ev = merged["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1", 2: "rank 2"}
    kernels = [e for e in ev if e["ph"] == "X" and e["name"] == CONV]
    assert sorted({e["pid"] for e in kernels}) == [0, 1, 2]
    assert all(isinstance(e["ts"], float) and isinstance(e["dur"], float) for e in kernels)
    first = {r: min(e["ts"] for e in kernels if e["pid"] == r) for r in range(3)}
    assert first[0] == pytest.approx(0.0) and first[2] - first[0] == pytest.approx(100.0)
    assert merged["otherData"]["t0_epoch_us"] == pytest.approx(1.7e15)
    step_spans = [e for e in ev if e.get("cat") == "step"]
    assert len(step_spans) == 3 and all(e["tid"] == 1000 for e in step_spans)
    assert step_spans[0]["ts"] == pytest.approx(0.0) and step_spans[0]["dur"] == pytest.approx(20_000)
    # kernels and scope layers land on different threads of the same process
    assert {e["tid"] for e in ev if e["ph"] == "X" and e["pid"] == 0 and e.get("cat") != "step"
            and e.get("cat") != "data"} == {0, 200}


def test_rank_dirs_reads_the_rank_from_file_names(tmp_path):
    for rank, host in ((1, "vm_11_a"), (0, "vm_12_b")):
        d = tmp_path / f"{host}_ascend_ms" / "FRAMEWORK"
        d.mkdir(parents=True)
        (d / f"cpu_op_execute_timestamp_{rank}.txt").write_text("")
    found = R.rank_dirs(tmp_path)
    assert sorted(found) == [0, 1] and found[0].name == "vm_12_b_ascend_ms"
    assert R.rank_dirs(tmp_path / "missing") == {}


def test_read_rank_on_files(tmp_path):
    d = tmp_path / "vm_1_x_ascend_ms"
    (d / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (d / "FRAMEWORK").mkdir()
    (d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(fake_trace(steps=2, n_ar=2)))
    (d / "FRAMEWORK" / "cpu_framework_0.txt").write_text(
        "AllReduce;AllReduce-op0;1;input_1:[10];\nAllReduce;AllReduce-op1;1;input_1:[4, 4];\n" * 2)
    rp = R.read_rank(d, 0)
    assert len(rp.steps) == 2 and rp.steps[0].allreduce_calls == 2
    assert rp.allreduce_elements == [10, 16]


def test_typical_step_ignores_one_slow_step():
    s = np.array([[9.0, 1.0, 1.1, 5.0, 1.0], [9.0, 1.0, 1.1, 5.0, 1.0]])
    assert P.unprofiled_step_s(s) == pytest.approx(1.05)
    assert P.unprofiled_step_s(s, profiled_from=3) == pytest.approx(1.05)
    with pytest.raises(ValueError):
        P.unprofiled_step_s(s, profiled_from=1)


def test_profiler_activities_per_device():
    from mindspore.profiler import ProfilerActivity as A

    assert PS.profiler_activities("CPU") == [A.CPU]
    assert PS.profiler_activities("GPU") == [A.CPU, A.GPU]
    assert PS.profiler_activities("Ascend") == [A.CPU, A.NPU]


def test_device_collective_kernel_names():
    assert K.op_type("hcom_allReduce__101_0_1") == "AllReduce"
    assert K.op_type("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "AllReduce"
    assert K.op_type("ncclKernel_AllGather_RING_LL_Sum_int8_t") == "AllGather"
    assert K.op_type("Default/network/Conv2D-op12") == "Conv2D"


def gpu_op_type_table(rows) -> str:
    """A ``gpu_op_type_info_<dev>.csv`` as the GPU profiler writes it: its header (the parser's constant, pinned to the
    wheel in tests/contract/test_profiler_formats.py), then ``op_type,occurrences,total_us`` rows."""
    total = sum(us for _, _, us in rows)
    return R.GPU_OP_TYPE_HEADER + "\n" + "".join(f"{t},{n},{us},{us / total:.4f},{us / n:.3f}\n" for t, n, us in rows)


def test_gpu_job_is_read_from_its_op_type_tables(tmp_path):
    """MindSpore 2.10 on GPU: GpuProfiler.analyse writes no trace; the C++ profiler saves gpu_op_type_info_<rank>.csv
    into the profile folder for every rank, in microseconds (not the CPU table's milliseconds and column names)."""
    for rank in (0, 1):
        (tmp_path / f"gpu_op_type_info_{rank}.csv").write_text(
            gpu_op_type_table([("Conv2D", 106, 40_000.0), ("AllReduce", 4, 10_000.0)]))
    dirs = R.rank_dirs(tmp_path)
    assert dirs == {0: tmp_path, 1: tmp_path}
    rp = R.read_rank(dirs[1], 1, n_steps=2, device_target="GPU")
    assert len(rp.steps) == 2 and rp.steps[0].allreduce_calls == 2
    assert rp.steps[0].compute_s == pytest.approx(0.020) and rp.steps[0].comm_s == pytest.approx(0.005)
    jp = P.JobProfile(tmp_path, {0: rp, 1: rp}, [3, 4], np.full((2, 2), 0.05), np.zeros((2, 2)))
    assert jp.allreduce_per_step == 2 and jp.comm_share == pytest.approx(0.1)
    assert jp.kernel_types()["Conv2D"] == (53.0, 20.0) and not jp.has_timeline
    with pytest.raises(ValueError, match="timeline"):
        plots.plot_step_timeline(jp)


def test_the_mean_bucket_leaves_out_the_loss_scales_overflow_flag(tmp_path):
    """A loss-scale cell (its steps record ``overflow``) adds one AllReduce per step, the overflow flag summed over
    the ranks: 6 gradient buckets + the flag are 7 calls, and the mean bucket is the gradients over 6, not 7."""
    from helpers.core.config import job_config
    from helpers.job.launch import JobResult

    (tmp_path / "gpu_op_type_info_0.csv").write_text(
        gpu_op_type_table([("Conv2D", 106, 40_000.0), ("AllReduce", 14, 10_000.0)]))
    rp = R.read_rank(tmp_path, 0, n_steps=2, device_target="GPU")
    grads = [6 * 2**20]                                        # 6 MiB of gradients
    step = {"loss": 1.0, "step_s": 0.05, "data_s": 0.0}
    scaled = JobResult(tmp_path, job_config("ci"), 0, 1.0, steps={0: [dict(step, overflow=False, scale=1024.0)] * 2})
    plain = JobResult(tmp_path, job_config("ci"), 0, 1.0, steps={0: [step] * 2})
    assert P.overflow_flag_allreduces(scaled) == 1 and P.overflow_flag_allreduces(plain) == 0
    jp = P.JobProfile(tmp_path, {0: rp}, [3, 4], np.full((1, 2), 0.05), np.zeros((1, 2)), grads,
                      P.overflow_flag_allreduces(scaled))
    assert jp.allreduce_per_step == 7 and jp.gradient_allreduce_per_step == 6
    assert jp.mean_bucket_mb == pytest.approx(1.0)            # 6 MiB over 6 gradient calls (7 would give 0.857)
    unscaled = P.JobProfile(tmp_path, {0: rp}, [3, 4], np.full((1, 2), 0.05), np.zeros((1, 2)), grads)
    assert unscaled.mean_bucket_mb == pytest.approx(6 / 7)


def test_op_tables_are_read_in_their_own_units_and_unknown_headers_refused(tmp_path):
    cpu = tmp_path / "cpu_op_type_info_0.csv"
    cpu.write_text(R.CPU_OP_TYPE_HEADER + "\nConv2D,10,5,40.0,4.0,80.0\n")
    assert R.read_op_type_table(cpu) == {"Conv2D": (10, 40.0)}, "the CPU table counts milliseconds"
    gpu = tmp_path / "gpu_op_type_info_0.csv"
    gpu.write_text(gpu_op_type_table([("Conv2D", 10, 40_000.0)]))
    assert R.read_op_type_table(gpu) == {"Conv2D": (10, 40.0)}, "the GPU table counts microseconds"
    bad = tmp_path / "gpu_op_type_info_1.csv"
    bad.write_text("op_type,count,time\nConv2D,1,2\n")
    with pytest.raises(ValueError, match="unknown op table header"):
        R.read_op_type_table(bad)


def read_ascend_rank(tmp_path, extra=lambda t: []):
    """Two steps of an Ascend trace_view.json (Conv2D + ReLU on the device, one HCCL AllReduce, a host row) plus
    ``extra(t)`` rows per step, read as rank 0."""
    meta = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": n}}
            for p, n in ((1, "CPU OP"), (2, "Ascend Hardware"), (3, "HCCL"))]
    events = []
    for s in range(2):
        t = 1000.0 * s
        events += [kernel("Default/Conv2D-op1", t, 100, pid=2), kernel("Default/ReLU-op2", t + 100, 50, pid=2),
                   kernel("hcom_allReduce__101_0_1", t + 150, 30, pid=3),
                   kernel("Default/Launch-op9", t, 900, pid=1)] + extra(t)
    d = tmp_path / "vm_1_x_ascend_ms"
    (d / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(meta + events))
    return R.read_rank(d, 0, n_steps=2, device_target="Ascend")


def test_ascend_trace_reads_device_and_hccl_rows(tmp_path):
    """On Ascend the kernels are in process 'Ascend Hardware' and the collectives in 'HCCL'
    (mindspore/profiler/common/constant.py TimelineLayerName); host 'CPU OP' rows are not the device's time."""
    rp = read_ascend_rank(tmp_path)
    assert [s.allreduce_calls for s in rp.steps] == [1, 1] and rp.steps[0].kernels == 3
    assert rp.steps[0].compute_s == pytest.approx(150e-6) and rp.steps[0].comm_s == pytest.approx(30e-6)


# ---------------------------------------------------------------- GPU / Ascend layouts of MindSpore 2.10
# GPU: mindspore/profiler/platform/gpu_profiler.py (analyse() is empty) and cpu_profiler.py (analyse() returns unless
# the device target set is {"CPU"}): no trace_view.json. The GPU plugin (lib/plugin/libmindspore_gpu.so.11.x, built
# from plugin/.../gpu/profiler/gpu_data_saver.cc) writes into the profiler's output_path (= the folder given to
# tensorboard_trace_handler, <run_dir>/profile) "gpu_op_type_info_<dev>.csv" and, in GpuDataSaver::WriteActivity,
# "activity_execute_timestamp_<dev>.txt": kernel_name;stream_id;start_timestamp(ns);duration(us = ns / kTimeUnit 1000).
# Kernel names are demangled and lose "void " (GetKernelFunc / GetKernelFuncName in gpu_profiling.cc); the NCCL the
# wheel bundles (lib/plugin/gpu11.6/libnccl.so.2, "NCCL version 2.16.5") names its kernels ncclKernel_AllReduce_...
# The host side (CpuProfiler.start -> FRAMEWORK path) still makes <host>_<pid>_<stamp>_ascend_ms/FRAMEWORK per rank
# (profiler/common/profiler_output_path.py, "{}_{}_ascend_ms" in common/profiler_path_manager.py).
NCCL_AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
SGEMM = "volta_sgemm_128x64_nn"
BNFWD = "cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, float const*)"


def gpu_stamp_lines(steps=2, t0_ns=1_700_000_000_000_000_000, step_ns=10_000_000, n_ar=2):
    """Per step: sgemm 0..1000 us, bn 1000..1500 us, then n_ar NCCL AllReduce kernels of 200 us on stream 14."""
    lines = []
    for k in range(steps):
        base = t0_ns + k * step_ns
        lines.append(f"{SGEMM};7;{base};1000")
        lines.append(f"{BNFWD};7;{base + 1_000_000};500")
        for i in range(n_ar):
            lines.append(f"{NCCL_AR};14;{base + 2_000_000 + 300_000 * i};200")
    return lines


# What the GPU op table counts for gpu_stamp_lines' two steps: MindSpore op types (the CUDA kernels above are what
# those ops launched), Cast and the BatchNorm+ReLU that GPU's NHWC pass fuses into BatchNormWithActivation.
GPU_OP_ROWS = [("MatMul", 2, 2000.0), ("BatchNormWithActivation", 2, 1000.0), ("Cast", 6, 60.0),
               ("AllReduce", 4, 800.0)]


def write_gpu_job(tmp_path, ranks=(0, 1), with_host_folders=True):
    for rank in ranks:
        (tmp_path / f"gpu_op_type_info_{rank}.csv").write_text(gpu_op_type_table(GPU_OP_ROWS))
        # GpuDataSaver::WriteActivity groups the lines by kernel name (an unordered map), so not in time order
        lines = gpu_stamp_lines()
        (tmp_path / f"activity_execute_timestamp_{rank}.txt").write_text("\n".join(sorted(lines)) + "\n")
        (tmp_path / f"start_time_{rank}.txt").write_text("host_monotonic_raw_time(ns): 1\ngpu_start_time(ns): 2\n")
        if with_host_folders:
            fw = tmp_path / f"gpuhost_{1000 + rank}_20260101000000000_ascend_ms" / "FRAMEWORK"
            fw.mkdir(parents=True)
            (fw / f"cpu_op_execute_timestamp_{rank}.txt").write_text("")


def test_nccl_kernel_names_as_the_gpu_profiler_writes_them():
    assert K.op_type(NCCL_AR) == "AllReduce" and K.is_comm(NCCL_AR)
    assert K.op_type("_Z38ncclKernel_AllReduce_RING_LL_Sum_floatP11ncclDevCommmP8ncclWork") == "AllReduce"
    assert not K.is_comm(SGEMM) and not K.is_comm(BNFWD)


def test_gpu_rank_dirs_prefer_the_device_files_over_the_host_folders(tmp_path):
    """A GPU job has both <profile>/gpu_*_<dev> files and a host *_ascend_ms folder per rank: not two ranks' worth."""
    write_gpu_job(tmp_path)
    assert R.rank_dirs(tmp_path) == {0: tmp_path, 1: tmp_path}


def test_gpu_timeline_from_activity_timestamps(tmp_path):
    write_gpu_job(tmp_path, ranks=(0,), with_host_folders=False)
    (tmp_path / "gpu_op_type_info_0.csv").unlink()          # the timeline alone is enough
    rp = R.read_rank(tmp_path, 0, n_steps=2, device_target="GPU")
    assert len(rp.steps) == 2 and all(len(s) == 4 for s in rp.step_events)
    s0 = rp.steps[0]
    assert s0.allreduce_calls == 2 == s0.comm_calls and s0.kernels == 4
    assert s0.compute_s == pytest.approx(1500e-6) and s0.comm_s == pytest.approx(400e-6)
    assert s0.idle_s == pytest.approx(500e-6 + 100e-6)      # 1500..2000 us and the gap between the AllReduces
    assert rp.step_events[0][0].start_us == pytest.approx(1.7e15)
    jp = P.JobProfile(tmp_path, {0: rp}, [3, 4], np.full((1, 2), 0.01), np.zeros((1, 2)))
    assert jp.has_timeline and jp.allreduce_per_step == 2


def test_gpu_kernel_types_are_mindspore_ops_from_the_op_table(tmp_path):
    """The GPU timeline's rows are CUDA kernels (volta_sgemm, cudnn::bn_fw...): counting Cast or BatchNorm there
    finds none. The per-type counts come from the op table, per profiled step, under the GPU's names for each kind."""
    write_gpu_job(tmp_path, ranks=(0,), with_host_folders=False)
    rp = R.read_rank(tmp_path, 0, n_steps=2, device_target="GPU")
    assert rp.step_events[0] and rp.steps[0].allreduce_calls == 2, "the timeline is still read"
    jp = P.JobProfile(tmp_path, {0: rp}, [3, 4], np.full((1, 2), 0.01), np.zeros((1, 2)))
    types = jp.kernel_types()
    assert types["Cast"] == pytest.approx((3.0, 0.03)) and types["MatMul"] == pytest.approx((1.0, 1.0))
    assert SGEMM not in types
    calls = amp.kernel_calls(types, ["Cast", "BatchNorm", "ReLU"], "GPU")
    assert calls == {"Cast": 3.0, "BatchNorm": 1.0, "ReLU": 0.0}, "fused BatchNorm+ReLU: a BatchNorm, no ReLU"
    assert amp.kernel_calls(types, ["BatchNorm"], "CPU") == {"BatchNorm": 0.0}, "names are per device"


def test_gpu_op_detail_table_when_there_is_no_type_table(tmp_path):
    rows = [("Device", "Cast", "Cast-op1", "Default/Cast-op1", 2, 20.0),
            ("Device", "Cast", "Cast-op7", "Default/Cast-op7", 2, 30.0),
            ("Device", "Conv2D", "Conv2D-op2", "Default/Conv2D-op2", 2, 4000.0)]
    (tmp_path / "gpu_op_detail_info_0.csv").write_text(R.GPU_OP_DETAIL_HEADER + "\n" + "".join(
        f"{side},{t},{n},{full},{k},{us},{us / k},0.1,{us},{k}\n" for side, t, n, full, k, us in rows))
    assert R.rank_dirs(tmp_path) == {0: tmp_path}
    rp = R.read_rank(tmp_path, 0, n_steps=2, device_target="GPU")
    assert rp.type_table == {"Cast": (2.0, pytest.approx(0.025)), "Conv2D": (1.0, pytest.approx(2.0))}


def test_gpu_merged_trace_from_activity_timestamps(tmp_path):
    write_gpu_job(tmp_path, ranks=(0,), with_host_folders=False)
    trace = M.rank_trace(tmp_path, 0)
    assert K.process_names(trace) == {0: "GPU"} and len(K.op_events(trace, ("GPU",))) == 8


def test_ascend_hccl_link_tasks_and_duplicate_rows_are_not_extra_kernels(tmp_path):
    """trace_view.json on Ascend passes msprof's timeline through (analysis/parser/timeline_creator/
    msprof_timeline_creator.py get_chrome_trace_data): the HCCL process holds the collective (hcom_allReduce__<id>_<n>_<n>,
    the names in analysis/viewer/ascend_step_trace_time_viewer.py) and, on other threads, the link tasks it is made of
    (task names here are illustrative: the 2.10 Python code does not name them). A collective must count once."""
    rp = read_ascend_rank(tmp_path, lambda t: [
        kernel("hcom_allReduce__101_0_1", t + 150, 30, pid=2),      # the same collective on its stream
        kernel("Notify_Wait", t + 152, 10, pid=3), kernel("Memcpy", t + 165, 10, pid=3)])
    assert [s.allreduce_calls for s in rp.steps] == [1, 1] and rp.steps[0].kernels == 3
    assert rp.steps[0].compute_s == pytest.approx(150e-6) and rp.steps[0].comm_s == pytest.approx(30e-6)


def ascend_hw(name, t, dur, framework=None):
    """An ``Ascend Hardware`` row; ``framework``: the op that launched it, in ``args`` as MindSpore's analysis links it
    (K.FRAMEWORK_OP_ARG, pinned in tests/contract/test_profiler_formats.py), named "Kernel::KernelLaunch::<op>"."""
    row = kernel(name, t, dur, pid=2)
    if framework:
        row["args"] = {K.FRAMEWORK_OP_ARG: f"Kernel{K.FRAMEWORK_NAME_SEP}KernelLaunch{K.FRAMEWORK_NAME_SEP}{framework}"}
    return row


def test_ascend_kernels_count_as_their_framework_ops(tmp_path):
    """Ascend Hardware rows carry CANN kernel names (not 'Cast' or 'Conv2D'); each kernel's type is the framework op
    that launched it, and an op that launched two kernels (a TransData and its convolution) counts once."""
    conv, cast, bn = "Default/net/Conv2D-op12", "Default/net/Cast-op3", "Default/net/BNTrainingUpdate-op5"
    meta = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": n}}
            for p, n in ((1, "CPU OP"), (2, "Ascend Hardware"), (3, "HCCL"))]
    events = []
    for s in range(2):
        t = 1000.0 * s
        events += [ascend_hw("TransData_8f1c_high_performance_1", t, 10, conv),
                   ascend_hw("Conv2D_91ab_high_performance_0", t + 10, 90, conv),
                   ascend_hw("Cast_77de_high_performance_2", t + 100, 5, cast),
                   ascend_hw("BNTrainingUpdate_3c2a_0", t + 105, 20, bn),
                   ascend_hw("MemcpyAsync", t + 140, 5, "Default/grad_reducer/AllReduce-op9"),
                   kernel("hcom_allReduce__101_0_1", t + 150, 30, pid=3)]
    d = tmp_path / "vm_1_x_ascend_ms"
    (d / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(meta + events))
    rp = R.read_rank(d, 0, n_steps=2, device_target="Ascend")
    assert rp.steps[0].allreduce_calls == 1 and rp.steps[0].comm_s == pytest.approx(30e-6), \
        "the breakdown sorts kernels by their own names: the AllReduce op's copy is not a second collective"
    jp = P.JobProfile(d, {0: rp}, [3, 4], np.full((1, 2), 0.01), np.zeros((1, 2)))
    types = jp.kernel_types()
    assert types["Conv2D"] == pytest.approx((1.0, 0.1)), "one launch, its two kernels' time"
    assert types["Cast"][0] == 1.0 and "Cast_77de_high_performance_2" not in types
    assert amp.kernel_calls(types, ["Cast", "Conv2D", "BatchNorm"], "Ascend") == {"Cast": 1.0, "Conv2D": 1.0,
                                                                                    "BatchNorm": 1.0}


# ---------------------------------------------------------------- bytes per AllReduce: measured on CPU, else gradients
def test_bucket_size_on_a_card_comes_from_the_gradients(tmp_path):
    """GPU and Ascend profiles carry no AllReduce sizes (the collectives run on the device; the host's framework file
    sees host kernels only): the bytes reduced per step are the job's gradients, all reduced once per step."""
    write_gpu_job(tmp_path, ranks=(0,), with_host_folders=False)
    rp = R.read_rank(tmp_path, 0, n_steps=2, device_target="GPU")
    grads = [2**20, 3 * 2**20]
    jp = P.JobProfile(tmp_path, {0: rp}, [3, 4], np.full((1, 2), 0.01), np.zeros((1, 2)), grads)
    assert jp.reduced_mb_per_step == pytest.approx(4.0) and jp.mean_bucket_mb == pytest.approx(2.0)
    assert jp.summary()["mean_bucket_mb"] == pytest.approx(2.0)
    assert jp.measured_mb_per_step is None and jp.sizes_agree() is None
    unknown = P.JobProfile(tmp_path, {0: rp}, [3, 4], np.full((1, 2), 0.01), np.zeros((1, 2)))
    assert np.isnan(unknown.mean_bucket_mb), "no sizes and no gradients: unknown, not 0"


def test_ascend_does_not_take_allreduce_sizes_from_the_host_framework_file(tmp_path):
    rp0 = read_ascend_rank(tmp_path)
    fw = rp0.folder / "FRAMEWORK"
    fw.mkdir()
    (fw / "cpu_framework_0.txt").write_text("AllReduce;AllReduce-op0;1;input_1:[3];\n" * 2)   # a host-side one
    rp = R.read_rank(rp0.folder, 0, n_steps=2, device_target="Ascend")
    assert rp.allreduce_elements == []
    jp = P.JobProfile(rp.folder, {0: rp}, [3, 4], np.full((1, 2), 0.01), np.zeros((1, 2)), [4 * 2**20])
    assert jp.reduced_mb_per_step == pytest.approx(4.0) and jp.mean_bucket_mb == pytest.approx(4.0)


def test_on_cpu_measured_sizes_agree_with_the_gradients(tmp_path):
    """CPU measures the bytes (each AllReduce's input shapes in cpu_framework_<r>.txt); they must be the gradients'."""
    shapes = [[8, 3, 3, 3], [8], [8], [10, 8], [10]]
    grads = [4 * int(np.prod(s)) for s in shapes]
    d = tmp_path / "vm_1_x_ascend_ms"
    (d / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (d / "FRAMEWORK").mkdir()
    (d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(fake_trace(steps=2, n_ar=2)))
    fused = "".join(f"input_{i + 1}:[{', '.join(map(str, s))}];" for i, s in enumerate(shapes[:3]))
    rest = "".join(f"input_{i + 1}:[{', '.join(map(str, s))}];" for i, s in enumerate(shapes[3:]))
    (d / "FRAMEWORK" / "cpu_framework_0.txt").write_text(
        f"AllReduce;AllReduce-op0;1;{fused}\nAllReduce;AllReduce-op1;1;{rest}\n" * 2)
    rp = R.read_rank(d, 0, n_steps=2)
    jp = P.JobProfile(d, {0: rp}, [3, 4], np.full((1, 2), 0.01), np.zeros((1, 2)), grads)
    assert jp.measured_mb_per_step == pytest.approx(jp.gradient_mb) and jp.sizes_agree() is True
    assert jp.mean_bucket_mb == pytest.approx(sum(grads) / 2 / 2**20)
    other = P.JobProfile(d, {0: rp}, [3, 4], np.full((1, 2), 0.01), np.zeros((1, 2)), grads + [4096])
    assert other.sizes_agree() is False


def test_fusion_threshold_buckets_as_mindspores_pass_cuts_them():
    """communication_op_fusion.cc GetAllReduceSplitSegment: the tensor that would overflow a bucket closes it."""
    assert F.threshold_buckets([4, 4, 4, 4], 8) == [12, 4]
    assert F.threshold_buckets([4, 4, 4, 4], 100) == [16]
    assert F.threshold_buckets([10, 1, 1], 8) == [10, 2]
    assert F.fusion_threshold_bytes({"allreduce": {"mode": "auto", "config": None}}) == 16 * 2**20
    assert F.fusion_threshold_bytes({"allreduce": {"mode": "size", "config": 4}}) == 2**20
    assert F.fusion_threshold_bytes({}) is None


def test_predicted_buckets_per_fusion_mode():
    grads = [2**20] * 40                                   # 40 MiB in 1 MiB tensors
    assert F.predicted_buckets(grads, {}) == 40, "fusion off: one AllReduce per gradient"
    assert F.predicted_buckets(grads, {"allreduce": {"mode": "auto", "config": None}}) == 3, "16 MiB buckets, not 1"
    assert F.predicted_buckets(grads, {"allreduce": {"mode": "size", "config": 8}}) == 14     # 2 MiB: 3 tensors each
    assert F.predicted_buckets(grads, {"allreduce": {"mode": "index", "config": [9, 19]}}) == 3
    assert F.predicted_buckets(grads, {"allreduce": {"mode": "index", "config": [9, 39]}}) == 2


# ---------------------------------------------------------------- which kernels carry the convolutions (chapter 04)
def test_conv_kernel_types_follow_the_implementation_that_ran():
    assert amp.conv_kernel_types("native") == ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
    im2col = amp.conv_kernel_types("im2col")
    assert im2col == ("Im2Col", "BatchMatMul", "Col2Im")
    assert not set(amp.conv_kernel_types("native")) & set(im2col), "im2col runs every convolution, 1x1 too"
    with pytest.raises(ValueError):
        amp.conv_kernel_types("auto")          # only a resolved implementation says which kernels ran
    assert "`Im2Col`" in amp.conv_kernels_note("im2col") and "no `Conv2D*`" in amp.conv_kernels_note("im2col")
    assert "`Im2Col`" not in amp.conv_kernels_note("native")


def test_kernel_calls_reads_executions_and_fills_absent_types_with_zero():
    table = {"Cast": (12.0, 3.5), "Im2Col": (17.0, 11.2)}
    assert amp.kernel_calls(table, ["Cast", "Im2Col", "Conv2D"]) == {"Cast": 12.0, "Im2Col": 17.0, "Conv2D": 0.0}


def test_relative_to_sorts_levels_by_the_noise_band():
    out = amp.relative_to({"O0": 1.0, "O1": 1.3, "O2": 0.8, "O3": 1.1}, "O0", noise=0.15)
    assert out["rel"] == pytest.approx({"O0": 1.0, "O1": 1.3, "O2": 0.8, "O3": 1.1})
    assert (out["slower"], out["faster"], out["ties"]) == (["O1"], ["O2"], ["O3"])


def test_cpu_fp16_flags(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 f16c avx512f\n")
    assert amp.cpu_fp16_flags(str(f)) == {"fp16_math": [], "f16c": True}
    f.write_text("flags\t\t: avx512_fp16 amx_fp16\n")
    assert amp.cpu_fp16_flags(str(f)) == {"fp16_math": ["amx_fp16", "avx512_fp16"], "f16c": False}
    assert amp.cpu_fp16_flags(str(tmp_path / "missing")) == {"fp16_math": [], "f16c": False}


def test_fusion_sweep_plot_names_a_row_without_a_size():
    rows = [dict(label="unfused", bucket_mb=0.01, allreduce_per_step=62, step_s=1.2),
            dict(label="auto", bucket_mb=float("nan"), allreduce_per_step=1, step_s=0.6),
            dict(label="size 1 MB", bucket_mb=1.0, allreduce_per_step=3, step_s=0.7)]
    fig = plots.plot_fusion_sweep(rows)
    left, right = fig.axes
    assert len(left.collections) == 2 and len(right.collections) == 3
    assert "no size for: auto" in left.get_title()
    plots.plt.close(fig)


def test_two_fusion_settings_are_bars_not_a_curve_on_log_axes():
    rows = [dict(label="unfused", bucket_mb=0.01, allreduce_per_step=62, step_s=1.2),
            dict(label="auto", bucket_mb=float("nan"), allreduce_per_step=1, step_s=0.6)]
    fig = plots.plot_fusion_sweep(rows)
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["unfused\n62 calls, 0.01 MiB", "auto\n1 calls, size unknown"] and len(ax.patches) == 2
    plots.plt.close(fig)
