"""A rank's card settings before ``init()`` (float32 kept, deterministic kernels) and the chip it ran on."""

from __future__ import annotations

import os

from helpers.core.card_settings import GPU_CONV_TF32, GPU_DETERMINISTIC_CONV_ALGO, ascend_float32_calls

SCHEDULER_ROLE = "MS_SCHED"   # msrun's scheduler runs the worker too (MS_ROLE); it holds no card


def prepare_card(cfg, ms, environ=os.environ) -> dict:
    """Set ``cfg``'s precision and determinism on the card through the ``mindspore`` module ``ms``, between
    ``set_device`` and ``init()`` (HCCL reads the switch when ``init()`` builds its groups); returns what was set
    (nothing on CPU or in msrun's scheduler). Ascend: the calls of ``ascend_float32_calls`` for the chip read after
    ``set_device`` (none on a 910A). GPU: deterministic cuDNN backward convolutions, since no GPU kernel reads
    ``set_deterministic``."""
    if cfg.device_target == "CPU" or environ.get("MS_ROLE") == SCHEDULER_ROLE:
        return {}
    done = {}
    if cfg.keep_fp32 and cfg.device_target == "Ascend":
        for name, value in ascend_float32_calls(ascend_soc()):
            getattr(ms.device_context.ascend.op_precision, name)(value)
            done[name] = value
    elif cfg.keep_fp32:
        ms.device_context.gpu.op_precision.conv_allow_tf32(False)
        done[GPU_CONV_TF32] = False
    if cfg.deterministic:
        ms.set_deterministic(True)
        if cfg.device_target == "GPU":
            ms.device_context.gpu.op_tuning.conv_wgrad_algo(GPU_DETERMINISTIC_CONV_ALGO)
            ms.device_context.gpu.op_tuning.conv_dgrad_algo(GPU_DETERMINISTIC_CONV_ALGO)
        done["deterministic"] = True
    return done


def ascend_soc() -> str:
    """The Ascend SoC version MindSpore detected (``ascend910`` on Atlas training, ``ascend910b``, ...), read the
    way the wheel's own ``mindspore/train/model.py`` reads it; "" where there is none or it cannot be read."""
    try:
        from mindspore._c_expression import MSContext

        return str(MSContext.get_instance().get_ascend_soc_version())
    except (ImportError, AttributeError, RuntimeError):   # recorded as "unknown": not worth failing the rank
        return ""


def wait_for_device() -> None:
    """``mindspore.runtime.synchronize()`` where the device has streams to wait for: on CPU it only logs
    'CPU device is not supported' as an ERROR and returns (mindspore/runtime/device.py, 2.10)."""
    import mindspore as ms

    if ms.get_context("device_target") != "CPU":
        ms.runtime.synchronize()
