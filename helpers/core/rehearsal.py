"""The gpu8 preset rehearsed on CPU: the same code paths at a size two CPU ranks can run.

``job_config("gpu8", rehearse=True)`` keeps the preset's model, image size and recipe (ResNet-50, 224 px,
scaled lr, warm-up + cosine, label smoothing, AMP O2 with a dynamic loss scale) and shrinks only what a
laptop cannot hold (ranks, batch, steps, workers), on a generated ImageNet-layout tree (written by
``helpers.train.data.prepare_data``). ``device_target`` then names the card the rehearsal stands for
(``rehearsed_target``) while the job runs on CPU. ``STAND_INS`` lists every place where a card's component is
replaced by its CPU counterpart; each is a branch on ``device_target`` in the module named, and nothing else differs.
"""

from __future__ import annotations

from helpers.core.errors import ConfigError

FAKE_IMAGENET_DIR = "data/fake_imagenet"
CARD_TARGETS = ("GPU", "Ascend")

REHEARSAL = dict(device_target="CPU", world_size=2, global_batch=4, steps=2, dataset_workers=1,
                 threads_per_rank=1, conv_impl="im2col", data_dir=FAKE_IMAGENET_DIR, timeout_s=1800.0,
                 bind_cores=True, rehearsal=True)

# The overflow check nn.TrainOneStepWithLossScaleCell.get_overflow_status runs on each chip (the wheel's
# mindspore/nn/wrap/loss_scale.py; tests/contract/test_loss_scale_kernels.py pins every name below to it).
# GPU (device_target "GPU"): FloatStatus on every gradient, summed (AddN) and AllReduced.
GPU_OVERFLOW_KERNEL = "FloatStatus"
# Which Ascend chip: the SoC feature the cell asks MSContext.ascend_soc_supports_feature for.
ASCEND_910A_FEATURE, ASCEND_910B_FEATURE = "amp_loss_scale_train_classic_target", "train_hq_dtype_line"
# 910A always, 910B only with MS_ASCEND_CHECK_OVERFLOW_MODE=SATURATION_MODE: the chip's float status register,
# cleared before the backward pass and read after it.
SATURATION_KERNELS = ("NPUClearFloatStatusV2", "NPUGetFloatStatusV2")
SATURATION_MODE_ENV, SATURATION_MODE = "MS_ASCEND_CHECK_OVERFLOW_MODE", "SATURATION_MODE"
# 910B by default (INFNAN mode): one AllFinite over all gradients (an Ascend C custom kernel shipped in
# lib/plugin/ascend/custom_ascendc_910b); IsFinite on every gradient instead when AllFinite is off: with
# MS_DEV_RUNTIME_CONF="all_finite:False", a global jit_level other than O0/O1, RANK_TABLE_FILE set, or the custom
# kernels' version check failing. The CPU stand-in (helpers.train.recipe.cpu_loss_scale_cell) is that IsFinite path.
INFNAN_KERNEL, INFNAN_FALLBACK_KERNEL = "AllFinite", "IsFinite"
ALL_FINITE_OFF = ("all_finite:False", "RANK_TABLE_FILE")
OVERFLOW_CHECKS = {
    "GPU": f"{GPU_OVERFLOW_KERNEL} per gradient",
    "Ascend": (f"910B: {INFNAN_KERNEL} over all gradients, {INFNAN_FALLBACK_KERNEL} per gradient when AllFinite is "
               f"off, {' / '.join(SATURATION_KERNELS)} with {SATURATION_MODE_ENV}={SATURATION_MODE}; "
               f"910A: {' / '.join(SATURATION_KERNELS)}"),
}
OVERFLOW_ROW = "loss-scale overflow check"

# (component on 8 cards, its CPU stand-in in the rehearsal, where the branch is)
STAND_INS = (
    ("NCCL / HCCL collectives between cards", "MindSpore's CPU collectives between processes (same msrun, same init())",
     "MindSpore itself (device_target)"),
    ("cuDNN / CANN convolution", "im2col + MatMul convolution (same parameters; native CPU 3x3 conv is ~5x slower)",
     "helpers.train.im2col_conv (conv_impl)"),
    (f"{OVERFLOW_ROW} (GPU: {OVERFLOW_CHECKS['GPU']}; Ascend {OVERFLOW_CHECKS['Ascend']})",
     "ops.isfinite on every gradient inside the same TrainOneStepWithLossScaleCell (as Ascend's IsFinite path)",
     "helpers.train.recipe.build_train_step"),
    ("device memory pool cap (runtime.set_memory(max_size=...))", "address-space cap (RLIMIT_AS) per rank",
     "helpers.train.worker.setup_runtime / apply_cpu_memory_cap"),
    ("SEMI_AUTO_PARALLEL + shard() + strategy file", "explicit collectives over create_group sub-groups, same strategy file",
     "helpers.train.hybrid_step.build_hybrid_step"),
    ("GPU/NPU profiler rows (kernels on the device timeline)", "CPU profiler rows of the same trace_view.json",
     "helpers.train.profiler_session.profiler_activities"),
)


def rehearsal_overrides(preset: str) -> dict:
    """The fields ``job_config(preset, rehearse=True)`` replaces; only the gpu8 preset has a rehearsal."""
    if preset != "gpu8":
        raise ConfigError(f"rehearse: only the gpu8 preset has a CPU rehearsal (got preset {preset!r})")
    return dict(REHEARSAL)


def rehearsal_target(device_target: str) -> str:
    """The card a rehearsal stands for, from the ``device_target`` asked for (the rehearsal itself runs on CPU)."""
    if device_target not in CARD_TARGETS:
        raise ConfigError(f"device_target: with rehearse=True it names the card the rehearsal stands for, one of "
                          f"{CARD_TARGETS}; the rehearsal runs on CPU either way (got {device_target!r})")
    return device_target


def stand_in_rows(device_target: str, card: str | None = None) -> list[tuple[str, str, str]]:
    """The table a chapter shows: what ran for each component on this device target; the overflow row names the
    kernels of ``card`` (a rehearsal's ``rehearsed_target``, else the device target itself when it is a card)."""
    on_cpu = device_target == "CPU"
    card = card or (device_target if device_target in CARD_TARGETS else None)
    return [(f"{OVERFLOW_ROW} on {card} ({OVERFLOW_CHECKS[card]})" if card and part.startswith(OVERFLOW_ROW) else part,
             cpu if on_cpu else "(the card's own)", where) for part, cpu, where in STAND_INS]
