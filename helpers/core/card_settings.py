"""What a rank sets on a GPU/Ascend card before ``init()`` so float32 runs in float32 and bit-identity claims can
hold: MindSpore 2.10's names for it, the setup table's rows and the record each rank writes (nothing on CPU)."""

from __future__ import annotations

NOT_APPLICABLE = "n/a"

# mindspore/device_context/ascend/op_precision.py, precision_mode(): the mode that keeps every operator's own dtype.
ASCEND_KEEP_DTYPE = "must_keep_origin_dtype"
ASCEND_FP16_MATMUL = "allow_fp32_to_fp16"
# The same file's switches; its docstrings: "CANN enables FP32 to HF32 for Conv operators by default", disables it for
# Matmul. Each can be set once per process, before the first kernel reads it.
ASCEND_CONV_HF32, ASCEND_MATMUL_HF32 = "conv_allow_hf32", "matmul_allow_hf32"
# MindSpore's default when no mode is set depends on the chip, whatever the docstring says ("must_keep_origin_dtype
# by default"): AclUtil::KeepOriginDType() in lib/plugin/libmindspore_ops_ascend.so is true when the SoC version
# contains one of these, and AclUtil::SetPrecisionMode then defaults to must_keep_origin_dtype, else to
# allow_fp32_to_fp16 (910A, SoC version "ascend910": float16 matrix operators even in an "O0" job).
ASCEND_KEEP_DTYPE_SOCS = ("ascend910b", "ascend310b", "ascend910_93", "ascend950")
# A 910A cannot keep a float32 convolution: its cube units take float16 (CANN's aclnnConvolution: "Cube单元不支持
# FLOAT32计算", cubeMathType=1 casts to float16); MindSpore maps an explicit must_keep_origin_dtype to cubeMathType
# KEEP_DTYPE (OpApiUtil::GetCubeMathType), and CANN's precision_mode docs send such an operator to an AI CPU kernel
# or fail. So a 910A keeps MindSpore's default and its ranks record float32 as not kept.
ASCEND_910A_WHY = ("910A: its cube units take float16, so convolutions and matmuls run in float16 "
                   f"({ASCEND_FP16_MATMUL}, MindSpore's default on this chip); {ASCEND_KEEP_DTYPE} would send a "
                   "float32 convolution to an AI CPU kernel or fail")
# mindspore/device_context/gpu/op_precision.py: conv_allow_tf32 defaults to True (float32 convolutions in TF32).
GPU_CONV_TF32 = "conv_allow_tf32"
# mindspore/device_context/gpu/op_tuning.py: "algo_1: ... The results are deterministic" for the weight and the
# data gradient of a convolution (cuDNN's algorithm 0 adds with atomics: non-deterministic).
GPU_DETERMINISTIC_CONV_ALGO = "algo_1"
# What that leaves out on GPU: the GPU plugin has no deterministic switch (set_deterministic reaches no GPU kernel),
# the forward convolution keeps cuDNN's heuristic choice (conv_fprop_algo "normal", op_tuning.py), and kernels that
# add with atomics and NCCL's reduction order are not controlled by the course.
GPU_DETERMINISM_SCOPE = (f"only the backward convolutions are pinned (cuDNN {GPU_DETERMINISTIC_CONV_ALGO}): no GPU "
                         "kernel reads set_deterministic, the forward convolution keeps cuDNN's heuristic choice, "
                         "and atomics-based kernels and NCCL's reduction order are not pinned")
# mindspore/device_manager.py, set_deterministic(True): the environment it sets for HCCL and the TBE compiler.
DETERMINISTIC_ENV = {"HCCL_DETERMINISTIC": "true", "TE_PARALLEL_COMPILER": "1"}


def keeps_origin_dtype(soc: str) -> bool:
    """Whether MindSpore treats the Ascend chip (its SoC version) as one that keeps float32 (``KeepOriginDType``)."""
    return any(name in soc for name in ASCEND_KEEP_DTYPE_SOCS)


def ascend_default_mode(soc: str) -> str:
    """The precision mode MindSpore uses on an Ascend chip (its SoC version) when none is set."""
    return ASCEND_KEEP_DTYPE if keeps_origin_dtype(soc) else ASCEND_FP16_MATMUL


def ascend_float32_calls(soc: str) -> list[tuple[str, object]]:
    """The ``mindspore.device_context.ascend.op_precision`` calls that keep float32 on the chip: none on a 910A (it
    cannot), else must_keep_origin_dtype with HF32 off for Conv and MatMul. ``soc`` "" (not read yet): the calls."""
    if soc and not keeps_origin_dtype(soc):
        return []
    return [("precision_mode", ASCEND_KEEP_DTYPE), (ASCEND_CONV_HF32, False), (ASCEND_MATMUL_HF32, False)]


def precision_setting(device_target: str, keep_fp32: bool) -> str:
    """The float32 setting a job asks for on its device, in MindSpore's words."""
    if device_target == "Ascend":
        return (f"precision_mode {ASCEND_KEEP_DTYPE}, {ASCEND_CONV_HF32}/{ASCEND_MATMUL_HF32} False (910A: float16 "
                "matrix operators, recorded)" if keep_fp32 else
                f"MindSpore's default ({ASCEND_FP16_MATMUL} on 910A: float16 matrix operators; HF32 convolutions "
                "elsewhere)")
    if device_target == "GPU":
        return f"{GPU_CONV_TF32}=False" if keep_fp32 else f"{GPU_CONV_TF32}=True (MindSpore's default: TF32)"
    return NOT_APPLICABLE


def float32_kept(device_target: str, applied: dict, soc: str = "") -> tuple:
    """``(kept, why)``: whether a rank's float32 operators ran in float32 on its card, from what it set before
    ``init()`` and its chip; ``kept`` is ``n/a`` on CPU and "unknown" where the Ascend chip was not read."""
    if device_target == "CPU":
        return NOT_APPLICABLE, NOT_APPLICABLE
    if device_target == "GPU":
        off = applied.get(GPU_CONV_TF32) is False
        return off, f"{GPU_CONV_TF32}=False" if off else "TF32 convolutions (MindSpore's default)"
    if soc and not keeps_origin_dtype(soc):
        return False, ASCEND_910A_WHY
    set_all = all(applied.get(name) == value for name, value in ascend_float32_calls(soc))
    if not set_all:
        return False, (f"MindSpore's default on {soc or 'this chip'}: convolutions in HF32 ({ASCEND_CONV_HF32} not "
                       "set; CANN's default)")
    return (True if soc else "unknown"), f"{ASCEND_KEEP_DTYPE}, HF32 off for Conv and MatMul"


def determinism_setting(device_target: str, deterministic: bool) -> str:
    """What ``deterministic`` does on the device (CPU: nothing is set; its kernels gave identical bits here)."""
    if device_target == "CPU":
        return NOT_APPLICABLE
    if not deterministic:
        return "off (MindSpore's default)"
    extra = f"; {GPU_DETERMINISM_SCOPE}" if device_target == "GPU" else ""
    return f"set_deterministic(True) before init(){extra}"


def card_rows(cfg) -> list[tuple]:
    """The setup table's rows for the card settings (``n/a`` on CPU)."""
    return [("float32 on the card", precision_setting(cfg.device_target, cfg.keep_fp32)),
            ("deterministic", determinism_setting(cfg.device_target, cfg.deterministic))]


def card_record(device_target: str, applied: dict, soc: str = "") -> dict:
    """What a rank records of its card: ``chip`` (Ascend's SoC version), ``precision_mode`` in force,
    ``deterministic``, and ``float32`` / ``float32_note`` (:func:`float32_kept`); ``applied`` is what the rank set
    before ``init()`` (``helpers.train.card_runtime``)."""
    kept, why = float32_kept(device_target, applied, soc)
    if device_target == "CPU":
        return {"chip": NOT_APPLICABLE, "precision_mode": NOT_APPLICABLE, "deterministic": NOT_APPLICABLE,
                "float32": kept, "float32_note": why}
    if device_target == "Ascend":
        mode = applied.get("precision_mode") or f"{ascend_default_mode(soc)} (MindSpore's default on {soc or '?'})"
        chip = soc or "unknown"
    else:
        mode, chip = precision_setting("GPU", applied.get(GPU_CONV_TF32) is False), NOT_APPLICABLE
    return {"chip": chip, "precision_mode": mode, "deterministic": bool(applied.get("deterministic")),
            "float32": kept, "float32_note": why}
