"""Job configuration: one frozen dataclass, three presets as plain data, JSON in the run directory.

A notebook's parameters cell holds a ``preset`` and overrides that default to ``None``;
``job_config(preset, **overrides)`` fills the rest from the preset, checks every field and returns a
``JobConfig`` that the launcher writes to ``<run_dir>/config.json`` for the workers to read.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from helpers.errors import ConfigError

DEVICE_TARGETS = ("CPU", "GPU", "Ascend")
TASKS = ("train", "noop", "grad_check")   # grad_check: helpers.gradcheck.run_task (chapter 02)
SAMPLERS = ("distributed_shuffle", "distributed", "contiguous", "stratified")
LOSS_SCALES = ("fixed", "dynamic")
LR_SCHEDULES = ("constant", "cosine")
FAIL_MODES = ("raise", "hang")


@dataclass(frozen=True)
class JobConfig:
    """Everything a worker needs to build its data, model and train step (the launcher's contract)."""

    name: str = "job"
    chapter: str = "00"
    task: str = "train"
    # where and how many
    device_target: str = "CPU"
    world_size: int = 8
    local_world_size: int | None = None       # None: all ranks on this node
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 0                      # 0: the launcher picks a free port
    # data
    data_dir: str = "data/digits"
    image_size: int = 32
    global_batch: int = 64
    sampler: str = "distributed_shuffle"
    dataset_workers: int = 1
    evaluate: bool = False                    # held-out accuracy after training (all ranks, summed)
    # model and optimiser
    arch: str = "resnet18"
    width: float = 0.125
    stem: str = "small"
    conv_impl: str = "auto"                   # "native", "im2col", or "auto": measured per machine (helpers.conv_choice)
    lr: float = 0.05
    lr_batch: int | None = None               # lr is for this global batch, scaled linearly to global_batch (None: as is)
    lr_schedule: str = "constant"             # "constant" or "cosine" (to 0 over ``steps``), after the warm-up
    warmup_fraction: float = 0.0              # the first steps x this: linear warm-up to the (scaled) lr
    label_smoothing: float = 0.0
    decay_norm_and_bias: bool = True          # False: no weight decay on BatchNorm and bias parameters
    momentum: float = 0.9
    weight_decay: float = 1e-4
    steps: int = 4
    seed: int = 1
    # set_auto_parallel_context(comm_fusion=...); {} (empty) leaves MindSpore's default: one AllReduce per
    # gradient tensor. The CPU presets fuse them all ("auto"; benchmarks/results/comm_fusion.json has the gain).
    comm_fusion: dict | None = None
    # chapter switches (each read by the module that implements it)
    micro_batch: int | None = None            # per-rank micro-batch; None: the whole per-rank batch (no accumulation)
    accumulation_steps: int = 1               # micro-steps per optimizer step (helpers.accumulate)
    mem_cap_mb: int | None = None             # per-rank memory cap: address space on CPU, max_size of the device pool on GPU/Ascend
    profile: bool = False                     # mindspore.profiler on every rank (helpers.worker.profiling_session)
    profile_skip_steps: int = 1               # steps not profiled first (graph compilation)
    amp_level: str = "O0"                     # mindspore.amp level O0..O3 (helpers.recipe.build_train_step)
    loss_scale: str = "fixed"                 # AMP O2/O3: "fixed" (128, never skips a step) or "dynamic" (skips overflows)
    grad_reduce: bool = True                  # False: no gradient AllReduce (STAND_ALONE; ranks drift apart)
    cell_comm_fusion: bool = False            # Cell.set_comm_fusion(i) per top-level cell, as the blog does
    strategy_file: str | None = None          # chapter 03: hybrid parallel driven by this strategy file (helpers.hybrid)
    num_classes: int | None = None            # classifier size; None: the class folders; more pads with image-less classes
    init_checkpoint: str | None = None        # dir of rank_<r>/*.ckpt to start from (helpers.hybrid.load_rank_checkpoint)
    rehearsal: bool = False                   # a gpu8 preset scaled down to run on CPU (helpers.rehearsal)
    # runtime
    threads_per_rank: int = 1
    bind_cores: bool = False                  # CPU, more ranks than cores: pin local rank r to core r % cores
    compile_cache: bool = True                # reuse compiled graphs across jobs (runs/compile_cache)
    timeout_s: float = 900.0
    stall_s: float = 60.0                     # a rank with no new step for max(this, 10 x median step) is hung (helpers.stall)
    compile_stall_s: float = 900.0            # the same before a rank's first step (graph compilation, data start-up)
    glog_v: int = 3
    env: dict = field(default_factory=dict)
    # test hooks: make one rank fail at one step (launcher failure tests): "raise" an error or "hang" forever
    fail_rank: int | None = None
    fail_step: int = 0
    fail_mode: str = "raise"

    @property
    def batch_per_rank(self) -> int:
        return self.global_batch // self.world_size

    @property
    def scaled_lr(self) -> float:
        """The peak learning rate: ``lr`` scaled linearly from ``lr_batch`` to ``global_batch`` (Goyal et al.)."""
        return self.lr * self.global_batch / self.lr_batch if self.lr_batch else self.lr

    @property
    def micro_batch_size(self) -> int:
        return self.micro_batch or self.batch_per_rank

    @property
    def local_workers(self) -> int:
        return self.world_size if self.local_world_size is None else self.local_world_size

    def validate(self) -> "JobConfig":
        def bad(fld, msg):
            raise ConfigError(f"{fld}: {msg} (got {getattr(self, fld)!r})")

        if self.device_target not in DEVICE_TARGETS:
            bad("device_target", f"must be one of {DEVICE_TARGETS}")
        if self.task not in TASKS:
            bad("task", f"must be one of {TASKS}")
        if self.conv_impl not in ("auto", "native", "im2col"):
            bad("conv_impl", "must be 'auto', 'native' or 'im2col'")
        if self.sampler not in SAMPLERS:
            bad("sampler", f"must be one of {SAMPLERS}")
        if self.world_size < 1:
            bad("world_size", "must be at least 1")
        if not 1 <= self.local_workers <= self.world_size:
            bad("local_world_size", "must be between 1 and world_size")
        if self.global_batch < 1 or self.global_batch % self.world_size:
            bad("global_batch", f"must be a positive multiple of world_size={self.world_size}")
        if self.accumulation_steps < 1:
            bad("accumulation_steps", "must be at least 1")
        if self.micro_batch_size * self.accumulation_steps != self.batch_per_rank:
            bad("micro_batch", f"micro_batch x accumulation_steps must equal the per-rank batch "
                               f"{self.batch_per_rank} (global_batch {self.global_batch} / {self.world_size} ranks); "
                               f"accumulation_steps={self.accumulation_steps}")
        if self.accumulation_steps > 1 and self.amp_level != "O0":
            bad("amp_level", "gradient accumulation (helpers.accumulate) runs in float32: its micro-steps apply no "
                             "loss scale, so use amp_level='O0' with accumulation_steps > 1")
        if self.mem_cap_mb is not None and self.mem_cap_mb < 64:
            bad("mem_cap_mb", "must be at least 64 MB")
        if self.steps < 1:
            bad("steps", "must be at least 1")
        if self.width <= 0:
            bad("width", "must be positive")
        if self.image_size < 8:
            bad("image_size", "must be at least 8 pixels")
        if self.timeout_s <= 0:
            bad("timeout_s", "must be positive")
        if self.amp_level not in ("O0", "O1", "O2", "O3"):
            bad("amp_level", "must be one of 'O0', 'O1', 'O2', 'O3'")
        if self.loss_scale not in LOSS_SCALES:
            bad("loss_scale", f"must be one of {LOSS_SCALES}")
        if self.lr_schedule not in LR_SCHEDULES:
            bad("lr_schedule", f"must be one of {LR_SCHEDULES}")
        if self.lr_batch is not None and self.lr_batch < 1:
            bad("lr_batch", "must be a positive number of images or None")
        if not 0.0 <= self.warmup_fraction < 1.0:
            bad("warmup_fraction", "must be in [0, 1)")
        if not 0.0 <= self.label_smoothing < 1.0:
            bad("label_smoothing", "must be in [0, 1)")
        if not isinstance(self.grad_reduce, bool) or not isinstance(self.cell_comm_fusion, bool):
            bad("grad_reduce" if not isinstance(self.grad_reduce, bool) else "cell_comm_fusion", "must be a boolean")
        if self.profile and self.steps <= self.profile_skip_steps:
            bad("steps", f"must exceed profile_skip_steps={self.profile_skip_steps} to profile anything")
        if self.num_classes is not None and (isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < 1):
            bad("num_classes", "must be a positive int or None")
        if self.fail_mode not in FAIL_MODES:
            bad("fail_mode", f"must be one of {FAIL_MODES}")
        if not 0 < self.stall_s <= self.compile_stall_s:
            bad("stall_s", f"must be positive and at most compile_stall_s={self.compile_stall_s}")
        if self.fail_rank is not None and not 0 <= self.fail_rank < self.world_size:
            bad("fail_rank", "must be a rank of the job")
        return self

    def replace(self, **changes) -> "JobConfig":
        return dataclasses.replace(self, **changes).validate()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_json())
        return path

    @classmethod
    def load(cls, path: str | Path) -> "JobConfig":
        data = json.loads(Path(path).read_text())
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown config fields {unknown}")
        return cls(**data).validate()


# Presets are data: a name maps to field values. 'ci' runs in seconds on 2 cores, 'cpu' in minutes,
# 'gpu8' is the real thing on an 8-card server; ``rehearse=True`` scales it down to run on CPU (helpers.rehearsal).
FUSE_ALL = {"allreduce": {"mode": "auto", "config": None}}
PRESETS: dict[str, dict] = {
    "ci": dict(device_target="CPU", arch="resnet18", width=0.125, stem="small", image_size=32,
               global_batch=64, steps=4, conv_impl="auto", data_dir="data/digits", timeout_s=600.0,
               comm_fusion=FUSE_ALL, bind_cores=True),
    "cpu": dict(device_target="CPU", arch="resnet18", width=0.25, stem="small", image_size=32,
                global_batch=128, steps=30, conv_impl="auto", data_dir="data/digits", timeout_s=1800.0,
                comm_fusion=FUSE_ALL, bind_cores=True),
    # The published ResNet-50 recipe (MindSpore's model zoo, NVIDIA's DeepLearningExamples): SGD momentum 0.9,
    # lr 0.1 per 256 images scaled linearly with the global batch, warm-up then cosine decay, label smoothing 0.1,
    # no weight decay on BatchNorm and biases, AMP O2 with a dynamic loss scale. 128 images per card fit a 16 GB
    # card in O2 (helpers.memory); a few hundred steps show the mechanism, they do not train a model.
    "gpu8": dict(device_target="GPU", arch="resnet50", width=1.0, stem="imagenet", image_size=224,
                 global_batch=1024, steps=300, conv_impl="native", data_dir="/data/imagenet",
                 lr=0.1, lr_batch=256, lr_schedule="cosine", warmup_fraction=0.1, label_smoothing=0.1,
                 decay_norm_and_bias=False, momentum=0.9, weight_decay=1e-4, amp_level="O2", loss_scale="dynamic",
                 dataset_workers=8, threads_per_rank=8, timeout_s=7200.0, comm_fusion=FUSE_ALL),
}


def job_config(preset: str = "cpu", rehearse: bool = False, **overrides) -> JobConfig:
    """The preset's values (scaled down for CPU when ``rehearse``), then every override that is not None."""
    if preset not in PRESETS:
        raise ConfigError(f"preset: must be one of {sorted(PRESETS)} (got {preset!r})")
    values = dict(PRESETS[preset])
    if rehearse:
        from helpers.rehearsal import rehearsal_overrides

        values.update(rehearsal_overrides(preset))
    known = {f.name for f in dataclasses.fields(JobConfig)}
    for key, value in overrides.items():
        if key not in known:
            raise ConfigError(f"{key}: not a job config field (known: {sorted(known)})")
        if value is not None:
            values[key] = value
    return JobConfig(**values).validate()


def config_table(cfg: JobConfig, fields=("name", "device_target", "world_size", "arch", "width", "stem",
                                         "conv_impl", "image_size", "global_batch", "steps", "data_dir")):
    """Rows (field, value) of the settings a reader wants to see before a job runs."""
    rows = [(f, getattr(cfg, f)) for f in fields]
    rows.insert(fields.index("global_batch") + 1, ("batch_per_rank", cfg.batch_per_rank))
    if cfg.rehearsal:
        rows.append(("path", "gpu8 rehearsed on CPU: each card-only part swapped for its CPU stand-in "
                             "(helpers.rehearsal.STAND_INS)"))
    return rows
