"""One Chrome/Perfetto trace of a whole job: every rank's kernels and its step spans on a shared clock."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.job.launch import JobResult, load_result
from helpers.topics.kernel_trace import OP_PROCESSES, OpEvent, parse_gpu_activity_timestamps, process_names
from helpers.topics.rank_profile import rank_dirs, read_trace


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


def rank_trace(folder: Path, rank: int) -> list[dict]:
    """One rank's trace events: its ``trace_view.json``, or on GPU a trace made from its kernel timestamps."""
    trace = folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    stamps = folder / f"activity_execute_timestamp_{rank}.txt"
    if not trace.exists() and stamps.exists():      # GPU: no trace_view.json, the device kernels' timestamps
        return events_trace(parse_gpu_activity_timestamps(stamps.read_text().splitlines()))
    return read_trace(trace)


def write_merged_trace(run, out: str | Path | None = None) -> Path:
    """Merge every rank's ``trace_view.json`` (and its step records) into ``<run_dir>/merged_trace.json``.

    Open it at https://ui.perfetto.dev or chrome://tracing: one process per rank.
    """
    result = run if isinstance(run, JobResult) else load_result(run)
    folders = rank_dirs(result.run_dir / "profile")
    if not folders:
        raise FileNotFoundError(f"{result.run_dir / 'profile'}: no profiler output")
    traces = {r: rank_trace(d, r) for r, d in folders.items()}
    skip = result.config.profile_skip_steps
    steps = {r: [x for x in result.steps.get(r, []) if x["step"] >= skip] for r in folders}
    path = Path(out) if out else result.run_dir / "merged_trace.json"
    path.write_text(json.dumps(merge_trace_events(traces, steps)))
    return path
