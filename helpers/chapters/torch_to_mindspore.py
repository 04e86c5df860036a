"""The PyTorch -> MindSpore table chapter 00 shows: each distributed-training piece a PyTorch user knows and
the MindSpore 2.10 API that does the job; each row's note goes to the chapter's appendix (the full table)."""

from __future__ import annotations

from helpers.output.tables import md_table

# Every MindSpore name in the table is written in full (``mindspore.x.y``) inside backticks, so the table can
# be checked against the wheel: tests/unit/test_torch_to_mindspore.py resolves each of MINDSPORE_NAMES and
# requires the set of ``mindspore.*`` names inside the full table's backticks to equal it. The chapter shows
# the first three columns (``table_markdown``); the appendix holds the full table with the notes
# (``full_table_markdown``, checked to be in docs/appendix/00_environment_setup.md verbatim). The course configures
# parallelism with ``set_auto_parallel_context``; its docstring says it will give way to
# ``mindspore.parallel.auto_parallel.AutoParallel`` (Ascend only).
HEADERS = ("what", "PyTorch", "MindSpore 2.10", "note")

ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("launcher",
     "`torchrun` (`torch.distributed.run`)",
     "`msrun` (`mindspore.parallel.cluster.run`)",
     "The wheel's console script; flags `--worker_num`, `--local_worker_num`, `--master_port`, `--log_dir`."),
    ("process group init",
     "`torch.distributed.init_process_group`",
     "`mindspore.communication.init`",
     ("Backend from the device: HCCL, NCCL, MCCL (CPU); "
      "`mindspore.ops.communication.init_process_group` is Ascend-only.")),
    ("rank and world size",
     "`torch.distributed.get_rank`, `torch.distributed.get_world_size`",
     "`mindspore.communication.get_rank`, `mindspore.communication.get_group_size`",
     "Call after `init()`; the world size is the world group's size."),
    ("DDP",
     "`torch.nn.parallel.DistributedDataParallel`",
     ("`mindspore.set_auto_parallel_context(parallel_mode=mindspore.ParallelMode.DATA_PARALLEL, "
      "gradients_mean=True)` + `mindspore.nn.DistributedGradReducer`"),
     ("`mindspore.nn.TrainOneStepCell` and `mindspore.train.Model` insert the reducer; "
      "hand-written steps call it.")),
    ("DistributedSampler",
     "`torch.utils.data.DistributedSampler`",
     ("`mindspore.dataset.DistributedSampler(num_shards, shard_id)`, "
      "or `num_shards=`, `shard_id=` on a dataset (`mindspore.dataset.ImageFolderDataset`)"),
     "`num_shards` is the world size, `shard_id` the rank; most datasets accept both."),
    ("custom sampler",
     "`torch.utils.data.Sampler` subclass",
     "`mindspore.dataset.Sampler` subclass",
     "Override `__iter__` to yield indices; `sampler=` excludes `num_shards`, so shard inside it."),
    ("profiler",
     "`torch.profiler.profile`, `torch.profiler.schedule`, `torch.profiler.tensorboard_trace_handler`",
     ("`mindspore.profiler.profile`, `mindspore.profiler.schedule`, "
      "`mindspore.profiler.tensorboard_trace_handler`"),
     "Same names and `schedule=`, `on_trace_ready=` arguments; call `prof.step()` each step."),
    ("bucketed gradient fusion",
     "`DistributedDataParallel(bucket_cap_mb=25)`",
     "`mindspore.set_auto_parallel_context(comm_fusion={'allreduce': {'mode': 'size', 'config': 32}})`",
     "Modes `auto`, `size` (threshold), `index` (split points, like `all_reduce_fusion_config=`)."),
    ("FSDP / ZeRO",
     "`torch.distributed.fsdp.FullyShardedDataParallel`, `torch.distributed.fsdp.fully_shard`",
     "`mindspore.set_auto_parallel_context(enable_parallel_optimizer=True, parallel_optimizer_config={...})`",
     ("Shards optimizer state (more with `optimizer_level`); "
      "DATA_PARALLEL: only Lamb, AdamWeightDecay, on Ascend.")),
    ("tensor parallel",
     "`torch.distributed.tensor.DTensor`, `torch.distributed.tensor.parallel.parallelize_module`",
     ("`mindspore.ops.Primitive.shard`, `mindspore.nn.Cell.shard`, `mindspore.parallel.Layout` "
      "under `parallel_mode=mindspore.ParallelMode.SEMI_AUTO_PARALLEL`"),
     "Graph mode; needs Ascend or GPU (CPU: data parallel only); `strategy_ckpt_config=` saves the strategy."),
    ("AMP",
     "`torch.autocast`, `torch.amp.GradScaler`",
     ("`mindspore.amp.auto_mixed_precision` + `mindspore.amp.DynamicLossScaler`, or both in "
      "`mindspore.amp.build_train_network(level=..., loss_scale_manager=...)`"),
     ("`amp_level='auto'` is autocast-like; on CPU the only loss scale is "
      "`mindspore.amp.FixedLossScaleManager(drop_overflow_update=False)`.")),
    ("gradient accumulation",
     "`loss / K` + `DistributedDataParallel.no_sync()`",
     ("A hand-written loop: `mindspore.value_and_grad`, `mindspore.ops.assign_add` into accumulators, "
      "`mindspore.nn.DistributedGradReducer` every K-th step"),
     ("`mindspore.train.Model` has no accumulation argument; "
      "`mindspore.parallel.nn.GradAccumulation` is for Ascend static graphs.")),
    ("activation checkpointing",
     "`torch.utils.checkpoint.checkpoint`",
     "`mindspore.nn.Cell.recompute`, or `mindspore.recompute(block, *args)`",
     "Call it on blocks, not also on their parent; block outputs are kept."),
    ("all-reduce",
     "`torch.distributed.all_reduce`",
     "`mindspore.ops.communication.all_reduce` (function), `mindspore.ops.AllReduce` (graph operator)",
     ("`mindspore.communication.comm_func.all_reduce` is deprecated since 2.9; "
      "`mindspore.ops.AllReduce` on CPU: sum only.")),
)

# The dotted MindSpore names the table uses (module, function, class, method or enum member).
MINDSPORE_NAMES: tuple[str, ...] = (
    "mindspore.parallel.cluster.run",
    "mindspore.communication.init",
    "mindspore.ops.communication.init_process_group",
    "mindspore.communication.get_rank",
    "mindspore.communication.get_group_size",
    "mindspore.set_auto_parallel_context",
    "mindspore.ParallelMode.DATA_PARALLEL",
    "mindspore.nn.DistributedGradReducer",
    "mindspore.nn.TrainOneStepCell",
    "mindspore.train.Model",
    "mindspore.dataset.DistributedSampler",
    "mindspore.dataset.ImageFolderDataset",
    "mindspore.dataset.Sampler",
    "mindspore.profiler.profile",
    "mindspore.profiler.schedule",
    "mindspore.profiler.tensorboard_trace_handler",
    "mindspore.ops.Primitive.shard",
    "mindspore.nn.Cell.shard",
    "mindspore.parallel.Layout",
    "mindspore.ParallelMode.SEMI_AUTO_PARALLEL",
    "mindspore.amp.auto_mixed_precision",
    "mindspore.amp.DynamicLossScaler",
    "mindspore.amp.build_train_network",
    "mindspore.amp.FixedLossScaleManager",
    "mindspore.value_and_grad",
    "mindspore.ops.assign_add",
    "mindspore.parallel.nn.GradAccumulation",
    "mindspore.nn.Cell.recompute",
    "mindspore.recompute",
    "mindspore.ops.communication.all_reduce",
    "mindspore.ops.AllReduce",
    "mindspore.communication.comm_func.all_reduce",
)

# (MindSpore callable, keyword argument) pairs the table relies on; each keyword is in the callable's
# signature or, for ``**kwargs`` functions such as set_auto_parallel_context, in its docstring's Args.
MINDSPORE_KEYWORDS: tuple[tuple[str, str], ...] = (
    ("mindspore.set_auto_parallel_context", "parallel_mode"),
    ("mindspore.set_auto_parallel_context", "gradients_mean"),
    ("mindspore.set_auto_parallel_context", "comm_fusion"),
    ("mindspore.set_auto_parallel_context", "all_reduce_fusion_config"),
    ("mindspore.set_auto_parallel_context", "enable_parallel_optimizer"),
    ("mindspore.set_auto_parallel_context", "parallel_optimizer_config"),
    ("mindspore.set_auto_parallel_context", "strategy_ckpt_config"),
    ("mindspore.dataset.DistributedSampler", "num_shards"),
    ("mindspore.dataset.DistributedSampler", "shard_id"),
    ("mindspore.dataset.ImageFolderDataset", "num_shards"),
    ("mindspore.dataset.ImageFolderDataset", "shard_id"),
    ("mindspore.dataset.ImageFolderDataset", "sampler"),
    ("mindspore.profiler.profile", "schedule"),
    ("mindspore.profiler.profile", "on_trace_ready"),
    ("mindspore.amp.auto_mixed_precision", "amp_level"),
    ("mindspore.amp.build_train_network", "level"),
    ("mindspore.amp.build_train_network", "loss_scale_manager"),
    ("mindspore.amp.FixedLossScaleManager", "drop_overflow_update"),
    ("mindspore.recompute", "block"),
)

# msrun's console script as the wheel's entry_points.txt declares it.
MSRUN_ENTRY_POINT = "mindspore.parallel.cluster.run:main"


def table_markdown() -> str:
    """The chapter's table as GitHub markdown: what | PyTorch | MindSpore 2.10 (the notes are in the appendix)."""
    return md_table([row[:3] for row in ROWS], HEADERS[:3])


def full_table_markdown() -> str:
    """The full table, notes included, as the chapter's appendix holds it: what | PyTorch | MindSpore 2.10 | note."""
    return md_table(ROWS, HEADERS)
