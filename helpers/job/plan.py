"""The plan step of a job: everything that decides what runs (config, inputs, data, convolution), before any launcher starts a rank."""

from __future__ import annotations

from helpers.core.config import JobConfig
from helpers.job.input_checks import check_job_inputs


def plan_job(cfg: JobConfig) -> JobConfig:
    """A valid config with its inputs checked, its data made and ``conv_impl`` chosen (ConfigError / DataError
    before anything starts)."""
    cfg = cfg.validate()
    check_job_inputs(cfg)                 # strategy_file / init_checkpoint exist and fit this model
    if cfg.task == "train":
        from helpers.train.data import prepare_data

        prepare_data(cfg)
    if cfg.conv_impl == "auto" and cfg.task == "train":
        from helpers.train.conv_autoselect import resolve_conv_impl

        cfg = cfg.replace(conv_impl=resolve_conv_impl(cfg)[0])
    return cfg


def oom_hint(cfg: JobConfig) -> str:
    """What to say when a rank ran out of memory: the batch it tried, the planner's estimate, the fix."""
    text = (f"\n  the rank ran out of memory at per-rank batch {cfg.batch_per_rank} "
            f"(micro-batch {cfg.micro_batch_size} x {cfg.accumulation_steps}), cap {cfg.mem_cap_mb} MB")
    try:
        from helpers.core.memory_planner import estimate

        est = estimate(cfg.arch, cfg.micro_batch_size, cfg.image_size, num_classes=10 if cfg.stem == "small" else 1000,
                       width=cfg.width, stem=cfg.stem, conv_impl=cfg.conv_impl)
        text += f"; the planner estimates {est.total_bytes / 2**20:.0f} MB for this micro-batch"
    except Exception:  # noqa: BLE001 - the hint must never hide the real error
        pass
    return text + ("\n  hint: keep the global batch and split it, e.g. micro_batch="
                   f"{max(1, cfg.micro_batch_size // 4)}, accumulation_steps={cfg.accumulation_steps * 4} "
                   "(helpers.core.memory_planner.plan_accumulation picks them for a memory budget)")
