"""Pre-flight check before any job starts: software, cards, data layout and each chapter's memory plan.

Every line is a ``Check`` (name, what was found, ok, what to do). ``python -m helpers.preflight.envcheck`` prints it.
"""

from __future__ import annotations

import os

from helpers.preflight.ascend_host import ascend_checks
from helpers.preflight.gpu_host import card_memory_gib, gpu_checks
from helpers.preflight.machine_checks import Check, environment_checks
from helpers.preflight.npu_smi import npu_free_hbm_gib


def data_checks(data_dir: str, world_size: int) -> list[Check]:
    """The ImageNet layout of ``data_dir`` (``helpers.train.folder_checks.check_imagenet_layout``) as checks."""
    from helpers.train.folder_checks import check_imagenet_layout

    return [Check(f"data: {f['check']}", f["value"], f["ok"], f["fix"] or "ok")
            for f in check_imagenet_layout(data_dir, world_size=world_size)]


def chapter_memory_rows(cfg, preset: str) -> list[tuple[str, str, int, str]]:
    """(what runs, arch, images per card, precision) of the biggest step each chapter takes with ``cfg``;
    chapter 02's full batch is the seed blog's case on gpu8 (ResNet-152, 64 per card, float32)."""
    train_precision = "fp32" if cfg.amp_level == "O0" else "mixed"
    per_card = cfg.batch_per_rank
    big, big_batch = ("resnet152", 64) if preset == "gpu8" and not cfg.rehearsal else (cfg.arch, per_card)
    return [("00, 01, 03: training", cfg.arch, per_card, train_precision),
            ("02: full batch", big, big_batch, "fp32"),
            ("04: AMP sweep, O0", cfg.arch, per_card, "fp32")]


def memory_checks(cfg, preset: str, card_gib: float | None, unit: str = "GiB") -> list[Check]:
    """The planner's peak per card for each chapter's biggest step against the smallest card found (``unit`` names
    the figure: a GPU's memory, an NPU's free HBM)."""
    from helpers.core.memory_planner import estimate

    out = []
    for what, arch, batch, precision in chapter_memory_rows(cfg, preset):
        est = estimate(arch, batch, cfg.image_size, precision=precision)
        if card_gib is None:
            out.append(Check(f"memory plan: {what}", f"{arch} x {batch} at {cfg.image_size} px, {precision}: "
                             f"{est.total_gib:.1f} GiB", True, "no card found to compare with"))
            continue
        ok = est.fits(card_gib)
        out.append(Check(f"memory plan: {what}", f"{arch} x {batch}, {precision}: {est.total_gib:.1f} GiB of "
                         f"{card_gib:.0f} {unit}", ok,
                         "fits (the planner counts what a step must keep; frameworks add workspace on top)" if ok else
                         "lower the per-card batch (global_batch) or use amp_level O2; chapter 02 shows accumulation"))
    return out


def preflight(preset: str = "gpu8", data_dir: str | None = None, device_target: str | None = None,
              world_size: int | None = None, rehearse: bool = False) -> list[Check]:
    """Every check for running ``preset`` here; fast (seconds), starts no job."""
    from helpers.core.config import job_config

    cfg = job_config(preset, rehearse=rehearse, data_dir=data_dir, device_target=device_target,
                     world_size=world_size)
    return preflight_checks(cfg, preset)


def preflight_checks(cfg, preset: str) -> list[Check]:
    """The checks of ``preflight`` for a built config (chapter 00 shows them for its own config)."""
    from helpers.core.errors import DataError
    from helpers.train.data import prepare_data

    try:
        prepare_data(cfg)                 # writes the stand-in / rehearsal tree when the config points at it
    except DataError:
        pass                              # reported below, finding by finding
    checks = [c if c.name != f"device {cfg.device_target}" else
              Check(c.name, c.value, c.value == "available", f"this run's device_target is {cfg.device_target}: "
                    + ("ok" if c.value == "available" else "MindSpore cannot use it here (see the checks below)"))
              for c in environment_checks()]
    card, unit = None, "GiB"
    if cfg.device_target == "GPU":
        checks += gpu_checks()
        card = card_memory_gib()
    elif cfg.device_target == "Ascend":
        checks += ascend_checks(cfg.local_workers, env={**os.environ, **{k: str(v) for k, v in cfg.env.items()}})
        card, unit = npu_free_hbm_gib(), "GiB free HBM (smallest chip)"
    checks += data_checks(cfg.data_dir, cfg.world_size)
    checks += memory_checks(cfg, preset, card, unit)
    return checks
