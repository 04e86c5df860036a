"""Read what ``mindspore.profiler`` wrote on every rank of a job: compute, communication, data wait per step.

A job run with ``profile=True`` (see ``helpers.train.worker.profiling_session``) leaves, per rank, one folder
``<run_dir>/profile/<host>_<pid>_<stamp>_ascend_ms/`` holding (MindSpore 2.10 on CPU):

- ``ASCEND_PROFILER_OUTPUT/trace_view.json``: a Chrome trace (a JSON list). Process ``CPU OP`` has one
  complete event (``"ph": "X"``) per kernel execution, named by its full scope
  (``Default/grad_reducer-DistributedGradReducer/AllReduce-op39``), with ``ts``/``dur`` in microseconds as
  strings (``ts`` is wall-clock time since the epoch, the clock of ``time.time()``). Process ``Scope Layer``
  holds the scope hierarchy (overlapping spans; not used for the sums).
- ``FRAMEWORK/cpu_framework_<rank>.txt``: one line per kernel execution,
  ``type;name;graph;input_1:[shape];...``
  (the source of the bytes each AllReduce moves), plus ``cpu_op_execute_timestamp_<rank>.txt``,
  ``cpu_op_type_info_<rank>.csv`` and ``cpu_op_detail_info_<rank>.csv`` (op tables). The rank is only in
  these file names: the trace itself does not say which rank wrote it.

There are no step markers in the CPU trace. A GRAPH_MODE step runs every kernel of the graph exactly once,
so the k-th execution of each kernel belongs to the k-th profiled step (:func:`split_steps`). Per step:
``comm`` is the time inside communication kernels (AllReduce and friends; on CPU that includes waiting for
the slowest rank to arrive), ``compute`` the time inside every other kernel, ``idle`` the gaps between
kernels. The rank's own metrics file adds the wall step time and the time it waited for data, so
``other = step - data - compute - comm`` is what ran outside kernels (Python, graph launch, gaps).

On GPU (read from the 2.10 wheel and the C++ sources it was built from): ``GpuProfiler.analyse``
(``mindspore/profiler/platform/gpu_profiler.py``) is empty, and ``CpuProfiler.analyse`` returns unless the device
target set is ``{"CPU"}`` (``platform/cpu_profiler.py``), so a GPU job gets no ``trace_view.json``. What it has is
written by the GPU plugin's ``GpuDataSaver`` (``libmindspore_gpu.so.11.x``; ``gpu_data_saver.cc``) straight into
the profiler's ``output_path``, i.e. ``<run_dir>/profile/`` itself, keyed by the CUDA device id (= the rank on one
node): ``gpu_op_type_info_<dev>.csv`` (the CPU table's columns), ``gpu_op_detail_info_<dev>.csv``,
``gpu_activity_data_<dev>.csv`` (per kernel name: ``name,type,op_full_name,stream_id,block_dim,grid_dim,...``),
``start_time_<dev>.txt`` and ``activity_execute_timestamp_<dev>.txt``: one line per device kernel execution,
``kernel_name;stream_id;start_ns;duration_us`` (CUPTI clock in ns; duration ``(end - start) / kTimeUnit`` with
``kTimeUnit = 1000``). Kernel names are demangled with the leading ``void `` dropped (``GetKernelFunc`` /
``GetKernelFuncName`` in ``gpu_profiling.cc``); the bundled NCCL 2.16.5 (``plugin/gpu11.x/libnccl.so.2``) names
its collectives ``ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)`` (NCCL >= 2.19
spells them ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``). :func:`read_rank` builds the GPU timeline from that file
(the op table is the fallback). The host side of a GPU job still makes a ``*_ascend_ms/FRAMEWORK`` folder per
rank; :func:`rank_dirs` prefers the GPU files for such a rank.

On Ascend ``NpuProfiler.analyse`` writes ``ASCEND_PROFILER_OUTPUT/trace_view.json`` (``AscendTimelineViewer``,
``analysis/viewer/ascend_timeline_viewer.py``) with the device kernels in process ``Ascend Hardware`` and the
collectives in ``HCCL`` (``profiler/common/constant.py`` ``TimelineLayerName``); the collective rows are named
``hcom_allReduce__<id>_<n>_<n>`` (the patterns in ``analysis/viewer/ascend_step_trace_time_viewer.py``). Only
the ``hcom_*`` rows of ``HCCL`` count as communication here; its other rows (the per-link tasks msprof puts
under the same process) and any ``hcom_*`` copy in ``Ascend Hardware`` are left out, so a collective is counted once.

Pure functions (no files) come first; the readers, the merged Perfetto trace and the figures follow.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# Kernel types that move data between ranks. The CPU trace names kernels by primitive (``AllReduce-op3``); the
# Hcom*/Nccl* spellings are there for other backends' traces and were not seen on this machine.
COMM_OP_TYPES = frozenset({
    "AllReduce", "AllGather", "Broadcast", "ReduceScatter", "AlltoAll", "AllToAll", "AlltoAllV", "Send",
    "Receive", "Recv", "Barrier", "CollectiveScatter", "CollectiveGather", "BatchISendIRecv",
    "HcomAllReduce", "HcomAllGather", "HcomBroadcast", "HcomReduceScatter", "HcomSend", "HcomReceive",
    "NcclAllReduce", "NcclAllGather", "NcclBroadcast", "NcclReduceScatter",
})
OP_PROCESSES = ("CPU OP",)          # trace processes whose events are kernels
DEVICE_OP_PROCESSES = {"CPU": OP_PROCESSES, "Ascend": ("Ascend Hardware", "HCCL")}
_OP_SUFFIX = re.compile(r"-op\d+$")
# device collective kernels: HCCL tasks (hcom_allReduce__101_0_1) and NCCL kernels (ncclDevKernel_AllReduce_Sum_f32_RING_LL)
# (a mangled ``_Z38ncclKernel_...`` is accepted too, in case a name is not demangled)
_DEVICE_COMM = re.compile(r"^(?:hcom_|(?:_Z\d+)?nccl(?:Dev)?Kernel_)([A-Za-z]+?)(?:_|\(|$)")
_COMM_CANON = {t.lower(): t for t in ("AllReduce", "AllGather", "Broadcast", "ReduceScatter", "AlltoAll", "Send")}
_COMM_CANON.update({"receive": "Receive", "recv": "Receive"})


def profiler_activities(device_target: str) -> list:
    """What ``mindspore.profiler.profile`` records on this device: host ops always, plus the device's kernels."""
    from mindspore.profiler import ProfilerActivity

    extra = {"CPU": [], "GPU": [ProfilerActivity.GPU], "Ascend": [ProfilerActivity.NPU]}
    if device_target not in extra:
        raise ValueError(f"device_target must be CPU, GPU or Ascend, got {device_target!r}")
    return [ProfilerActivity.CPU] + extra[device_target]
_SHAPE = re.compile(r"input_\d+:\[([0-9, ]*)\]")


# ---------------------------------------------------------------- pure parsing
def op_type(name: str) -> str:
    """``Default/grad_reducer-DistributedGradReducer/AllReduce-op39`` -> ``AllReduce``; device collective kernels
    (``hcom_allReduce__101_0_1``, ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``) -> their collective."""
    leaf = _OP_SUFFIX.sub("", name.rsplit("/", 1)[-1])
    m = _DEVICE_COMM.match(leaf)
    if m and m.group(1).lower() in _COMM_CANON:
        return _COMM_CANON[m.group(1).lower()]
    return leaf


def is_comm(name: str) -> bool:
    return op_type(name) in COMM_OP_TYPES


@dataclass(frozen=True)
class OpEvent:
    """One kernel execution: full scope name, start and duration in microseconds (epoch clock)."""

    name: str
    start_us: float
    dur_us: float

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us

    @property
    def type(self) -> str:
        return op_type(self.name)

    @property
    def comm(self) -> bool:
        return self.type in COMM_OP_TYPES


def process_names(trace: list[dict]) -> dict[int, str]:
    """pid -> process name, from the trace's ``process_name`` metadata events."""
    return {e["pid"]: e["args"]["name"] for e in trace
            if e.get("ph") == "M" and e.get("name") == "process_name"}


def op_events(trace: list[dict], processes=OP_PROCESSES) -> list[OpEvent]:
    """The kernel executions of one rank's trace (complete events of the kernel processes), by start time."""
    names = process_names(trace)
    pids = {pid for pid, n in names.items() if n in processes}
    out = [OpEvent(e["name"], float(e["ts"]), float(e.get("dur", 0.0))) for e in trace
           if e.get("ph") == "X" and e.get("pid") in pids]
    out.sort(key=lambda e: e.start_us)
    return out



def _is_device_comm_row(name: str) -> bool:
    return bool(_DEVICE_COMM.match(name.rsplit("/", 1)[-1]))


def device_op_events(trace: list[dict], device_target: str = "CPU") -> list[OpEvent]:
    """The kernel executions of one rank's ``trace_view.json`` for ``device_target``.

    CPU: the ``CPU OP`` rows (:func:`op_events`). Ascend: the ``Ascend Hardware`` rows plus the ``hcom_*`` rows
    of ``HCCL``; other ``HCCL`` rows (per-link tasks) are inside those spans and are not kernels of their own,
    and an ``hcom_*`` row in ``Ascend Hardware`` is dropped when ``HCCL`` has the collectives (counted once).
    """
    if device_target != "Ascend":
        return op_events(trace, DEVICE_OP_PROCESSES.get(device_target, OP_PROCESSES))
    hardware = op_events(trace, ("Ascend Hardware",))
    hccl = [e for e in op_events(trace, ("HCCL",)) if _is_device_comm_row(e.name)]
    if hccl:
        hardware = [e for e in hardware if not _is_device_comm_row(e.name)]
    return sorted(hardware + hccl, key=lambda e: e.start_us)


def parse_gpu_activity_timestamps(lines) -> list[OpEvent]:
    """Device kernel executions from ``activity_execute_timestamp_<dev>.txt`` (MindSpore's GPU profiler):
    ``kernel_name;stream_id;start_ns;duration_us`` per line, by start time (microseconds, CUPTI clock)."""
    out = []
    for line in lines:
        parts = line.rstrip("\n").rsplit(";", 3)
        if len(parts) != 4 or not parts[0]:
            continue
        name, _stream, start_ns, dur_us = parts
        out.append(OpEvent(name, float(start_ns) / 1e3, float(dur_us)))
    out.sort(key=lambda e: e.start_us)
    return out

def split_steps(events: list[OpEvent], n_steps: int | None = None) -> list[list[OpEvent]]:
    """Group kernel executions into steps: the k-th execution of each kernel belongs to step k.

    ``n_steps`` (the number of profiled steps) defaults to the most common number of executions per kernel;
    a kernel run ``m * n_steps`` times (e.g. inside a loop) gives its first ``m`` executions to step 0, etc.
    """
    by_name: dict[str, list[OpEvent]] = defaultdict(list)
    for e in events:
        by_name[e.name].append(e)
    if not by_name:
        return []
    if n_steps is None:
        counts = Counter(len(v) for v in by_name.values())
        n_steps = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))[0]
    bad = sorted(n for n, v in by_name.items() if len(v) % n_steps)
    if bad:
        raise ValueError(f"{len(bad)} kernels did not run a multiple of {n_steps} times (e.g. {bad[0]!r}): "
                         "the trace does not hold whole steps")
    steps: list[list[OpEvent]] = [[] for _ in range(n_steps)]
    for runs in by_name.values():
        per = len(runs) // n_steps
        for i, e in enumerate(sorted(runs, key=lambda e: e.start_us)):
            steps[i // per].append(e)
    for s in steps:
        s.sort(key=lambda e: e.start_us)
    return steps


def union_length(intervals) -> float:
    """Total length covered by ``(start, end)`` intervals (overlaps counted once)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


@dataclass(frozen=True)
class StepBreakdown:
    """One profiled step of one rank, from its kernels only (seconds)."""

    start_us: float
    end_us: float
    compute_s: float       # inside non-communication kernels
    comm_s: float          # inside communication kernels (includes waiting for the other ranks)
    idle_s: float          # between kernels, inside the step's span
    comm_calls: int
    allreduce_calls: int
    kernels: int

    @property
    def span_s(self) -> float:
        return (self.end_us - self.start_us) / 1e6


def step_breakdown(events: list[OpEvent]) -> StepBreakdown:
    """Compute / communication / idle of one step's kernel executions (overlaps counted once, comm first)."""
    if not events:
        return StepBreakdown(math.nan, math.nan, 0.0, 0.0, 0.0, 0, 0, 0)
    start = min(e.start_us for e in events)
    end = max(e.end_us for e in events)
    busy = union_length((e.start_us, e.end_us) for e in events)
    comm = union_length((e.start_us, e.end_us) for e in events if e.comm)
    return StepBreakdown(start, end, (busy - comm) / 1e6, comm / 1e6, (end - start - busy) / 1e6,
                         sum(e.comm for e in events), sum(e.type == "AllReduce" for e in events), len(events))


def shape_elements(line: str) -> int:
    """Elements in all inputs of one ``cpu_framework_<r>.txt`` line (``input_1:[8, 3, 3, 3];`` -> 216)."""
    total = 0
    for dims in _SHAPE.findall(line):
        n = 1
        for d in (x for x in dims.split(",") if x.strip()):
            n *= int(d)
        total += n
    return total


def allreduce_elements(framework_lines, n_steps: int) -> list[int]:
    """Elements each AllReduce call of one step reduces (from ``cpu_framework_<r>.txt`` lines)."""
    sizes = [shape_elements(ln) for ln in framework_lines if ln.split(";", 1)[0] == "AllReduce"]
    per = len(sizes) // max(n_steps, 1)
    return sizes[:per]


def typical_step_s(step_s) -> float:
    """Median over steps of the ranks' mean step time: one slow step (another job grabbing the cores) does
    not move it. ``step_s`` is (ranks x steps)."""
    return float(np.median(np.asarray(step_s, dtype=float).mean(axis=0)))


def steady_step_s(step_s, profiled_from: int | None = None, first_timed: int = 1) -> float:
    """Typical step time without the profiler: steps ``first_timed .. profiled_from-1`` of a profiled job (all
    steps after ``first_timed`` when ``profiled_from`` is None); step 0 compiles the graph."""
    a = np.asarray(step_s, dtype=float)
    end = a.shape[1] if profiled_from is None else profiled_from
    if not first_timed < end <= a.shape[1]:
        raise ValueError(f"no unprofiled steps after step {first_timed - 1} (job has {a.shape[1]} steps)")
    return typical_step_s(a[:, first_timed:end])


def job_step_s(result) -> float:
    """A finished job's mean step time without the profiler (its unprofiled steps after step 0)."""
    cfg = result.config
    return steady_step_s(result.metric("step_s"), cfg.profile_skip_steps if cfg.profile else None)


def overhead_ratio(step_s, profiled_from: int, first_timed: int = 1) -> float:
    """Typical step time (:func:`typical_step_s`) of profiled steps over that of unprofiled ones, same job.

    ``step_s`` is (ranks x steps); steps ``first_timed .. profiled_from-1`` ran without the profiler (step 0
    compiles the graph and is left out), steps ``profiled_from ..`` with it.
    """
    a = np.asarray(step_s, dtype=float)
    if not first_timed < profiled_from < a.shape[1]:
        raise ValueError(f"need unprofiled steps {first_timed}..{profiled_from - 1} and profiled ones after "
                         f"(job has {a.shape[1]} steps)")
    return typical_step_s(a[:, profiled_from:]) / typical_step_s(a[:, first_timed:profiled_from])


def fusion_split_indices(param_bytes, bucket_bytes: float) -> list[int]:
    """Split indices for ``comm_fusion={"allreduce": {"mode": "index", "config": [...]}}`` (the same as
    ``all_reduce_fusion_config``) that cut the gradients, in parameter order, into buckets of about
    ``bucket_bytes``: a bucket closes once it holds at least that much. ``[]`` means one bucket."""
    out, acc = [], 0.0
    n = len(param_bytes)
    for i, b in enumerate(param_bytes):
        acc += b
        if acc >= bucket_bytes and i + 1 < n:
            out.append(i + 1)
            acc = 0.0
    return out


# ---------------------------------------------------------------- which kernels carry what (chapter 04, section 5)
# The kernels that compute a model's convolutions, by ``conv_impl`` (helpers.train.im2col_conv). ``im2col`` rewrites
# only kernels larger than 1x1 (ResNet-18 at ci: 17 of 20 convolutions, measured per step on this machine):
# forward ``Im2Col`` (unfold) + ``BatchMatMul``; backward ``BatchMatMul`` + ``Col2Im`` for the input gradient and
# ``MatMul`` for the weight gradient (``MatMul`` also counts the classifier's three). The 1x1 convolutions (the
# downsample shortcuts) stay native ``Conv2D`` kernels, so under im2col the ``Conv2D*`` counts are those alone.
CONV_KERNELS = {"native": ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"),
                "im2col": ("Im2Col", "BatchMatMul", "MatMul", "Col2Im")}


def conv_kernel_types(conv_impl: str) -> tuple[str, ...]:
    """The kernel types that ran a job's convolutions: native ``Conv2D`` and its two backward kernels, plus
    im2col's unfold/MatMul kernels when ``conv_impl == "im2col"`` (its 1x1 convolutions stay native)."""
    if conv_impl == "native":
        return CONV_KERNELS["native"]
    if conv_impl == "im2col":
        return CONV_KERNELS["im2col"] + CONV_KERNELS["native"]
    raise ValueError(f"conv_impl must be 'native' or 'im2col' (resolved), got {conv_impl!r}")


def conv_kernels_note(conv_impl: str) -> str:
    """One sentence saying which kernels the chapter counts as convolution for this job."""
    if conv_impl == "native":
        return ("The convolutions ran on MindSpore's native kernel (`conv_impl='native'`): "
                "the convolution columns count `Conv2D`, `Conv2DBackpropInput` and `Conv2DBackpropFilter`.")
    return ("The convolutions larger than 1x1 ran as im2col + MatMul (`conv_impl='im2col'`): "
            "the convolution columns count `Im2Col`, `BatchMatMul`, `MatMul` (which also carries "
            "the classifier's three) and `Col2Im`; the `Conv2D*` columns count only the native 1x1 shortcut convolutions.")


def kernel_calls(types_table: dict, types) -> dict[str, float]:
    """Executions per step of each of ``types`` in a :meth:`JobProfile.kernel_types` table (0 if absent)."""
    return {t: float(types_table.get(t, (0.0, 0.0))[0]) for t in types}


def relative_to(step_s: dict, ref: str = "O0", noise: float = 0.15) -> dict:
    """Each entry's step time over ``ref``'s, and which were slower / faster / a tie (within ``noise``)."""
    rel = {k: v / step_s[ref] for k, v in step_s.items()}
    others = [k for k in step_s if k != ref]
    return dict(rel=rel, noise=noise, slower=[k for k in others if rel[k] > 1 + noise],
                faster=[k for k in others if rel[k] < 1 - noise],
                ties=[k for k in others if 1 - noise <= rel[k] <= 1 + noise])


def cpu_fp16_flags(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """This CPU's float16 instructions from its flags: arithmetic (``avx512_fp16``, ``amx_fp16``) and conversions
    only (``f16c``). Empty lists when the flags cannot be read (not Linux)."""
    try:
        flags = set(next(ln for ln in open(cpuinfo) if ln.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        flags = set()
    return dict(fp16_math=sorted(flags & {"avx512_fp16", "amx_fp16"}), f16c="f16c" in flags)


def isolate_compile_cache(cfg):
    """``cfg`` with a compile-cache folder of its own when it uses a chapter-04 switch that changes the graph.

    ``helpers.job.launch.compile_cache_dir`` keys the cache by the model's shape and ``comm_fusion``, not by
    ``amp_level``, ``grad_reduce`` or ``cell_comm_fusion``; MindSpore's cache checks the network's source
    files, which these switches do not change, so an O3 job could load an O0 graph. A suffix keeps them apart.
    """
    import hashlib

    from helpers.core.config import JobConfig
    from helpers.job.launch import compile_cache_dir

    keys = ("amp_level", "grad_reduce", "cell_comm_fusion")
    default = JobConfig()
    changed = {k: getattr(cfg, k) for k in keys if getattr(cfg, k) != getattr(default, k)}
    if not changed or not cfg.compile_cache:
        return cfg
    tag = hashlib.sha1(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:8]
    return cfg.replace(env={**cfg.env, "MS_COMPILER_CACHE_PATH": f"{compile_cache_dir(cfg)}-{tag}"})


# ---------------------------------------------------------------- one rank on disk
def rank_dirs(profile_dir: str | Path) -> dict[int, Path]:
    """rank -> that rank's profiler folder under ``<run_dir>/profile``.

    CPU / Ascend: one ``*_ascend_ms`` folder per rank, the rank read from its
    ``FRAMEWORK/cpu_op_execute_timestamp_<rank>.txt`` / ``cpu_framework_<rank>.txt`` / ``profiler_info_<rank>.json``
    file names. GPU: every rank's files (``gpu_op_type_info_<dev>.csv``, ``activity_execute_timestamp_<dev>.txt``)
    are in ``<run_dir>/profile`` itself, and those win over the host-only ``*_ascend_ms`` folder of the same rank.
    """
    profile_dir = Path(profile_dir)
    gpu = {}
    for pattern in ("gpu_op_type_info_*.csv", "activity_execute_timestamp_*.txt"):
        for f in sorted(profile_dir.glob(pattern)):
            gpu[int(re.search(r"_(\d+)\.\w+$", f.name).group(1))] = profile_dir
    out = {}
    for d in sorted(profile_dir.iterdir()) if profile_dir.is_dir() else []:
        if not d.is_dir():
            continue
        for pattern in ("FRAMEWORK/cpu_op_execute_timestamp_*.txt", "FRAMEWORK/cpu_framework_*.txt",
                        "profiler_info_*.json"):
            hits = sorted(d.glob(pattern))
            if hits:
                rank = int(re.search(r"_(\d+)\.\w+$", hits[0].name).group(1))
                if rank in out:
                    raise ValueError(f"two profiler folders for rank {rank}: {out[rank]} and {d}")
                out[rank] = d
                break
    out.update(gpu)
    return dict(sorted(out.items()))


def read_trace(path: str | Path) -> list[dict]:
    data = json.loads(Path(path).read_text())
    return data["traceEvents"] if isinstance(data, dict) else data


@dataclass
class RankProfile:
    rank: int
    folder: Path
    steps: list[StepBreakdown]
    step_events: list[list[OpEvent]]
    allreduce_elements: list[int] = field(default_factory=list)   # per call, one step
    type_table: dict[str, tuple[float, float]] = field(default_factory=dict)  # type -> (calls, ms) per step

    @property
    def trace_path(self) -> Path:
        return self.folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"


def read_op_type_table(path: str | Path) -> dict[str, tuple[int, float]]:
    """``{op type: (executions, total ms)}`` from a ``<device>_op_type_info_<rank>.csv`` table."""
    import csv

    with open(path, newline="") as f:
        return {row["op_type"]: (int(row["type_occurrences"]), float(row["total_compute_time"]))
                for row in csv.DictReader(f)}


def rank_from_op_table(folder: Path, rank: int, table: dict[str, tuple[int, float]], n_steps: int) -> RankProfile:
    """A rank's profile from per-type totals only (GPU): each profiled step gets 1/n of every total."""
    comm_ms = sum(ms for t, (_, ms) in table.items() if op_type(t) in COMM_OP_TYPES)
    all_ms = sum(ms for _, ms in table.values())
    reduce_calls = sum(n for t, (n, _) in table.items() if op_type(t) == "AllReduce")
    comm_calls = sum(n for t, (n, _) in table.items() if op_type(t) in COMM_OP_TYPES)
    kernels = sum(n for n, _ in table.values())
    step = StepBreakdown(math.nan, math.nan, (all_ms - comm_ms) / 1e3 / n_steps, comm_ms / 1e3 / n_steps, 0.0,
                         round(comm_calls / n_steps), round(reduce_calls / n_steps), round(kernels / n_steps))
    per_step = {t: (n / n_steps, ms / n_steps) for t, (n, ms) in table.items()}
    return RankProfile(rank, folder, [step] * n_steps, [[] for _ in range(n_steps)], [], per_step)


def read_rank(folder: str | Path, rank: int, n_steps: int | None = None, device_target: str = "CPU") -> RankProfile:
    folder = Path(folder)
    trace = folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    if device_target == "GPU":
        stamps = folder / f"activity_execute_timestamp_{rank}.txt"
        table = folder / f"gpu_op_type_info_{rank}.csv"
        if stamps.exists():
            events = parse_gpu_activity_timestamps(stamps.read_text().splitlines())
            try:
                steps = split_steps(events, n_steps)
            except ValueError:
                if not table.exists():
                    raise
                steps = []            # kernels not in whole steps (e.g. cut at the end): per-type totals below
            if steps:
                return RankProfile(rank, folder, [step_breakdown(s) for s in steps], steps, [])
        if not table.exists():
            raise FileNotFoundError(f"{table}: no GPU op table (was the job run with profile=True, and did it finish?)")
        return rank_from_op_table(folder, rank, read_op_type_table(table), n_steps or 1)
    if not trace.exists():
        raise FileNotFoundError(f"{trace}: no trace (was the job run with profile=True, and did it finish?)")
    steps = split_steps(device_op_events(read_trace(trace), device_target), n_steps)
    fw = folder / "FRAMEWORK" / f"cpu_framework_{rank}.txt"
    sizes = allreduce_elements(fw.read_text().splitlines(), len(steps)) if fw.exists() else []
    return RankProfile(rank, folder, [step_breakdown(s) for s in steps], steps, sizes)


# ---------------------------------------------------------------- a whole job
@dataclass
class JobProfile:
    """Every rank's profiled steps, joined with its own metrics (wall step time, data wait)."""

    run_dir: Path
    ranks: dict[int, RankProfile]
    profiled_steps: list[int]                    # step indices of the job that were profiled
    step_s: np.ndarray                           # (ranks x profiled steps), from the metrics files
    data_s: np.ndarray

    def _per_rank(self, attr: str) -> np.ndarray:
        return np.array([[getattr(s, attr) for s in self.ranks[r].steps] for r in sorted(self.ranks)], float)

    @property
    def compute_s(self) -> np.ndarray:
        return self._per_rank("compute_s")

    @property
    def comm_s(self) -> np.ndarray:
        return self._per_rank("comm_s")

    @property
    def other_s(self) -> np.ndarray:
        return np.clip(self.step_s - self.data_s - self.compute_s - self.comm_s, 0.0, None)

    @property
    def allreduce_per_step(self) -> int:
        calls = self._per_rank("allreduce_calls")
        if calls.min() != calls.max():
            seen = sorted(set(calls.ravel()))
            raise ValueError(f"AllReduce calls per step differ across ranks/steps: {seen}")
        return int(calls[0, 0])

    @property
    def comm_share(self) -> float:
        """Communication time over wall step time, mean of the ranks' shares."""
        return float(self.comm_share_per_rank.mean())

    @property
    def comm_share_per_rank(self) -> np.ndarray:
        return self.comm_s.mean(axis=1) / self.step_s.mean(axis=1)

    @property
    def reduced_mb_per_step(self) -> float:
        """Gradient data one rank hands to AllReduce per step (MB, 4-byte elements)."""
        return 4.0 * sum(self.ranks[min(self.ranks)].allreduce_elements) / 2**20

    @property
    def mean_bucket_mb(self) -> float:
        n = self.allreduce_per_step
        return self.reduced_mb_per_step / n if n else 0.0

    def kernel_types(self) -> dict[str, tuple[float, float]]:
        """Kernel type -> (executions per step, ms per step), means over ranks and profiled steps."""
        calls: Counter = Counter()
        ms: Counter = Counter()
        n = 0
        for rp in self.ranks.values():
            if rp.type_table:                     # GPU without a timeline: per-type totals, already per step
                n += 1
                for t, (c, m) in rp.type_table.items():
                    calls[op_type(t)] += c
                    ms[op_type(t)] += m
                continue
            for ev in rp.step_events:
                n += 1
                for e in ev:
                    calls[e.type] += 1
                    ms[e.type] += e.dur_us / 1e3
        return {t: (calls[t] / n, ms[t] / n) for t in sorted(calls, key=lambda t: -ms[t])}

    @property
    def has_timeline(self) -> bool:
        """False when only per-type op tables were read (a GPU job without ``activity_execute_timestamp_<dev>.txt``
        or whose kernels did not split into whole steps)."""
        return any(ev for rp in self.ranks.values() for ev in rp.step_events)

    def table(self) -> list[tuple]:
        """Per rank, means over the profiled steps: step, data, compute, comm, other (s), comm share."""
        rows = []
        for i, r in enumerate(sorted(self.ranks)):
            rows.append((r, float(self.step_s[i].mean()), float(self.data_s[i].mean()),
                         float(self.compute_s[i].mean()), float(self.comm_s[i].mean()),
                         float(self.other_s[i].mean()), float(self.comm_share_per_rank[i])))
        return rows

    TABLE_HEADERS = ("rank", "step (s)", "data wait (s)", "compute (s)", "communication (s)", "other (s)",
                     "comm share")

    def summary(self) -> dict:
        return dict(allreduce_per_step=self.allreduce_per_step, comm_share=self.comm_share,
                    step_s=float(self.step_s.mean()), compute_s=float(self.compute_s.mean()),
                    comm_s=float(self.comm_s.mean()), data_s=float(self.data_s.mean()),
                    reduced_mb_per_step=self.reduced_mb_per_step, mean_bucket_mb=self.mean_bucket_mb)


def read_job_profile(run) -> JobProfile:
    """Parse every rank of a profiled job. ``run`` is a ``JobResult`` or a run directory."""
    from helpers.job.launch import JobResult, load_result

    result = run if isinstance(run, JobResult) else load_result(run)
    cfg = result.config
    if not cfg.profile:
        raise ValueError(f"{result.run_dir}: the job ran with profile=False")
    folders = rank_dirs(result.run_dir / "profile")
    missing = [r for r in range(cfg.world_size) if r not in folders]
    if missing:
        raise FileNotFoundError(f"{result.run_dir / 'profile'}: no profiler output for ranks {missing}")
    profiled = list(range(cfg.profile_skip_steps, cfg.steps))
    ranks = {r: read_rank(folders[r], r, n_steps=len(profiled), device_target=cfg.device_target)
             for r in range(cfg.world_size)}
    step_s = result.metric("step_s")[:, profiled]
    data_s = result.metric("data_s")[:, profiled]
    return JobProfile(result.run_dir, ranks, profiled, step_s, data_s)


# ---------------------------------------------------------------- one trace for all ranks
def merge_trace_events(traces: dict[int, list[dict]], steps: dict[int, list[dict]] | None = None) -> dict:
    """One Chrome/Perfetto trace with a process per rank (pid = rank).

    Thread 0.. of each rank: its kernels (``CPU OP``); 100+: its scope layers; 1000: ``python step``, the
    step and data-wait spans from the rank's metrics records (``time`` = end of the step, epoch seconds).
    Times start at 0 = the earliest event of any rank; ``otherData.t0_epoch_us`` keeps the offset.
    """
    starts = [float(e["ts"]) for tr in traces.values() for e in tr if e.get("ph") == "X"]
    for recs in (steps or {}).values():
        starts += [1e6 * (r["time"] - r["step_s"]) for r in recs]
    t0 = min(starts) if starts else 0.0
    out = []
    for rank in sorted(traces):
        names = process_names(traces[rank])
        tid_base = {pid: (0 if n in OP_PROCESSES else 100 * (1 + i))
                    for i, (pid, n) in enumerate(sorted(names.items()))}
        out.append(dict(ph="M", name="process_name", pid=rank, tid=0, args=dict(name=f"rank {rank}")))
        out.append(dict(ph="M", name="process_sort_index", pid=rank, tid=0, args=dict(sort_index=rank)))
        threads = {}
        for e in traces[rank]:
            tid = tid_base.get(e.get("pid"), 900) + int(e.get("tid", 0))
            if e.get("ph") == "X":
                ev = dict(e, pid=rank, tid=tid, ts=float(e["ts"]) - t0, dur=float(e.get("dur", 0.0)))
                out.append(ev)
                threads.setdefault(tid, f"{names.get(e.get('pid'), 'trace')} {e.get('tid', 0)}")
        for tid, label in sorted(threads.items()):
            out.append(dict(ph="M", name="thread_name", pid=rank, tid=tid, args=dict(name=label)))
            out.append(dict(ph="M", name="thread_sort_index", pid=rank, tid=tid, args=dict(sort_index=tid)))
        recs = (steps or {}).get(rank, [])
        if recs:
            out.append(dict(ph="M", name="thread_name", pid=rank, tid=1000, args=dict(name="python step")))
            out.append(dict(ph="M", name="thread_sort_index", pid=rank, tid=1000, args=dict(sort_index=-1)))
        for r in recs:
            begin = 1e6 * (r["time"] - r["step_s"]) - t0
            out.append(dict(ph="X", name=f"step {r['step']}", pid=rank, tid=1000, ts=begin,
                            dur=1e6 * r["step_s"], cat="step",
                            args=dict(loss=r.get("loss"), data_s=r.get("data_s"))))
            if r.get("data_s"):
                out.append(dict(ph="X", name="data wait", pid=rank, tid=1000, ts=begin, dur=1e6 * r["data_s"],
                                cat="data"))
    return dict(traceEvents=out, displayTimeUnit="ms", otherData=dict(t0_epoch_us=t0, ranks=sorted(traces)))


def events_trace(events: list[OpEvent], process: str = "GPU") -> list[dict]:
    """A Chrome trace (one process) from kernel executions, e.g. a GPU rank's activity timestamps."""
    return ([dict(ph="M", name="process_name", pid=0, tid=0, args=dict(name=process))]
            + [dict(ph="X", name=e.name, pid=0, tid=0, ts=e.start_us, dur=e.dur_us) for e in events])


def _rank_trace(folder: Path, rank: int) -> list[dict]:
    trace = folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    stamps = folder / f"activity_execute_timestamp_{rank}.txt"
    if not trace.exists() and stamps.exists():      # GPU: no trace_view.json, the device kernels' timestamps
        return events_trace(parse_gpu_activity_timestamps(stamps.read_text().splitlines()))
    return read_trace(trace)


def write_merged_trace(run, out: str | Path | None = None) -> Path:
    """Merge every rank's ``trace_view.json`` (and its step records) into ``<run_dir>/merged_trace.json``.

    Open it at https://ui.perfetto.dev or chrome://tracing: one process per rank.
    """
    from helpers.job.launch import JobResult, load_result

    result = run if isinstance(run, JobResult) else load_result(run)
    folders = rank_dirs(result.run_dir / "profile")
    if not folders:
        raise FileNotFoundError(f"{result.run_dir / 'profile'}: no profiler output")
    traces = {r: _rank_trace(d, r) for r, d in folders.items()}
    skip = result.config.profile_skip_steps
    steps = {r: [x for x in result.steps.get(r, []) if x["step"] >= skip] for r in folders}
    path = Path(out) if out else result.run_dir / "merged_trace.json"
    path.write_text(json.dumps(merge_trace_events(traces, steps)))
    return path


# ---------------------------------------------------------------- figures
COLORS = dict(compute="#4c72b0", comm="#c44e52", data="#8c8c8c", other="#dddddd")


def plot_rank_breakdown(profiles: dict, title: str = "where each rank's step goes (profiled steps)"):
    """Stacked bars per rank (compute / communication / data wait / other), one panel per job profile."""
    import matplotlib.pyplot as plt

    n = len(profiles)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.2), sharey=True, squeeze=False)
    for ax, (label, jp) in zip(axes[0], profiles.items()):
        ranks = np.array(sorted(jp.ranks))
        bottom = np.zeros(len(ranks))
        for key, values, name in (("compute", jp.compute_s, "compute"), ("comm", jp.comm_s, "communication"),
                                  ("data", jp.data_s, "data wait"), ("other", jp.other_s, "other")):
            v = values.mean(axis=1)
            ax.bar(ranks, v, bottom=bottom, color=COLORS[key], label=name)
            bottom += v
        ax.set(xlabel="rank",
               title=f"{label}: comm {jp.comm_share:.0%}, {jp.allreduce_per_step} AllReduce/step")
        ax.set_xticks(ranks)
        ax.title.set_fontsize(9)
    axes[0][0].set_ylabel("seconds per step")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_step_timeline(jp: JobProfile, step: int = -1, title: str | None = None, ax=None):
    """One profiled step on every rank on a shared clock: data wait, compute and communication kernels."""
    import matplotlib.pyplot as plt

    if not jp.has_timeline:
        raise ValueError(f"{jp.run_dir}: no kernel timeline (GPU: only the per-type op tables could be read)")
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(9, 0.35 * len(jp.ranks) + 1.2))
    k = step % len(jp.profiled_steps)
    ranks = sorted(jp.ranks)
    t0 = min(jp.ranks[r].steps[k].start_us for r in ranks)
    for i, r in enumerate(ranks):
        ev = jp.ranks[r].step_events[k]
        first = jp.ranks[r].steps[k].start_us
        data = jp.data_s[i, k]
        if data > 0:
            ax.broken_barh([((first - t0) / 1e3 - data * 1e3, data * 1e3)], (r - 0.4, 0.8),
                           color=COLORS["data"])
        for key, sel in (("compute", [e for e in ev if not e.comm]), ("comm", [e for e in ev if e.comm])):
            bars = [((e.start_us - t0) / 1e3, max(e.dur_us / 1e3, 0.01)) for e in sel]
            ax.broken_barh(bars, (r - 0.4, 0.8), color=COLORS[key])
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=COLORS["compute"], label="compute kernels"),
                       Patch(color=COLORS["comm"], label="communication kernels"),
                       Patch(color=COLORS["data"], label="data wait (metrics)")],
              fontsize=7, loc="upper right")
    ax.set(xlabel="ms (shared clock)", ylabel="rank", yticks=ranks,
           title=title or f"profiled step {jp.profiled_steps[k]} across {len(ranks)} ranks")
    ax.invert_yaxis()
    if own:
        ax.figure.tight_layout()
    return ax.figure


def plot_fusion_sweep(rows: list[dict], title: str = "communication fusion: step time vs bucket size"):
    """Two panels from sweep rows (``label``, ``bucket_mb``, ``allreduce_per_step``, ``step_s``): step time vs
    mean bucket size (log x), and step time vs AllReduce calls per step."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    for row in rows:
        for ax, x in ((a, row["bucket_mb"]), (b, row["allreduce_per_step"])):
            ax.scatter([x], [row["step_s"]], s=30)
            ax.annotate(row["label"], (x, row["step_s"]), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
    a.set(xscale="log", xlabel="mean AllReduce size (MB, measured)", ylabel="step time (s, no profiler)")
    b.set(xscale="log", xlabel="AllReduce calls per step (measured)", ylabel="step time (s, no profiler)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
