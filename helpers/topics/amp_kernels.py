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
        return ("The convolutions ran on MindSpore's native kernel (`conv_impl='native'`): "
                "the convolution columns count `Conv2D`, `Conv2DBackpropInput` and `Conv2DBackpropFilter`.")
    return ("The convolutions ran as im2col + batched matmul (`conv_impl='im2col'`): the convolution columns "
            "count `Im2Col`, `BatchMatMul` and `Col2Im`; no `Conv2D*` kernel ran.")


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
