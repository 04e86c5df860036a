"""Job configuration: one frozen dataclass, three presets as plain data, JSON in the run directory.

A notebook's parameters cell holds a ``preset`` and overrides that default to ``None``;
``job_config(preset, **overrides)`` fills the rest from the preset, checks every field and returns a
``JobConfig`` that the launcher writes to ``<run_dir>/config.json`` for the workers to read.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from helpers.core.comm_fusion_value import FUSION_MODES, comm_fusion_problem  # noqa: F401 - validate() uses it
from helpers.core.config_table import config_table  # noqa: F401 - where chapters import it from
from helpers.core.errors import ConfigError
from helpers.core.rehearsal import CARD_TARGETS   # what a rehearsal on CPU may stand for (rehearsed_target)
from helpers.core.resnet_layout import ARCHS
from helpers.core.slurm_settings import LAUNCHERS, launcher_defaults, slurm_problem

DEVICE_TARGETS = ("CPU", "GPU", "Ascend")
# MindSpore's dataset refuses more workers than CPUs (mindspore/dataset/core/validator_helpers.py)
DATASET_WORKERS_BOUND = "if value < 1 or value > cpu_count():"
log = logging.getLogger(__name__)
TASKS = ("train", "noop", "grad_check")   # grad_check: helpers.train.accumulation_check.run_task (chapter 02)
SAMPLERS = ("distributed_shuffle", "distributed", "contiguous", "stratified")
LOSS_SCALES = ("fixed", "dynamic")
LR_SCHEDULES = ("constant", "cosine")
FAIL_MODES = ("raise", "hang", "slow_eval", "eval_hang")   # the last two inside evaluation
BAD_IMAGES = ("stop", "set_aside")
ARCH_NAMES = tuple(ARCHS)                  # what helpers.train.models.build_model builds
STEMS = ("imagenet", "small")              # helpers.train.models.ResNet's stems
CONV_IMPLS = ("auto", "native", "im2col")
AMP_LEVELS = ("O0", "O1", "O2", "O3")
# comm_fusion modes per communication type (_set_*_comm_fusion in mindspore/parallel/_auto_parallel_context.py)
INT_FIELDS = ("steps", "global_batch", "world_size", "accumulation_steps", "image_size", "seed", "dataset_workers",
              "threads_per_rank", "node_rank", "master_port", "profile_skip_steps", "fail_step", "phase_rounds",
              "bn_recalibration_batches")
OPTIONAL_INT_FIELDS = ("micro_batch", "local_world_size", "lr_batch", "mem_cap_mb", "fail_rank")
SECONDS_FIELDS = ("timeout_s", "stall_s", "compile_stall_s")


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
    launcher: str = "local"                   # "local" (msrun here) or "slurm" (sbatch; helpers.job.launchers)
    slurm: dict = field(default_factory=dict)  # nodes, partition, gres, time_limit, account, extra_args (slurm_settings)
    # data
    data_dir: str = "data/digits"
    image_size: int = 32
    global_batch: int = 64
    sampler: str = "distributed_shuffle"
    sampler_code: str = ""                    # "file.py:Class" in the run folder: 'stratified' is this class (a cell's)
    accumulation_code: str = ""               # "file.py" in the run folder with a cell's MicroStep and ApplyStep
    phase_samplers: tuple = ()                # several samplers as phases of one job (helpers.train.phases); () off
    phase_rounds: int = 2                     # the phases take turns in this many rounds of steps
    phase_seeds: tuple = ()                   # each phase once per seed (weight init, data order); ()
    dataset_workers: int = 1
    evaluate: bool = False                    # held-out accuracy after training (all ranks, summed)
    bn_recalibration_batches: int = 0         # precise BN before evaluating, from this many train batches per rank; 0: off
    # model and optimiser
    arch: str = "resnet18"
    width: float = 0.125
    stem: str = "small"
    conv_impl: str = "auto"                   # "native", "im2col", or "auto": measured per machine (helpers.train.conv_autoselect)
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
    comm_fusion: dict | None = None           # set_auto_parallel_context's; {}: one AllReduce per gradient tensor
    # chapter switches (each read by the module that implements it)
    micro_batch: int | None = None            # per-rank micro-batch; None: the whole per-rank batch (no accumulation)
    accumulation_steps: int = 1               # micro-steps per optimizer step (helpers.train.grad_accumulation)
    mem_cap_mb: int | None = None             # per-rank memory cap: address space on CPU, max_size of the device pool on GPU/Ascend
    profile: bool = False                     # mindspore.profiler on every rank (helpers.train.profiler_session)
    profile_skip_steps: int = 1               # steps not profiled first (graph compilation)
    amp_level: str = "O0"                     # mindspore.amp level O0..O3 (helpers.train.recipe.build_train_step)
    loss_scale: str = "fixed"                 # AMP O2/O3: "fixed" (128, never skips a step) or "dynamic" (skips overflows)
    grad_reduce: bool = True                  # False: no gradient AllReduce (STAND_ALONE; ranks drift apart)
    cell_comm_fusion: bool = False            # Cell.set_comm_fusion(i) per top-level cell, as the blog does
    strategy_file: str | None = None          # chapter 03: hybrid parallel driven by this strategy file (helpers.train.hybrid_step)
    num_classes: int | None = None            # classifier size; None: the class folders; more pads with image-less classes
    init_checkpoint: str | None = None        # dir of rank_<r>/*.ckpt to start from (helpers.train.hybrid_classifier.load_rank_checkpoint)
    rehearsal: bool = False                   # a gpu8 preset scaled down to run on CPU (helpers.core.rehearsal)
    rehearsed_target: str | None = None       # a rehearsal: the card it stands for ("GPU"/"Ascend"); it runs on CPU
    adjusted: dict = field(default_factory=dict)   # field -> why job_config lowered the preset's value on this machine
    # runtime
    threads_per_rank: int = 1
    bind_cores: bool = False                  # CPU, more ranks than cores: pin local rank r to core r % cores
    rank_cpu_share: float | None = None       # CPU: each rank capped at this fraction of a core while phases train (core.cpu_share)
    keep_fp32: bool = True                    # cards: float32 in float32 (Ascend: not on 910A; GPU: TF32 off)
    deterministic: bool = False               # cards: set_deterministic before init(); GPU: backward convs only
    compile_cache: bool = True                # reuse compiled graphs across jobs (runs/compile_cache)
    timeout_s: float = 900.0
    stall_s: float = 60.0                     # a rank with no new step for max(this, 10 x median step) is hung (helpers.job.stall)
    compile_stall_s: float = 900.0            # the same before a rank's first step (graph compilation, data start-up)
    glog_v: int = 3
    env: dict = field(default_factory=dict)
    # test hooks: make one rank fail at one step (launcher failure tests): "raise" an error or "hang" forever
    fail_rank: int | None = None
    fail_step: int = 0
    fail_mode: str = "raise"
    # corrupt image files found before launch: "stop" names them and refuses, "set_aside" moves them out of the split
    bad_images: str = "stop"

    def __post_init__(self):
        for f in ("phase_samplers", "phase_seeds"):    # JSON has no tuples: keep one form, so configs compare equal
            if isinstance(getattr(self, f), list):
                object.__setattr__(self, f, tuple(getattr(self, f)))

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
    def caps_address_space(self) -> bool:
        """CPU with ``mem_cap_mb``: each rank's address space is capped (``train.worker.apply_cpu_memory_cap``)."""
        return self.device_target == "CPU" and bool(self.mem_cap_mb)

    @property
    def progress_steps(self) -> int:
        """The steps a rank's progress counts: every phase's (``phase_samplers`` x ``phase_seeds``) in turn."""
        return self.steps * max(1, len(self.phase_samplers)) * max(1, len(self.phase_seeds))

    @property
    def local_workers(self) -> int:
        return self.world_size if self.local_world_size is None else self.local_world_size

    def validate(self) -> "JobConfig":
        """``self`` if every field is acceptable; else one ``ConfigError`` with a line per bad field
        (``<field>: <what is accepted> (got <value>)``); its ``fields`` and ``problems`` hold the lists."""
        bad = _Problems(self)
        for check in (_check_types, _check_choices, _check_sizes, _check_training, _check_placement):
            check(self, bad)
        comm = comm_fusion_problem(self.comm_fusion)
        if comm:
            bad("comm_fusion", comm)
        if bad.lines:
            err = ConfigError("\n".join(bad.lines.values()))
            err.fields, err.problems = list(bad.lines), list(bad.lines.values())
            raise err
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


# ------------------------------------------------------------------------------- the checks of validate()


class _Problems:
    """Bad fields in check order, one line each (a field's first problem wins); ``ok`` says a field is clean."""

    def __init__(self, cfg):
        self.cfg, self.lines = cfg, {}

    def __call__(self, fld, msg):
        self.lines.setdefault(fld, f"{fld}: {msg} (got {getattr(self.cfg, fld)!r})")

    def ok(self, *flds) -> bool:
        return not any(f in self.lines for f in flds)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_types(c: JobConfig, bad: _Problems) -> None:
    for f in INT_FIELDS:
        if not _is_int(getattr(c, f)):
            bad(f, "must be a whole number (an int; not a float such as 2.5 or 64.0, not a bool)")
    for f in OPTIONAL_INT_FIELDS:
        if getattr(c, f) is not None and not _is_int(getattr(c, f)):
            bad(f, "must be an int (not a float or bool) or None")
    for f in SECONDS_FIELDS:
        v = getattr(c, f)
        if not (_is_number(v) and math.isfinite(v) and v > 0):
            bad(f, "must be positive and finite: a number of seconds (not NaN, inf or a bool)")
    for f in ("grad_reduce", "cell_comm_fusion", "keep_fp32", "deterministic"):
        if not isinstance(getattr(c, f), bool):
            bad(f, "must be a boolean")


def _check_choices(c: JobConfig, bad: _Problems) -> None:
    choices = (("device_target", DEVICE_TARGETS), ("task", TASKS), ("conv_impl", CONV_IMPLS),
               ("sampler", SAMPLERS), ("arch", ARCH_NAMES), ("stem", STEMS), ("amp_level", AMP_LEVELS),
               ("loss_scale", LOSS_SCALES), ("lr_schedule", LR_SCHEDULES), ("fail_mode", FAIL_MODES),
               ("bad_images", BAD_IMAGES))
    worded = {"conv_impl": "must be 'auto', 'native' or 'im2col'",           # the messages these had before
              "amp_level": "must be one of 'O0', 'O1', 'O2', 'O3'"}
    for f, allowed in choices:
        if not (isinstance(getattr(c, f), str) and getattr(c, f) in allowed):
            bad(f, worded.get(f, f"must be one of {allowed}"))


def _check_sizes(c: JobConfig, bad: _Problems) -> None:
    """Ranks, batch, micro-batch and accumulation: the numbers that must fit together."""
    if bad.ok("world_size") and c.world_size < 1:
        bad("world_size", "must be at least 1")
    if bad.ok("world_size", "local_world_size"):
        if not 1 <= c.local_workers <= c.world_size:
            bad("local_world_size", "must be between 1 and world_size")
        elif c.world_size % c.local_workers:
            bad("local_world_size", f"must divide world_size={c.world_size} (every node runs as many ranks)")
    if bad.ok("world_size", "global_batch") and (c.global_batch < 1 or c.global_batch % c.world_size):
        bad("global_batch", f"must be a positive multiple of world_size={c.world_size}")
    if bad.ok("accumulation_steps") and c.accumulation_steps < 1:
        bad("accumulation_steps", "must be at least 1")
    if bad.ok("world_size", "global_batch", "accumulation_steps", "micro_batch") \
            and c.micro_batch_size * c.accumulation_steps != c.batch_per_rank:
        bad("micro_batch", f"micro_batch x accumulation_steps must equal the per-rank batch "
                           f"{c.batch_per_rank} (global_batch {c.global_batch} / {c.world_size} ranks); "
                           f"accumulation_steps={c.accumulation_steps}")
    if bad.ok("accumulation_steps") and c.accumulation_steps > 1 and c.amp_level != "O0":
        bad("amp_level", "gradient accumulation (helpers.train.grad_accumulation) runs in float32: its micro-steps apply no "
                         "loss scale, so use amp_level='O0' with accumulation_steps > 1")
    if bad.ok("mem_cap_mb") and c.mem_cap_mb is not None and c.mem_cap_mb < 64:
        bad("mem_cap_mb", "must be at least 64 MB")
    if bad.ok("image_size") and c.image_size < 8:
        bad("image_size", "must be at least 8 pixels")
    if not (_is_number(c.width) and c.width > 0):
        bad("width", "must be positive")
    if c.num_classes is not None and (not _is_int(c.num_classes) or c.num_classes < 1):
        bad("num_classes", "must be a positive int or None")


def _check_training(c: JobConfig, bad: _Problems) -> None:
    """Steps, learning-rate schedule and profiling."""
    if bad.ok("steps") and c.steps < 1:
        bad("steps", "must be at least 1")
    if bad.ok("lr_batch") and c.lr_batch is not None and c.lr_batch < 1:
        bad("lr_batch", "must be a positive number of images or None")
    for f in ("warmup_fraction", "label_smoothing"):
        if not (_is_number(getattr(c, f)) and 0.0 <= getattr(c, f) < 1.0):
            bad(f, "must be in [0, 1)")
    if bad.ok("profile_skip_steps") and c.profile_skip_steps < 0:
        bad("profile_skip_steps", "must be at least 0")
    if c.profile and bad.ok("steps", "profile_skip_steps") and c.steps <= c.profile_skip_steps:
        bad("steps", f"must exceed profile_skip_steps={c.profile_skip_steps} to profile anything")
    _check_phases(c, bad)


def _check_phases(c: JobConfig, bad: _Problems) -> None:
    """Samplers as phases of one plain training job: distinct known samplers, at least one step per round."""
    p = c.phase_samplers
    if not (isinstance(p, (list, tuple)) and all(isinstance(k, str) and k in SAMPLERS for k in p)
            and len(set(p)) == len(p)):
        bad("phase_samplers", f"must be a list of distinct samplers from {SAMPLERS} (empty: no phases)")
    elif p and (c.task != "train" or c.strategy_file or c.profile or c.accumulation_steps != 1):
        bad("phase_samplers", "phases run plain training only (task 'train', no strategy_file, profile or "
                              "gradient accumulation)")
    if bad.ok("bn_recalibration_batches") and c.bn_recalibration_batches < 0:
        bad("bn_recalibration_batches", "must be at least 0 (0: evaluate with BatchNorm's running statistics)")
    if p and bad.ok("phase_rounds", "steps") and not 1 <= c.phase_rounds <= c.steps:
        bad("phase_rounds", f"must be between 1 and steps={c.steps}")
    if c.sampler_code and not (str(c.sampler_code).partition(":")[0].endswith(".py") and ":" in c.sampler_code):
        bad("sampler_code", "must be 'file.py:ClassName' (a file in the run folder), or '' for the course's sampler")
    if c.accumulation_code and not str(c.accumulation_code).endswith(".py"):
        bad("accumulation_code", "must be 'file.py' (a file in the run folder), or '' for chapter 02's code cell")
    s = c.phase_seeds
    if s and not (p and all(_is_int(x) and x >= 0 for x in s) and len(set(s)) == len(s)):
        bad("phase_seeds", "must be distinct seeds >= 0, with phase_samplers (empty: cfg.seed only)")


def _check_placement(c: JobConfig, bad: _Problems) -> None:
    """Nodes, ports, threads and workers, the watchdog's times, the failure test hook."""
    if bad.ok("world_size", "local_world_size", "node_rank"):
        nodes = c.world_size // c.local_workers
        if not 0 <= c.node_rank < nodes:
            bad("node_rank", f"must be in 0..{nodes - 1}: the job has {nodes} node(s) "
                             f"(world_size {c.world_size} / {c.local_workers} ranks per node)")
    if bad.ok("master_port") and not (c.master_port == 0 or 1024 <= c.master_port <= 65535):
        bad("master_port", "must be 0 (the launcher picks a free port) or a port in 1024..65535")
    for f in ("threads_per_rank", "dataset_workers"):
        if bad.ok(f) and getattr(c, f) < 1:
            bad(f, "must be at least 1")
    if bad.ok("stall_s", "compile_stall_s") and not 0 < c.stall_s <= c.compile_stall_s:
        bad("stall_s", f"must be positive and at most compile_stall_s={c.compile_stall_s}")
    if c.rank_cpu_share is not None and not (isinstance(c.rank_cpu_share, (int, float))
                                             and 0 < c.rank_cpu_share <= (os.cpu_count() or 1)):
        bad("rank_cpu_share", f"must be None or a fraction of one core in (0, {os.cpu_count() or 1}]")
    if bad.ok("fail_rank", "world_size") and c.fail_rank is not None and not 0 <= c.fail_rank < c.world_size:
        bad("fail_rank", "must be a rank of the job")
    if c.rehearsed_target is not None and not (c.rehearsal and c.rehearsed_target in CARD_TARGETS):
        bad("rehearsed_target", f"must be None, or with rehearsal=True the card it stands for, one of {CARD_TARGETS}")
    if not (isinstance(c.launcher, str) and c.launcher in LAUNCHERS):
        bad("launcher", f"must be one of {LAUNCHERS}")
    elif slurm_problem(c.slurm, c.world_size, c.launcher):
        bad("slurm", slurm_problem(c.slurm, c.world_size, c.launcher))
    if not (isinstance(c.adjusted, dict) and all(isinstance(v, str) for v in c.adjusted.values())):
        bad("adjusted", "must be a dict of field name -> why the preset's value was lowered")


# Presets are data: a name maps to field values. 'ci' runs in seconds on 2 cores, 'cpu' in minutes,
# 'gpu8' is the real thing on an 8-card server; ``rehearse=True`` scales it down to run on CPU (helpers.core.rehearsal).
# "auto" is a threshold, not one AllReduce: 64 x 256 KiB under data parallel, ~16 MiB buckets (topics.comm_fusion)
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
    # card in O2 (helpers.core.memory_planner); a few hundred steps show the mechanism, they do not train a model.
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
    values = {**PRESETS[preset], **launcher_defaults()}    # COURSE_LAUNCHER / COURSE_SLURM: a room's default
    if rehearse:            # device_target then names the card the rehearsal stands for; the job runs on CPU
        from helpers.core.rehearsal import rehearsal_overrides, rehearsal_target

        card = rehearsal_target(overrides.pop("device_target", None) or values["device_target"])
        values.update(rehearsal_overrides(preset), rehearsed_target=card)
    known = {f.name for f in dataclasses.fields(JobConfig)}
    for key, value in overrides.items():
        if key not in known:
            raise ConfigError(f"{key}: not a job config field (known: {sorted(known)})")
        if value is not None:
            values[key] = value
    _fit_dataset_workers(values, explicit=overrides.get("dataset_workers") is not None)
    return JobConfig(**values).validate()


def dataset_workers_problem(workers) -> str | None:
    """Why MindSpore here refuses ``workers`` dataset workers (more than os.cpu_count(), DATASET_WORKERS_BOUND)."""
    limit = os.cpu_count() or 1
    return (f"dataset_workers: at most {limit}, this machine's CPU count (MindSpore's dataset refuses more "
            f"num_parallel_workers) (got {workers})") if _is_int(workers) and workers > limit else None


def _fit_dataset_workers(values: dict, explicit: bool) -> None:
    """An explicit ``dataset_workers`` MindSpore refuses here: ConfigError; a preset's: lowered to the CPU count."""
    problem, limit = dataset_workers_problem(values.get("dataset_workers")), os.cpu_count() or 1
    if problem and explicit:
        raise ConfigError(problem)
    if problem:
        why = (f"the preset's {values['dataset_workers']} lowered to this machine's {limit} CPUs (MindSpore's "
               "dataset refuses more workers than CPUs)")
        values.update(dataset_workers=limit, adjusted={**values.get("adjusted", {}), "dataset_workers": why})
        log.warning("dataset_workers: %s", why)
