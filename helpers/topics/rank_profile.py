"""Where each rank's profiler output is on disk, and one rank read into profiled steps.

CPU and Ascend: a job run with ``profile=True`` leaves per rank a folder
``<run_dir>/profile/<host>_<pid>_<stamp>_ascend_ms/`` with ``ASCEND_PROFILER_OUTPUT/trace_view.json``
(:mod:`helpers.topics.kernel_trace`) and ``FRAMEWORK/`` (``cpu_framework_<rank>.txt`` and the op tables); the
rank is only in these file names. GPU (MindSpore 2.10): a job gets no ``trace_view.json``; the GPU plugin writes
``gpu_op_type_info_<dev>.csv``, ``activity_execute_timestamp_<dev>.txt`` (one line per kernel execution,
``kernel_name;stream_id;start_ns;duration_us``) and more straight into ``<run_dir>/profile/``, keyed by the CUDA
device id (= the rank on one node). :func:`read_rank` builds the GPU timeline from the timestamps and takes the
per-type counts of MindSpore ops from the op table (also the breakdown's fallback); :func:`rank_dirs` prefers the
GPU files for a rank that also has a host-side ``*_ascend_ms``.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from helpers.topics.kernel_trace import (COMM_OP_TYPES, OpEvent, StepBreakdown, allreduce_elements,
                                         device_op_events, op_type, parse_gpu_activity_timestamps, split_steps,
                                         step_breakdown)


def rank_dirs(profile_dir: str | Path) -> dict[int, Path]:
    """rank -> that rank's profiler folder under ``<run_dir>/profile``.

    CPU / Ascend: one ``*_ascend_ms`` folder per rank, the rank read from its
    ``FRAMEWORK/cpu_op_execute_timestamp_<rank>.txt`` / ``cpu_framework_<rank>.txt`` / ``profiler_info_<rank>.json``
    file names. GPU: every rank's files (``gpu_op_type_info_<dev>.csv``, ``activity_execute_timestamp_<dev>.txt``)
    are in ``<run_dir>/profile`` itself, and those win over the host-only ``*_ascend_ms`` folder of the same rank.
    """
    profile_dir = Path(profile_dir)
    gpu = {}
    for pattern in (f"gpu{OP_TYPE_TABLE}*.csv", f"gpu{OP_DETAIL_TABLE}*.csv", "activity_execute_timestamp_*.txt"):
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
    """The events of a Chrome trace file (a bare list or ``{"traceEvents": [...]}``)."""
    data = json.loads(Path(path).read_text())
    return data["traceEvents"] if isinstance(data, dict) else data


@dataclass
class RankProfile:
    """One rank's profiled steps: per-step breakdown, kernel events, AllReduce sizes, op table."""

    rank: int
    folder: Path
    steps: list[StepBreakdown]
    step_events: list[list[OpEvent]]
    allreduce_elements: list[int] = field(default_factory=list)   # per call, one step
    type_table: dict[str, tuple[float, float]] = field(default_factory=dict)  # type -> (calls, ms) per step

    @property
    def trace_path(self) -> Path:
        return self.folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"


# The op tables' headers, as MindSpore 2.10 writes them (lib/libmindspore_profiler.so, ccsrc/tools/profiler/
# data_saver.cc: OpType / OpDetailInfo ``GetCpuHeader`` / ``GetGpuHeader``; tests/contract/test_profiler_formats.py
# pins each). The CPU type table counts milliseconds, the GPU one microseconds; on GPU ``op_type`` is the MindSpore
# primitive (the full op name's last scope, "-op<n>" cut), while the kernel timeline has CUDA kernel names.
CPU_OP_TYPE_HEADER = "op_type,type_occurrences,execution_frequency(per-step),total_compute_time,avg_time(ms),percent"
GPU_OP_TYPE_HEADER = "op_type,type_occurrences,total_time(us),total_proportion,avg_time(us)"
GPU_OP_DETAIL_HEADER = ("op_side,op_type,op_name,op_full_name,op_occurrences,op_total_time(us),op_avg_time(us),"
                        "total_proportion,cuda_activity_cost_time(us),cuda_activity_call_count")
OP_TYPE_TABLE, OP_DETAIL_TABLE = "_op_type_info_", "_op_detail_info_"     # <device><this><dev id>.csv
# header -> (type column, count column, time column, milliseconds per unit of the time column)
OP_TABLE_COLUMNS = {
    CPU_OP_TYPE_HEADER: ("op_type", "type_occurrences", "total_compute_time", 1.0),
    GPU_OP_TYPE_HEADER: ("op_type", "type_occurrences", "total_time(us)", 1e-3),
    GPU_OP_DETAIL_HEADER: ("op_type", "op_occurrences", "op_total_time(us)", 1e-3),
}


def gpu_table(folder: Path, rank: int, kind: str = OP_TYPE_TABLE) -> Path:
    """``<folder>/gpu_op_type_info_<rank>.csv`` (or the ``OP_DETAIL_TABLE``)."""
    return Path(folder) / f"gpu{kind}{rank}.csv"


def read_op_type_table(path: str | Path) -> dict[str, tuple[int, float]]:
    """``{op type: (executions, total ms)}`` from an op type table or a GPU op detail table (summed by type), in
    whichever of ``OP_TABLE_COLUMNS``' layouts its header has."""
    with open(path, newline="") as f:
        header = f.readline().strip()
        if header not in OP_TABLE_COLUMNS:
            raise ValueError(f"{path}: unknown op table header {header!r} (known: {sorted(OP_TABLE_COLUMNS)})")
        kind, count, time, ms_per_unit = OP_TABLE_COLUMNS[header]
        out: dict[str, tuple[int, float]] = {}
        for row in csv.DictReader(f, fieldnames=header.split(",")):
            n, ms = out.get(row[kind], (0, 0.0))
            out[row[kind]] = (n + int(row[count]), ms + float(row[time]) * ms_per_unit)
    return out


def read_gpu_op_types(folder: Path, rank: int) -> dict[str, tuple[int, float]] | None:
    """A GPU rank's per-type totals: its op type table, else its op detail table, else None."""
    for kind in (OP_TYPE_TABLE, OP_DETAIL_TABLE):
        if gpu_table(folder, rank, kind).exists():
            return read_op_type_table(gpu_table(folder, rank, kind))
    return None


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
    """Read one rank's profiler folder into steps (GPU: its timestamp file, else the op table). AllReduce sizes
    only on CPU: on a card the collectives run on the device, which the host's framework file does not see."""
    folder = Path(folder)
    if device_target == "GPU":
        return read_gpu_rank(folder, rank, n_steps)
    trace = folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    if not trace.exists():
        raise FileNotFoundError(f"{trace}: no trace (was the job run with profile=True, and did it finish?)")
    steps = split_steps(device_op_events(read_trace(trace), device_target), n_steps)
    fw = folder / "FRAMEWORK" / f"cpu_framework_{rank}.txt"
    sizes = (allreduce_elements(fw.read_text().splitlines(), len(steps))
             if device_target == "CPU" and fw.exists() else [])
    return RankProfile(rank, folder, [step_breakdown(s) for s in steps], steps, sizes)


def read_gpu_rank(folder: Path, rank: int, n_steps: int | None = None) -> RankProfile:
    """A GPU rank: the kernel timeline from its timestamp file (CUDA kernel names) and the per-type counts of
    MindSpore ops from its op table; the op table alone when the timeline does not split into whole steps."""
    stamps = folder / f"activity_execute_timestamp_{rank}.txt"
    table = read_gpu_op_types(folder, rank)
    steps = []
    if stamps.exists():
        events = parse_gpu_activity_timestamps(stamps.read_text().splitlines())
        try:
            steps = split_steps(events, n_steps)
        except ValueError:
            if table is None:
                raise
            # kernels not in whole steps (e.g. cut at the end): per-type totals below
    if table is None:
        if steps:
            return RankProfile(rank, folder, [step_breakdown(s) for s in steps], steps, [])
        raise FileNotFoundError(f"{gpu_table(folder, rank)}: no GPU op table (was the job run with profile=True, "
                                "and did it finish?)")
    n = len(steps) or n_steps or 1
    if not steps:
        return rank_from_op_table(folder, rank, table, n)
    per_step = {t: (c / n, ms / n) for t, (c, ms) in table.items()}
    return RankProfile(rank, folder, [step_breakdown(s) for s in steps], steps, [], per_step)
