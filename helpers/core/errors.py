"""The small family of errors a course user may catch and read.

``ConfigError`` and ``DataError`` name the field or the file at fault. ``JobFailed`` carries the ``kind``
of failure (``FAILURE_KINDS``), the failing rank and the tail of its log.
"""

from __future__ import annotations

FAILURE_KINDS = ("crash", "oom", "killed", "hang", "timeout", "interrupted", "node_lost")

# How memory running out reads in a failed rank's error, as (text, where the installed 2.10 wheel holds it): a path
# under ``mindspore/`` (``tests/contract/test_oom_texts.py`` pins each there, case kept; ``failure_kind`` matches
# them case-insensitively), or None for a text that comes from outside the wheel, with its source named.
OOM_TEXTS = (
    # CPU: the memory pool, PyNative's pool (op_runner.cc MallocForKernelOutput, cpu_memory_pool.cc AllocDeviceMem),
    # oneDNN when the cap bites inside a primitive, and Python's MemoryError (pybind11's std::bad_alloc)
    ("Memory not enough", "lib/libmindspore_memory_pool.so"),
    ("Allocate output memory failed", "lib/libmindspore_pynative_utils.so"),
    ("malloc memory failed", "lib/libmindspore_cpu.so"),
    ("could not create a primitive", "lib/plugin/libmindspore_ops_cpu.so"),
    ("MemoryError", "lib/libmindspore_pynative.so"),
    # every device: the runtime's actors, memory pool and kernel launches
    ("memory isn't enough", "lib/libmindspore_ms_backend.so"),
    ("Allocate memory failed", "lib/libmindspore_ms_backend.so"),
    ("allocate somas whole block memory failed", "lib/libmindspore_ms_backend.so"),
    ("Allocate continuous memory failed", "lib/libmindspore_ms_backend.so"),
    ("Allocate memory for copy data task failed", "lib/libmindspore_ms_backend.so"),
    ("Exit for OOM", "lib/libmindspore_ms_backend.so"),
    ("Memory pool not enough", "lib/libmindspore_ge_backend.so"),
    ("GE Allocator malloc addr failed", "lib/libmindspore_ge_backend.so"),
    ("Alloc device mem failed", "lib/libmindspore_memory_pool.so"),
    ("Malloc mem block failed", "lib/libmindspore_memory_pool.so"),
    ("workspace memory failed", "lib/libmindspore_pyboost.so"),
    ("Alloc workspace failed", "lib/libmindspore_pyboost.so"),
    # GPU: the allocator, CUDA runtime and library status texts, data queue, and single kernels' scratch buffers
    ("Allocate device memory failed", "lib/plugin/libmindspore_gpu.so.11.6"),
    ("cudaMalloc failed", "lib/plugin/libmindspore_gpu.so.11.6"),
    ("cudaHostAlloc failed", "lib/plugin/libmindspore_gpu.so.11.6"),
    ("Allocate Data Queue Memory Failed", "lib/plugin/libmindspore_gpu.so.11.6"),
    ("CUBLAS_STATUS_ALLOC_FAILED", "lib/plugin/libmindspore_gpu.so.11.6"),
    ("Memory allocation failed", "lib/plugin/libmindspore_gpu.so.11.6"),    # curand's CURAND_STATUS_ALLOCATION_FAILED
    ("GPU memory alloca failed", "lib/plugin/libmindspore_gpu.so.11.6"),
    ("memory of work alloc failed", "lib/plugin/libmindspore_gpu.so.11.6"),
    ("memory of d_work alloc failed", "lib/plugin/libmindspore_gpu.so.11.6"),
    ("Malloc slice data failed", "lib/plugin/libmindspore_gpu.so.11.6"),
    ("Malloc slice index data failed", "lib/plugin/libmindspore_gpu.so.11.6"),
    # the CUDA runtime's name and text for cudaErrorMemoryAllocation (the plugin prints cudaGetErrorString after
    # "cudaMalloc failed, ret[2], "); the plugin links libcudart dynamically, the bundled NCCL holds cudart's table
    ("cudaErrorMemoryAllocation", "lib/plugin/gpu11.6/libnccl.so.2"),
    ("out of memory", "lib/plugin/gpu11.6/libnccl.so.2"),
    # cuDNN's documented status name: the plugin writes "cuDNN Error: ... | Error Number: <status> " followed by
    # cudnnGetErrorString(status), so the text comes from libcudnn.so.8, which the wheel does not bundle
    ("CUDNN_STATUS_ALLOC_FAILED", None),
    # Ascend: the device allocator (ascend_memory_adapter, ACL runtime table's ACL_ERROR_RT_MEMORY_ALLOCATION text),
    # pinned host memory, the kernels' pool, and the collective library's buffers
    ("Alloc device memory failed", "lib/plugin/ascend/libmindspore_ascend_res_manager.so"),   # and "Malloc device..."
    ("memory is not enough", "lib/plugin/ascend/libmindspore_ascend_res_manager.so"),
    ("Malloc physical memory failed", "lib/plugin/ascend/libmindspore_ascend_res_manager.so"),
    ("Allocate device memory of data queue failed", "lib/plugin/ascend/libmindspore_ascend_res_manager.so"),
    ("Allocate pin memory failed", "lib/plugin/ascend/libmindspore_ascend_res_manager.so"),
    ("Allocate symmetric memory failed", "lib/plugin/ascend/libmindspore_ascend_res_manager.so"),
    ("aclrtMallocHost failed", "lib/plugin/ascend/libmindspore_ascend_res_manager.so"),
    ("memory allocation error", "lib/plugin/ascend/libmindspore_ascend_res_manager.so"),
    ("Malloc Mem From Mem Pool failed", "lib/plugin/libmindspore_ops_ascend.so"),
    ("Alloc failed, size:", "lib/plugin/libmindspore_ascend.so.2"),
    ("aclrtMalloc for", "lib/plugin/ascend/libd_collective.so"),
    ("aclrtMallocHost for", "lib/plugin/ascend/libd_collective.so"),
)
# Left out on purpose: "Somas allocate failed for graph" (the memory planner's solver failed, not the device),
# "resource alloc fail" (ACL's streams/events), "Allocation failed" (also in pybind11's "instance allocation
# failed"), the pool's retries ("AllocDeviceMemByEagerFree failed", "Alloc tensor mem failed and try to sync all
# events"), which may still succeed, and two kernels' host buffers worded with their variable names.
OOM_MARKERS = tuple(text.lower() for text, _ in OOM_TEXTS)
# Texts that contain a marker but do not mean memory ran out: oneDNN's "could not create a primitive descriptor
# for the <op> primitive" is an unsupported shape or layout (libdnnl.so.3, lib/plugin/libmindspore_ops_cpu.so).
OOM_LOOKALIKES = (("could not create a primitive descriptor", "lib/plugin/libmindspore_ops_cpu.so"),)
# MindSpore's log lines start with their level ("[WARNING] DEVICE(pid,...)", mindspore/log.py's formatter): a
# warning or note in a log tail ("It may lead to Out Of Memory in HCCL", a retried allocation) is not the failure.
QUIET_LOG_LEVELS = ("[DEBUG]", "[INFO]", "[WARNING]")


# Under an address-space cap (RLIMIT_AS) a thread's stack is memory like any other: when the cap is reached as
# MindSpore starts a thread, pthread_create fails with EAGAIN and the error is libc's strerror text (chapter 03's
# capped data-parallel job, at graph compile). Without a cap the same text may be a thread limit: not read then.
CAPPED_OOM_TEXTS = ("Resource temporarily unavailable",)


def failure_kind(text: str, capped: bool = False) -> str:
    """``oom`` when the error text is one of the ways MindSpore, its device libraries, oneDNN or Python report
    exhausted memory (``OOM_TEXTS``; with ``capped``, a rank under an address-space cap, also ``CAPPED_OOM_TEXTS``),
    else ``crash``; MindSpore's warning and info log lines are not read."""
    lines = (ln for ln in text.splitlines() if not ln.lstrip().startswith(QUIET_LOG_LEVELS))
    low = "\n".join(lines).lower()
    for lookalike, _ in OOM_LOOKALIKES:
        low = low.replace(lookalike, " ")
    markers = OOM_MARKERS + (tuple(t.lower() for t in CAPPED_OOM_TEXTS) if capped else ())
    return "oom" if any(m in low for m in markers) else "crash"


CPP_STACK_HEADER = "- C++ Call Stack: (For framework developers)"   # MindSpore's error texts end with this section


def readable_error(text: str) -> str:
    """A MindSpore error as a learner reads it: its section rules and its C++ call stack left out (the rank's log and
    the failure record's traceback keep them)."""
    out, in_stack = [], False
    for line in text.splitlines():
        if line.strip() == CPP_STACK_HEADER:
            in_stack = True
        elif in_stack and not line.strip():
            in_stack = False
        elif not in_stack and not (line.strip() and set(line.strip()) == {"-"}):
            out.append(line)
    return "\n".join(out).strip()


class CourseError(Exception):
    """Base class of every error the helpers raise on purpose."""


class CellError(CourseError):
    """A notebook cell cannot run on the ranks (syntax, an undefined or unpicklable name); nothing was launched."""


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
