"""The small family of errors a course user may catch and read.

``ConfigError`` and ``DataError`` name the field or the file at fault. ``JobFailed`` carries the ``kind``
of failure (``FAILURE_KINDS``), the failing rank and the tail of its log.
"""

from __future__ import annotations

FAILURE_KINDS = ("crash", "oom", "killed", "hang", "timeout", "interrupted")

# How MindSpore's CPU pool, oneDNN and Python say memory ran out, and the device allocators' texts found in the
# 2.10 wheel's own libraries (libmindspore_ms_backend, libmindspore_gpu.so.11.x, libmindspore_ops_ascend).
OOM_MARKERS = ("memory not enough", "memoryerror", "could not create a primitive", "out of memory",
               "memory isn't enough", "allocate device memory failed", "cublas_status_alloc_failed",
               "cudaerrormemoryallocation", "malloc mem from mem pool failed",
               # PyNative's CPU pool (op_runner.cc MallocForKernelOutput, cpu_memory_pool.cc AllocDeviceMem)
               "allocate output memory failed", "allocate memory failed", "malloc memory failed")


def failure_kind(text: str) -> str:
    """``oom`` when the error text is one of the ways MindSpore/oneDNN report exhausted memory."""
    low = text.lower()
    return "oom" if any(m in low for m in OOM_MARKERS) else "crash"


class CourseError(Exception):
    """Base class of every error the helpers raise on purpose."""


class ConfigError(CourseError, ValueError):
    """A configuration value is invalid; the message names the field."""


class DataError(CourseError):
    """The data directory or one of its files is unusable; the message names the path."""


class JobFailed(CourseError):
    """A launched job did not finish: ``kind`` says how, ``rank`` where (None when not one rank's fault)."""

    def __init__(self, kind: str, message: str, rank: int | None = None, log_tail: str = "",
                 run_dir: str | None = None):
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}")
        self.kind = kind
        self.rank = rank
        self.log_tail = log_tail
        self.run_dir = run_dir
        where = f" on rank {rank}" if rank is not None else ""
        text = f"job {kind}{where}: {message}"
        if run_dir:
            text += f"\n  run directory (logs kept): {run_dir}"
        if log_tail:
            text += "\n  --- tail of the log ---\n" + "\n".join("  " + ln for ln in log_tail.splitlines())
        super().__init__(text)
