"""The gpu8 preset rehearsed on CPU: the same code paths at a size two CPU ranks can run.

``job_config("gpu8", rehearse=True)`` keeps the preset's model, image size and recipe (ResNet-50, 224 px,
scaled lr, warm-up + cosine, label smoothing, AMP O2 with a dynamic loss scale) and shrinks only what a
laptop cannot hold (ranks, batch, steps, workers), on a generated ImageNet-layout tree. ``STAND_INS`` lists
every place where a card's component is replaced by its CPU counterpart; each is a branch on
``device_target`` in the module named, and nothing else differs.
"""

from __future__ import annotations

from pathlib import Path

from helpers.core.errors import ConfigError
from helpers.core.paths import resolve

FAKE_IMAGENET_DIR = "data/fake_imagenet"

REHEARSAL = dict(device_target="CPU", world_size=2, global_batch=4, steps=2, dataset_workers=1,
                 threads_per_rank=1, conv_impl="im2col", data_dir=FAKE_IMAGENET_DIR, timeout_s=1800.0,
                 bind_cores=True, rehearsal=True)

# (component on 8 cards, its CPU stand-in in the rehearsal, where the branch is)
STAND_INS = (
    ("NCCL / HCCL collectives between cards", "MindSpore's CPU collectives between processes (same msrun, same init())",
     "MindSpore itself (device_target)"),
    ("cuDNN / CANN convolution", "im2col + MatMul convolution (same parameters; native CPU 3x3 conv is ~5x slower)",
     "helpers.train.im2col_conv (conv_impl)"),
    ("loss-scale overflow check (FloatStatus / NPUGetFloatStatusV2 kernels)",
     "ops.isfinite on every gradient inside the same TrainOneStepWithLossScaleCell", "helpers.train.recipe.build_train_step"),
    ("device memory pool cap (runtime.set_memory(max_size=...))", "address-space cap (RLIMIT_AS) per rank",
     "helpers.train.worker._setup_runtime / apply_cpu_memory_cap"),
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


def ensure_fake_imagenet(data_dir: str | Path = FAKE_IMAGENET_DIR) -> Path:
    """Write the generated ImageNet-layout tree if missing, with its flat val/ sorted into class folders by
    the same one-command fix a user runs on real ImageNet (``data_prep.imagenet_val``). The sorting happens
    before the tree is renamed into place, so two course runs starting at once never see (or move files in)
    a half-sorted val/."""
    from data_prep.fake_imagenet import write_fake_imagenet

    root = resolve(data_dir)
    write_fake_imagenet(root, sort_val=True)
    return root


def stand_in_rows(device_target: str) -> list[tuple[str, str, str]]:
    """The table a chapter shows: what ran for each component on this device target."""
    on_cpu = device_target == "CPU"
    return [(card, cpu if on_cpu else "(the card's own)", where) for card, cpu, where in STAND_INS]
