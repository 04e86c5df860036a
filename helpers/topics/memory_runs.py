"""Measured memory of training, to set next to ``helpers.core.memory_planner``'s predictions (chapter 02).

On CPU ``mindspore.runtime.max_memory_allocated()`` returns 0, so memory is measured from the operating system:
RSS and VMS per process; on GPU/Ascend the ranks also record the device allocator's figures. ``job_memory`` reads
a finished job: per-rank peaks and "activation" memory = the peak minus the memory before the first step (device
memory on a card, RSS on CPU, where it also holds what compilation leaves behind: compare jobs with the same
compile-cache state). ``measure_step_memory`` runs one model's steps in a fresh subprocess (the notebook
kernel never builds a graph) and reads the peak RSS of the steady steps only; ``sweep`` and ``fit_slope`` give
the measured MiB per image of batch, which the planner's ``activation_bytes_per_image`` (+ workspace) predicts.
``mem_cap_mb`` is an ``RLIMIT_AS`` cap: it counts virtual memory, which MindSpore's CPU memory pool reserves in
1 GiB blocks, so ``cap_below`` places a cap under a measured run's peak.
"""

from __future__ import annotations

import os

import numpy as np

MIB = 2 ** 20


# ----------------------------------------------------------------------------------------- from a job
# What a job's memory figures are, by what measured them: the device allocator on GPU/Ascend, RSS on CPU
MEMORY_LABELS = {"device": "peak device memory", "rss": "peak RSS"}
BASELINE_LABELS = {"device": "device memory before the first step", "rss": "RSS before the first step"}


def job_memory(result) -> dict:
    """Per-rank memory of a finished job, in MiB: lists indexed by rank, plus the worst rank.

    Host, always: ``peak_rss`` (the largest ``rss_peak_mb``, its ``ru_maxrss``), ``ready_rss`` (RSS before the
    first step), ``vms_peak`` (the largest virtual size). ``memory`` says what the chapter's figures measure:
    ``"device"`` where the ranks recorded the device allocator (GPU/Ascend: ``device_peak_mb``, its
    ``max_memory_allocated`` since the ready point, against ``device_mb`` there), else ``"rss"``. ``peak``,
    ``ready`` and ``activation`` (their difference) are in that measure, so are ``max_peak``/``max_activation``.
    """
    from helpers.core.metrics import metrics_path, read_records

    ready = []
    for r in sorted(result.steps):
        recs = [x for x in read_records(metrics_path(result.run_dir, r)) if x["event"] == "ready"]
        ready.append(recs[0] if recs else {"rss_mb": float("nan"), "vms_mb": float("nan")})
    peak_rss = result.metric("rss_peak_mb").max(axis=1)
    vms = result.metric("vms_peak_mb").max(axis=1)
    ready_rss = np.array([x["rss_mb"] for x in ready])
    out = {"peak_rss": peak_rss.tolist(), "ready_rss": ready_rss.tolist(), "vms_peak": vms.tolist(),
           "ready_vms": [x["vms_mb"] for x in ready], "max_peak_rss": float(peak_rss.max()),
           "max_vms_peak": float(vms.max()), "max_device_peak": None}
    first = next(iter(result.steps.values()), [{}])
    measure = "device" if first and "device_peak_mb" in first[0] else "rss"
    peak, base = peak_rss, ready_rss
    if measure == "device":
        peak = result.metric("device_peak_mb").max(axis=1)
        base = np.array([x.get("device_mb", float("nan")) for x in ready])
        out.update(device_peak=peak.tolist(), ready_device=base.tolist(), max_device_peak=float(peak.max()))
    act = peak - base
    out.update(memory=measure, peak=peak.tolist(), ready=base.tolist(), activation=act.tolist(),
               max_peak=float(peak.max()), max_activation=float(act.max()))
    return out


# ------------------------------------------------------------------------------- one process, measured
def _status_kib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return float(line.split()[1])
    return float("nan")


def _reset_peak_rss() -> bool:
    """Reset this process's peak-RSS counter (VmHWM); False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _measured_step(spec: dict):
    """This process set up for measuring (CPU, graph mode, seeded) and a no-argument step of the spec's model."""
    import mindspore as ms
    from mindspore.device_context.cpu.op_tuning import threads_num

    from helpers.train.models import build_model, set_recompute
    from helpers.train.recipe import plain_train_step

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    threads_num(int(spec.get("threads", 1)))
    ms.set_seed(0)
    batch, k, size = int(spec["batch"]), int(spec.get("accumulation_steps", 1)), int(spec["image_size"])
    classes = spec.get("num_classes", 10)
    net = build_model(spec["arch"], classes, spec["width"], spec["stem"], spec["conv_impl"])
    set_recompute(net, spec.get("recompute", "none"))
    step_cell = plain_train_step(net, amp_level=spec.get("amp_level", "O0"))
    rng = np.random.default_rng(0)

    def data(n):
        return (ms.Tensor(rng.standard_normal((n, 3, size, size)).astype(np.float32)),
                ms.Tensor(rng.integers(0, classes, n).astype(np.int32)))

    if k == 1:
        x, y = data(batch)
        return lambda: step_cell(x, y).asnumpy()
    from helpers.train.grad_accumulation import AccumulatingTrainStep

    acc = AccumulatingTrainStep(step_cell.network, step_cell.optimizer, k)
    micro = [data(batch // k) for _ in range(k)]
    return lambda: acc(micro)


def measure_here(spec: dict) -> dict:
    """Run in the measuring interpreter: build the model and step, compile, then measure the steady steps."""
    import time

    from mindspore import runtime

    step = _measured_step(spec)
    ready_rss, ready_vms = _status_kib("VmRSS") / 1024, _status_kib("VmSize") / 1024
    t0 = time.perf_counter()
    step()                                      # compiles
    first_s = time.perf_counter() - t0
    after_first_rss = _status_kib("VmRSS") / 1024
    reset = _reset_peak_rss()
    times, losses = [], []
    for _ in range(int(spec.get("steps", 2))):
        t0 = time.perf_counter()
        out = step()
        times.append(time.perf_counter() - t0)
        losses.append(float(np.asarray(out).reshape(-1)[0]))
    return {
        # MindSpore's own allocator counters (documented to read 0 on CPU: recorded, so the notebook can say so)
        "allocator_max_allocated_mb": runtime.max_memory_allocated() / MIB,
        "allocator_max_reserved_mb": runtime.max_memory_reserved() / MIB,
        "batch": int(spec["batch"]), "accumulation_steps": int(spec.get("accumulation_steps", 1)),
        "image_size": int(spec["image_size"]), "conv_impl": spec["conv_impl"],
        "recompute": spec.get("recompute", "none"), "amp_level": spec.get("amp_level", "O0"),
        "ready_rss_mb": ready_rss, "ready_vms_mb": ready_vms, "after_first_step_rss_mb": after_first_rss,
        "steady_peak_rss_mb": _status_kib("VmHWM") / 1024 if reset else float("nan"),
        "peak_rss_mb": _status_kib("VmHWM") / 1024 if not reset else None,
        "vms_peak_mb": _status_kib("VmPeak") / 1024, "first_step_s": first_s,
        "step_s": float(np.median(times)), "step_times_s": times, "losses": losses, "peak_reset": reset,
    }


def measure_step_memory(batch: int, arch: str = "resnet18", width: float = 0.125, stem: str = "small",
                        image_size: int = 32, conv_impl: str = "native", accumulation_steps: int = 1,
                        steps: int = 2, threads: int = 1, timeout_s: float = 600.0,
                        onednn_verbose: bool = False, recompute: str = "none", amp_level: str = "O0") -> dict:
    """Peak RSS of steady training steps (after compilation) of one model in a fresh single process.

    ``batch`` is the per-step batch (with ``accumulation_steps`` K it is split into K micro-batches run
    through ``helpers.train.grad_accumulation``); ``recompute`` (``helpers.train.models.set_recompute``) and
    ``amp_level`` (``helpers.train.recipe.plain_train_step``) are the other memory levers. Returns MiB figures:
    ``ready_rss_mb`` (built, before the first step), ``steady_peak_rss_mb`` (peak of the steps after the compiling
    one), ``vms_peak_mb``, step times and the steps' losses (``losses``: a lever that only saves memory keeps them).
    ``onednn_verbose``: also return ``conv_kernels``, the oneDNN implementation MindSpore's native
    convolution ran for each pass (``onednn_conv_kernels``): it depends on the CPU's instruction set, and
    so does the memory a convolution holds beyond the activations.
    """
    from helpers.core.fresh_python import call_fresh

    if conv_impl not in ("native", "im2col"):
        raise ValueError(f"conv_impl: measure 'native' or 'im2col' explicitly (got {conv_impl!r})")
    spec = dict(batch=batch, arch=arch, width=width, stem=stem, image_size=image_size, conv_impl=conv_impl,
                accumulation_steps=accumulation_steps, steps=steps, threads=threads, recompute=recompute,
                amp_level=amp_level)
    env = {"OMP_NUM_THREADS": str(threads), **({"ONEDNN_VERBOSE": "1"} if onednn_verbose else {})}
    result, lines = call_fresh("helpers.topics.memory_runs:measure_here", spec, env=env,
                               unset=("MS_COMPILER_CACHE_ENABLE",), timeout_s=timeout_s, keep_output=True)
    if onednn_verbose:
        result["conv_kernels"] = onednn_conv_kernels(lines)
    return result


def onednn_conv_kernels(lines) -> dict[str, str]:
    """``{pass: implementation}`` from ``ONEDNN_VERBOSE=1`` output, e.g. ``{"forward_training":
    "jit_uni_ncsp:conv+ref:any", "backward_weights": "x64:gemm:jit"}`` (the most frequent per pass)."""
    counts: dict[str, dict[str, int]] = {}
    for line in lines:
        f = line.split(",")
        if f[0] not in ("onednn_verbose", "dnnl_verbose") or "exec" not in f:   # dnnl_: before oneDNN 3
            continue
        i = f.index("exec")
        if f[i + 1:i + 3] == ["cpu", "convolution"] and len(f) > i + 4:
            per = counts.setdefault(f[i + 4], {})
            per[f[i + 3]] = per.get(f[i + 3], 0) + 1
    return {kind: max(impls, key=impls.get) for kind, impls in sorted(counts.items())}


def sweep(batches, **kwargs) -> list[dict]:
    """``measure_step_memory`` for each batch size, one fresh process each, as many at once as there are cores (at
    most 2: each holds its model's memory): a process's peak RSS and kernels do not depend on its neighbours (ci,
    3 batches on 2 cores: 25.6 s against 31.1 s one after another, every peak within 0.3 MB)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(2, len(batches), os.cpu_count() or 1))) as pool:
        return list(pool.map(lambda b: measure_step_memory(int(b), **kwargs), batches))


def fit_slope(xs, ys) -> tuple[float, float]:
    """Least-squares line ``y = slope * x + intercept``."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(intercept)


def planner_vs_measured(rows: list[dict], arch: str = "resnet18", width: float = 0.125, stem: str = "small",
                        num_classes: int = 10) -> dict:
    """Measured MiB per image (slope of the steady peak RSS over batch) against the planner's
    ``activation_bytes_per_image`` (what a training step keeps for backward), for the sweep's model and
    convolution; the planner's per-image workspace (a transient floor) is reported next to it.

    ``planner_vs_measured_slope_ratio`` = planner activation slope / measured slope (1.0: exact).
    ``planner_mb`` anchors the planner's line at the measured intercept (the planner does not predict
    the runtime's fixed cost), so the two lines can be drawn on one plot.
    """
    from helpers.core.memory_planner import estimate

    xs = [r["batch"] for r in rows]
    ys = [r["steady_peak_rss_mb"] for r in rows]
    measured, intercept = fit_slope(xs, ys)
    impl, size = rows[0]["conv_impl"], rows[0]["image_size"]
    est = estimate(arch, 1, size, num_classes=num_classes, width=width, stem=stem, conv_impl=impl)
    act = est.activation_bytes_per_image / MIB
    workspace = est.workspace_bytes / MIB
    return {"batches": xs, "measured_peak_mb": ys, "planner_mb": [intercept + act * b for b in xs],
            "measured_slope_mib_per_image": measured, "measured_intercept_mb": intercept,
            "planner_slope_mib_per_image": act, "planner_workspace_mib_per_image": workspace,
            "planner_vs_measured_slope_ratio": act / measured, "conv_impl": impl, "image_size": size,
            "arch": arch, "width": width}


def cap_below(measured_vms_mb: float, margin_mb: float = 256) -> int:
    """A per-rank address-space cap ``margin_mb`` below what a measured run needed (its ``vms_peak_mb``)."""
    return int(measured_vms_mb - margin_mb)
