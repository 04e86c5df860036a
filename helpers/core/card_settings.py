"""What a rank sets on a GPU/Ascend card before ``init()`` so float32 runs in float32 and bit-identity claims can
hold: MindSpore 2.10's names for it, the setup table's rows and the record each rank writes (nothing on CPU)."""

from __future__ import annotations

NOT_APPLICABLE = "n/a"

# mindspore/device_context/ascend/op_precision.py, precision_mode(): the mode that keeps every operator's own dtype.
ASCEND_KEEP_DTYPE = "must_keep_origin_dtype"
# MindSpore's default when no mode is set depends on the chip (libmindspore_ge_backend.so, "Set precision_mode
# allow_fp32_to_fp16, soc_version is "): must_keep_origin_dtype on these SoC versions, else allow_fp32_to_fp16,
# i.e. float16 matrix operators on Atlas training (910A, SoC version "ascend910") even in an "O0" job.
ASCEND_FP16_MATMUL = "allow_fp32_to_fp16"
ASCEND_KEEP_DTYPE_SOCS = ("ascend910b", "ascend910_93")
# mindspore/device_context/gpu/op_precision.py: conv_allow_tf32 defaults to True (float32 convolutions in TF32).
GPU_CONV_TF32 = "conv_allow_tf32"
# mindspore/device_context/gpu/op_tuning.py: "algo_1: ... The results are deterministic" for the weight and the
# data gradient of a convolution (cuDNN's algorithm 0 adds with atomics: non-deterministic).
GPU_DETERMINISTIC_CONV_ALGO = "algo_1"
# mindspore/device_manager.py, set_deterministic(True): the environment it sets for HCCL and the TBE compiler.
DETERMINISTIC_ENV = {"HCCL_DETERMINISTIC": "true", "TE_PARALLEL_COMPILER": "1"}


def ascend_default_mode(soc: str) -> str:
    """The precision mode MindSpore uses on an Ascend chip (its SoC version) when none is set."""
    return ASCEND_KEEP_DTYPE if soc in ASCEND_KEEP_DTYPE_SOCS else ASCEND_FP16_MATMUL


def precision_setting(device_target: str, keep_fp32: bool) -> str:
    """The float32 setting a job asks for on its device, in MindSpore's words."""
    if device_target == "Ascend":
        return (f"precision_mode {ASCEND_KEEP_DTYPE}" if keep_fp32 else
                f"MindSpore's default ({ASCEND_FP16_MATMUL} on Atlas training: float16 matrix operators)")
    if device_target == "GPU":
        return f"{GPU_CONV_TF32}=False" if keep_fp32 else f"{GPU_CONV_TF32}=True (MindSpore's default: TF32)"
    return NOT_APPLICABLE


def determinism_setting(device_target: str, deterministic: bool) -> str:
    """What ``deterministic`` does on the device (CPU: nothing is set; its kernels gave identical bits here)."""
    if device_target == "CPU":
        return NOT_APPLICABLE
    if not deterministic:
        return "off (MindSpore's default)"
    extra = f"; cuDNN backward convolutions {GPU_DETERMINISTIC_CONV_ALGO}" if device_target == "GPU" else ""
    return f"set_deterministic(True) before init(){extra}"


def card_rows(cfg) -> list[tuple]:
    """The setup table's rows for the card settings (``n/a`` on CPU)."""
    return [("float32 on the card", precision_setting(cfg.device_target, cfg.keep_fp32)),
            ("deterministic", determinism_setting(cfg.device_target, cfg.deterministic))]


def card_record(device_target: str, applied: dict, soc: str = "") -> dict:
    """What a rank records of its card: ``chip`` (Ascend's SoC version), ``precision_mode`` in force and
    ``deterministic``; ``applied`` is what the rank set before ``init()`` (``helpers.train.card_runtime``)."""
    if device_target == "CPU":
        return {"chip": NOT_APPLICABLE, "precision_mode": NOT_APPLICABLE, "deterministic": NOT_APPLICABLE}
    if device_target == "Ascend":
        mode = applied.get("precision_mode") or f"{ascend_default_mode(soc)} (MindSpore's default on {soc or '?'})"
        chip = soc or "unknown"
    else:
        mode, chip = precision_setting("GPU", applied.get(GPU_CONV_TF32) is False), NOT_APPLICABLE
    return {"chip": chip, "precision_mode": mode, "deterministic": bool(applied.get("deterministic"))}
