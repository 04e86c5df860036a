"""Which kernels a mixed-precision job ran its convolutions with, and how the AMP levels' step times compare."""

from __future__ import annotations

# The kernels that compute a model's convolutions, by ``conv_impl`` (helpers.train.im2col_conv). ``im2col`` runs every
# convolution as a batched matmul: forward ``Im2Col`` (unfold; not for 1x1 stride-1 kernels, whose columns are the
# input) + ``BatchMatMul``; backward two ``BatchMatMul`` (weight and column gradients) + ``Col2Im`` (fold). No
# ``Conv2D*`` kernel runs under im2col, and ``MatMul`` is the classifier's alone.
CONV_KERNELS = {"native": ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"),
                "im2col": ("Im2Col", "BatchMatMul", "Col2Im")}


def conv_kernel_types(conv_impl: str) -> tuple[str, ...]:
    """The kernel types that ran a job's convolutions under its (resolved) ``conv_impl``."""
    if conv_impl in CONV_KERNELS:
        return CONV_KERNELS[conv_impl]
    raise ValueError(f"conv_impl must be 'native' or 'im2col' (resolved), got {conv_impl!r}")


def conv_kernels_note(conv_impl: str) -> str:
    """One sentence saying which kernels the chapter counts as convolution for this job."""
    if conv_impl == "native":
        return "Convolutions ran natively: `Conv2D`, `Conv2DBackpropInput`, `Conv2DBackpropFilter`."
    return "Convolutions ran as im2col: `Im2Col`, `BatchMatMul`, `Col2Im`, no `Conv2D*`."


# Per device, the op types that count as one of the table's kinds (a kind not listed counts only itself). The types
# are MindSpore ops (GPU: the op table's ``op_type``; Ascend: the framework op of each device kernel), after each
# backend's own passes: GPU fuses BatchNorm with its ReLU (and residual Add) into ``BatchNormWithActivation`` /
# ``BatchNormWithAddAndActivation`` (lib/plugin/libmindspore_gpu.so.11.x; the ReLU is then gone, which the O0/O3
# comparison shows); Ascend may split BatchNorm into ``BNTrainingReduce`` + ``BNTrainingUpdate`` (counted once, as
# the update) or run ``BatchNormExt`` (lib/plugin/libmindspore_ascend.so.2, libmindspore_ops_ascend.so).
KIND_TYPES = {
    "CPU": {},
    "GPU": {"BatchNorm": ("BatchNorm", "BatchNormWithActivation", "BatchNormWithAddAndActivation"),
            "BatchNormGrad": ("BatchNormGrad", "BatchNormGradWithActivation", "BatchNormGradWithAddAndActivation")},
    "Ascend": {"BatchNorm": ("BatchNorm", "BNTrainingUpdate", "BatchNormExt"),
               "BatchNormGrad": ("BatchNormGrad", "BNTrainingUpdateGrad", "BatchNormGradExt")},
}


def kind_types(kind: str, device_target: str = "CPU") -> tuple[str, ...]:
    """The op types counted as ``kind`` on ``device_target`` (``KIND_TYPES``)."""
    return KIND_TYPES.get(device_target, {}).get(kind, (kind,))


def kind_total(types_table: dict, kind: str, device_target: str = "CPU") -> tuple[float, float]:
    """(executions, ms) per step of ``kind`` in a :meth:`JobProfile.kernel_types` table, summed over the device's
    names for it (``KIND_TYPES``); (0, 0) if absent."""
    rows = [types_table.get(a, (0.0, 0.0)) for a in kind_types(kind, device_target)]
    return float(sum(c for c, _ in rows)), float(sum(m for _, m in rows))


def kernel_calls(types_table: dict, types, device_target: str = "CPU") -> dict[str, float]:
    """Executions per step of each of ``types`` (:func:`kind_total`)."""
    return {t: kind_total(types_table, t, device_target)[0] for t in types}


def all_zero(counts) -> bool:
    """Whether every count is 0: nothing of the kind was seen, so there is nothing to compare (not a verdict)."""
    return all(round(c) == 0 for c in counts)


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
