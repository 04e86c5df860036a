"""The rows of the settings table a chapter shows before its job runs."""

from __future__ import annotations

from helpers.core.card_settings import card_rows


def config_table(cfg, fields=("name", "device_target", "world_size", "arch", "width", "stem",
                              "conv_impl", "image_size", "global_batch", "steps", "data_dir")):
    """Rows (field, value) of the settings a reader wants to see before a job runs."""
    rows = [(f, getattr(cfg, f)) for f in fields]
    rows.insert(fields.index("global_batch") + 1, ("batch_per_rank", cfg.batch_per_rank))
    rows += [(f, f"{getattr(cfg, f)} ({why})") for f, why in cfg.adjusted.items()] + card_rows(cfg)
    if cfg.launcher != "local":
        rows.append(("launcher", f"{cfg.launcher} {cfg.slurm}" if cfg.launcher == "slurm" else cfg.launcher))
    if cfg.rehearsal:
        rows.append(("path", f"gpu8 for {cfg.rehearsed_target or 'the cards'} rehearsed on CPU: each card-only part "
                             "swapped for its CPU stand-in (helpers.core.rehearsal.STAND_INS)"))
    return rows
