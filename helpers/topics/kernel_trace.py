"""One rank's kernel executions from a profiler trace: named, split into steps, summed into compute / communication / idle.

On CPU ``ASCEND_PROFILER_OUTPUT/trace_view.json`` is a Chrome trace: process ``CPU OP`` has one ``"ph": "X"``
event per kernel execution, named by its full scope, with ``ts``/``dur`` in microseconds as strings (``ts`` on
the clock of ``time.time()``); ``FRAMEWORK/cpu_framework_<rank>.txt`` has each kernel execution's input shapes,
the source of the bytes each AllReduce moves. There are no step markers: a GRAPH_MODE step runs every kernel of
the graph once, so the k-th execution of each kernel belongs to the k-th profiled step (:func:`split_steps`).
Per step ``comm`` is the time inside communication kernels (on CPU including the wait for the slowest rank),
``compute`` inside every other kernel, ``idle`` the gaps. On Ascend only the ``hcom_*`` rows of process ``HCCL``
count as communication, so a collective is counted once, and a device kernel also names the framework op it ran
for (:attr:`OpEvent.op`); GPU kernels come from :func:`parse_gpu_activity_timestamps`.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass


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

_SHAPE = re.compile(r"input_\d+:\[([0-9, ]*)\]")

# Ascend: a device kernel row's args name the framework op that launched it, "<module>::<event>::<full op name>"
# (e.g. "Kernel::KernelLaunch::Default/network/Conv2D-op12"): profiler/analysis/parser/timeline_event/msprof_event.py
# (``_MINDSPORE_OP_KEY``) sets it to the parent's name, built in fwk_event.py ``get_name``; the same parent makes
# kernel_details.csv's "<framework op>/<device kernel>" names (analysis/viewer/ascend_kernel_details_viewer.py).
FRAMEWORK_OP_ARG = "mindspore_op"
FRAMEWORK_NAME_SEP = "::"


def op_type(name: str) -> str:
    """``Default/grad_reducer-DistributedGradReducer/AllReduce-op39`` -> ``AllReduce``; device collective kernels
    (``hcom_allReduce__101_0_1``, ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``) -> their collective."""
    leaf = _OP_SUFFIX.sub("", name.rsplit("/", 1)[-1])
    m = _DEVICE_COMM.match(leaf)
    if m and m.group(1).lower() in _COMM_CANON:
        return _COMM_CANON[m.group(1).lower()]
    return leaf


def is_comm(name: str) -> bool:
    """Whether a kernel name is a communication kernel (AllReduce and friends)."""
    return op_type(name) in COMM_OP_TYPES


def framework_op_type(framework: str) -> str:
    """``Kernel::KernelLaunch::Default/network/Conv2D-op12`` (an Ascend kernel's framework op) -> ``Conv2D``."""
    return op_type(framework.rsplit(FRAMEWORK_NAME_SEP, 1)[-1])


@dataclass(frozen=True)
class OpEvent:
    """One kernel execution: full scope name, start and duration in microseconds (epoch clock); ``framework``: the
    framework op that launched it when the name is a device kernel's (Ascend), which then gives its :attr:`op`."""

    name: str
    start_us: float
    dur_us: float
    framework: str = ""

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us

    @property
    def type(self) -> str:
        """The kernel's own type (what the step breakdown sorts into compute and communication)."""
        return op_type(self.name)

    @property
    def op(self) -> str:
        """The MindSpore op it ran for: the framework op's type when known (Ascend), else :attr:`type`."""
        return framework_op_type(self.framework) if self.framework else self.type

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
    out = [OpEvent(e["name"], float(e["ts"]), float(e.get("dur", 0.0)),
                   str((e.get("args") or {}).get(FRAMEWORK_OP_ARG, ""))) for e in trace
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


BACKWARD_SCOPE = "Gradients"    # MindSpore's scope of the backward pass in a kernel's full name


def comm_overlap(events: list[OpEvent]) -> dict:
    """One profiled step: how much of its communication kernels' time overlapped other kernels (ms), and how many
    backward kernels ran after its first collective started (an AllReduce issued as soon as its gradient is ready
    runs between backward kernels; overlap needs them to run at the same time)."""
    comm = [(e.start_us, e.start_us + e.dur_us) for e in events if is_comm(e.name)]
    other = [(e.start_us, e.start_us + e.dur_us) for e in events if not is_comm(e.name)]
    first = min((a for a, _ in comm), default=math.inf)
    backward = [e for e in events if BACKWARD_SCOPE in e.name and not is_comm(e.name)]
    c, o = union_length(comm), union_length(other)
    return dict(comm_ms=c / 1e3, compute_ms=o / 1e3, overlap_ms=(c + o - union_length(comm + other)) / 1e3,
                backward_kernels=len(backward), backward_after_first_comm=sum(e.start_us > first for e in backward))

