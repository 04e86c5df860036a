"""The plan step of a job: everything that decides what runs (config, inputs, data, convolution), before any launcher starts a rank."""

from __future__ import annotations

from helpers.core.config import JobConfig
from helpers.core.errors import ConfigError
from helpers.core.paths import MORE_PREFIX
from helpers.job.compile_cache import CACHE_ENV
from helpers.job.input_checks import check_job_inputs
from helpers.train.chain import STARTUP_PREFIX

SAME_RANKS = ("world_size", "local_world_size", "device_target", "launcher")   # what a chained job shares


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


def runs_in_turn(cfg: JobConfig) -> bool:
    """Whether the chapters run jobs like ``cfg`` in turn on one launch (``run_job``'s ``more``): on CPU, not in a
    card's rehearsal (on a card, and so in its rehearsal, each job keeps a launch of its own)."""
    return cfg.device_target == "CPU" and not cfg.rehearsal


def plan_more(cfg: JobConfig, more) -> dict[str, bytes]:
    """The further jobs a launch of ``cfg`` runs on the same ranks after it (``helpers.train.chain``), as the run
    folder's ``then-<i>/config.json`` files, each planned as ``plan_job`` plans a job. ``ConfigError`` for one on
    other ranks, with other MindSpore start-up variables (``MS_*``, read once per process) or with an address-space
    cap (it would stay for the jobs after it)."""
    out = {}
    for i, job in enumerate(more, start=1):
        differ = [f"{k} ({getattr(job, k)} against {getattr(cfg, k)})" for k in SAME_RANKS
                  if getattr(job, k) != getattr(cfg, k)]
        fixed = sorted(k for k in set(job.env) | set(cfg.env) if k.startswith(STARTUP_PREFIX) and k != CACHE_ENV
                       and job.env.get(k) != cfg.env.get(k))
        if differ or fixed or job.caps_address_space:
            why = (f"runs on other ranks: {', '.join(differ)}" if differ else f"sets MindSpore's start-up variables "
                   f"{fixed} otherwise" if fixed else f"caps the address space ({job.mem_cap_mb} MB)")
            raise ConfigError(f"chained job {job.name!r} {why}; run it as a job of its own")
        out[f"{MORE_PREFIX}{i}/config.json"] = plan_job(job).to_json().encode()
    return out


def oom_hint(cfg: JobConfig) -> str:
    """What to say when a rank ran out of memory: the batch it tried, the planner's estimate, the fix for what
    filled the memory (``memory_levers``)."""
    text = (f"\n  the rank ran out of memory at per-rank batch {cfg.batch_per_rank} "
            f"(micro-batch {cfg.micro_batch_size} x {cfg.accumulation_steps})"
            + (f", cap {cfg.mem_cap_mb} MB" if cfg.mem_cap_mb else ""))
    try:
        from helpers.core.memory_planner import estimate
        from helpers.job.host_memory import num_classes

        est = estimate(cfg.arch, cfg.micro_batch_size, cfg.image_size, num_classes=num_classes(cfg),
                       width=cfg.width, stem=cfg.stem,
                       conv_impl="native" if cfg.conv_impl == "auto" else cfg.conv_impl)
    except Exception:  # noqa: BLE001 - the hint must never hide the real error
        return text + accumulate_hint(cfg.micro_batch_size, cfg.accumulation_steps)
    return text + memory_levers(est, cfg.world_size, cfg.micro_batch_size, cfg.accumulation_steps)


def accumulate_hint(micro: int, k: int) -> str:
    """The accumulation hint: the same global batch as 4x the micro-steps of a quarter the size."""
    return (f"\n  hint: keep the global batch and split it, e.g. micro_batch={max(1, micro // 4)}, "
            f"accumulation_steps={k * 4} "
            "(helpers.core.memory_planner.plan_accumulation picks them for a memory budget)")


def memory_levers(est, world: int, micro: int, k: int) -> str:
    """The planner's split of ``est`` (batch-sized activations against the model's state) and the lever for the
    larger: accumulation shrinks only activations; splitting the classifier (chapter 03) or sharding the optimizer
    state shrinks the state, by the bytes named."""
    mb = lambda b: f"{b / 2**20:.0f} MB"  # noqa: E731
    act, state = est.activation_bytes + est.workspace_bytes, est.model_state_bytes
    text = (f"; the planner estimates {mb(est.total_bytes)} for this micro-batch: {mb(act)} activations, "
            f"{mb(state)} weights, gradients and optimizer state")
    if act >= state:
        return text + accumulate_hint(micro, k)
    per_param = (est.param_bytes + est.grad_bytes + est.optimizer_bytes) / max(est.param_count, 1)
    head = sum(r.params for r in est.layers if r.kind == "fc") * per_param
    n = max(world, 2)
    return text + (
        "\n  hint: the model's state, not the batch, fills the memory, and accumulation does not shrink it. "
        f"Split the classifier over model-parallel ranks (chapter 03's strategy file): each keeps 1/mp of its "
        f"{mb(head)}, saving {mb(head / 2)} at mp=2" + (f" and {mb(head * (1 - 1 / n))} at mp={n}" if n > 2 else "")
        + "; or shard the optimizer "
        f"state over the data-parallel ranks (enable_parallel_optimizer=True, semi-auto parallel on Ascend/GPU): "
        f"saving {mb(est.optimizer_bytes * (1 - 1 / n))} at {n} ranks")
