"""Checkers for the exercises at the end of each chapter: one function per exercise.

Each checker takes the participant's ``answer``, works the expected value out with the course's own
helpers (the sampler, the balance metrics, the memory planner, the strategy layout, the profile
parser), prints one line that starts with ``right``, ``wrong, because ...`` or ``not attempted yet``, and
returns ``True`` only for a right answer. ``None`` (the placeholder in the notebooks) is "not attempted
yet"; an answer of the wrong shape is "wrong", never an exception. No checker starts a job: each runs in
well under a second or two in the notebook kernel (chapter 01's imports MindSpore's dataset module).

The inputs each exercise is about are module constants, so the notebook shows the same numbers the
checker uses. Worked answers: ``solutions/ch00.py`` .. ``solutions/ch04.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

# ---------------------------------------------------------------- inputs of the exercises
EX00_WORLD_SIZE = 8                      # the notebook's job: 8 ranks
EX00_WORKER_ORDINAL = 6                  # "the 6th worker", counting from 1
EX00_NODES, EX00_WORKERS_PER_NODE = 2, 4  # two servers A and B, 4 cards each

EX01_CLASSES, EX01_PER_CLASS = 10, 40    # class-sorted labels: 0 x40, 1 x40, ..., 9 x40
EX01_RANKS, EX01_BATCH_PER_RANK = 8, 5
EX01_RANK = 3

EX02_ARCH, EX02_IMAGE_SIZE = "resnet50", 224
EX02_GLOBAL_BATCH, EX02_CARDS, EX02_CAPACITY_GB = 2048, 8, 16   # 256 images per card, 16 GiB cards

EX03_FEATURES, EX03_CLASSES = 2048, 100_000   # ResNet-50's 2048 features, a 100k-class classifier
EX03_DP, EX03_MP = 2, 4                       # 2 data-parallel groups x 4 model-parallel ranks
EX03_RANK = 5

EX04_GRAD_KB = [64, 64, 256, 256, 512, 512, 1024, 1024, 2048, 2048]   # gradient tensors, in order
EX04_BUCKET_KB = 1024                                                 # a bucket closes at >= 1 MB
# One profiled step per rank: (rank, wall step time s, time inside communication kernels s)
EX04_PROFILE = [(0, 1.00, 0.60), (1, 1.00, 0.70), (2, 0.95, 0.50), (3, 1.05, 0.65)]


# ---------------------------------------------------------------- reporting
def _say(ok: bool | None, text: str) -> bool:
    """Print the verdict (the notebooks show it under the cell) and return True only when right."""
    head = "not attempted yet" if ok is None else ("right" if ok else "wrong, because")
    print(f"{head}: {text}" if ok is not False else f"{head} {text}")
    return bool(ok)


def _as_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    return None


def _as_float(value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _pair(answer):
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        return answer[0], answer[1]
    return None


# ---------------------------------------------------------------- chapter 00
def check_00_rank_and_size(answer) -> bool:
    """(rank, group size) that ``get_rank()`` / ``get_group_size()`` return in the 6th worker of the job."""
    if answer is None:
        return _say(None, "set answer = (rank, group_size) for the 6th worker of the 8-rank job")
    pair = _pair(answer)
    if pair is None or _as_int(pair[0]) is None or _as_int(pair[1]) is None:
        return _say(False, f"the answer should be two integers (rank, group_size), got {answer!r}")
    from helpers.config import job_config

    world = job_config("ci", world_size=EX00_WORLD_SIZE).world_size
    ranks = list(range(world))                      # msrun numbers the workers RANK_ID = 0 .. world-1
    rank, size = _as_int(pair[0]), _as_int(pair[1])
    want_rank = ranks[EX00_WORKER_ORDINAL - 1]
    if size != world:
        return _say(False, f"get_group_size() is the number of ranks in the world group: {world}, "
                           f"not {size}")
    if rank != want_rank:
        hint = " (ranks count from 0)" if rank == EX00_WORKER_ORDINAL else ""
        return _say(False, f"the {EX00_WORKER_ORDINAL}th worker has rank {want_rank}, not {rank}{hint}")
    return _say(True, f"rank {want_rank} of {world}: ranks run 0..{world - 1}, and the group size is the "
                      "whole job, whichever node a worker is on")


def check_00_two_nodes(answer) -> bool:
    """The msrun flags on server B of 2 servers x 4 cards: ``{"worker_num", "local_worker_num", "node_rank"}``."""
    if answer is None:
        return _say(None, 'set answer = {"worker_num": ..., "local_worker_num": ..., "node_rank": ...} for server B')
    if not isinstance(answer, dict):
        return _say(False, f"the answer should be a dict of the three flags, got {type(answer).__name__}")
    from helpers.config import job_config
    from helpers.launch import msrun_command

    cfg = job_config("ci", world_size=EX00_NODES * EX00_WORKERS_PER_NODE,
                     local_world_size=EX00_WORKERS_PER_NODE, node_rank=EX00_NODES - 1)
    flags = {}
    for arg in msrun_command(cfg, Path("config.json"), Path("logs")):
        if arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            flags[key] = value
    want = {k: int(flags[k]) for k in ("worker_num", "local_worker_num", "node_rank")}
    wrong = []
    for key, value in want.items():
        got = _as_int(answer.get(key))
        if got != value:
            wrong.append(f"{key} is {value}, not {answer.get(key)!r}")
    if wrong:
        return _say(False, "; ".join(wrong) + " (worker_num counts the whole job, local_worker_num this "
                                                "server's cards, node_rank this server's index from 0)")
    return _say(True, f"on B: msrun --worker_num={want['worker_num']} --local_worker_num="
                      f"{want['local_worker_num']} --node_rank={want['node_rank']} (same master address and port as A)")


# ---------------------------------------------------------------- chapter 01
def ex01_labels() -> np.ndarray:
    """The exercise's class-sorted labels (what an ImageNet-layout reader lists)."""
    return np.repeat(np.arange(EX01_CLASSES), EX01_PER_CLASS).astype(np.int64)


def check_01_rank3_histogram(answer) -> bool:
    """Rank 3's row of the class heatmap under the ``contiguous`` split: images of each class it reads."""
    if answer is None:
        return _say(None, f"set answer = a list of {EX01_CLASSES} counts (images of class 0..{EX01_CLASSES - 1} "
                          f"that rank {EX01_RANK} reads)")
    try:
        got = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        got = None
    if got is None or got.shape != (EX01_CLASSES,):
        return _say(False, f"the answer should be {EX01_CLASSES} numbers, one per class, got {answer!r}")
    from helpers import balance
    from helpers.sampler import shard_indices

    labels = ex01_labels()
    shards = shard_indices("contiguous", labels, EX01_RANKS)
    want = balance.class_histograms(shards, labels, EX01_CLASSES)[EX01_RANK]
    if np.array_equal(got, want):
        seen = [c for c in range(EX01_CLASSES) if want[c]]
        return _say(True, f"rank {EX01_RANK} reads the block {shards[EX01_RANK][0]}..{shards[EX01_RANK][-1]} of "
                          f"the listing: classes {seen} only (max TV of this split: "
                          f"{balance.max_tv(shards, labels):.2f})")
    if np.isclose(got.sum(), 1.0) and np.allclose(got, want / want.sum()):
        return _say(False, "these are shares; the exercise asks for image counts (same shape, times "
                           f"{int(want.sum())})")
    return _say(False, f"rank {EX01_RANK} reads {list(map(int, want))}: {len(labels)} images / {EX01_RANKS} "
                       f"ranks = {len(labels) // EX01_RANKS} consecutive images of the class-sorted listing, "
                       f"starting at {shards[EX01_RANK][0]}")


def check_01_worst_step_classes(answer) -> bool:
    """Distinct classes in the worst global step with ``DistributedSampler(shuffle=False)`` (``distributed``)."""
    if answer is None:
        return _say(None, "set answer = the number of distinct classes in the worst global step")
    got = _as_int(answer)
    if got is None:
        return _say(False, f"the answer should be a whole number, got {answer!r}")
    from helpers import balance
    from helpers.sampler import shard_indices

    labels = ex01_labels()
    shards = shard_indices("distributed", labels, EX01_RANKS)
    cov = balance.step_coverage(shards, labels, EX01_BATCH_PER_RANK)
    tv = balance.max_tv(shards, labels)
    if got == cov.min_classes:
        return _say(True, f"{cov.min_classes} class(es): rank k reads k, k+{EX01_RANKS}, ..., so one global step "
                          f"is {EX01_RANKS * EX01_BATCH_PER_RANK} consecutive images of the listing, although "
                          f"each rank's epoch is perfectly mixed (max TV {tv:.2f})")
    return _say(False, f"the worst step holds {cov.min_classes} class(es), not {got}: a global step reads positions "
                       f"[i*{EX01_BATCH_PER_RANK}, (i+1)*{EX01_BATCH_PER_RANK}) of every shard, i.e. "
                       f"{EX01_RANKS * EX01_BATCH_PER_RANK} consecutive samples of the class-sorted listing")


# ---------------------------------------------------------------- chapter 02
def check_02_accumulation(answer) -> bool:
    """(micro_batch, accumulation_steps) for ResNet-50, 224 px, 256 images per 16 GiB card."""
    if answer is None:
        return _say(None, "set answer = (micro_batch, accumulation_steps)")
    pair = _pair(answer)
    if pair is None or _as_int(pair[0]) is None or _as_int(pair[1]) is None:
        return _say(False, f"the answer should be two integers (micro_batch, accumulation_steps), got {answer!r}")
    from helpers.memory import estimate, plan_accumulation

    micro, steps = _as_int(pair[0]), _as_int(pair[1])
    per_card = EX02_GLOBAL_BATCH // EX02_CARDS
    best = plan_accumulation(EX02_ARCH, EX02_GLOBAL_BATCH, EX02_CARDS, EX02_CAPACITY_GB, EX02_IMAGE_SIZE)
    if micro < 1 or steps < 1 or micro * steps != per_card:
        return _say(False, f"micro_batch x accumulation_steps must be the per-card batch {per_card} "
                           f"({EX02_GLOBAL_BATCH} / {EX02_CARDS} cards), got {micro} x {steps} = {micro * steps}")
    est = estimate(EX02_ARCH, micro, EX02_IMAGE_SIZE, accumulation_steps=steps)
    if not est.fits(EX02_CAPACITY_GB):
        return _say(False, f"micro-batch {micro} needs about {est.total_gib:.1f} GiB by the planner, more than "
                           f"{EX02_CAPACITY_GB} GiB; the planner's choice is {best}")
    if (micro, steps) == best:
        return _say(True, f"{micro} x {steps}: the largest micro-batch that fits (~{est.total_gib:.1f} GiB of "
                          f"{EX02_CAPACITY_GB}), which is what plan_accumulation picks")
    return _say(True, f"{micro} x {steps} fits (~{est.total_gib:.1f} GiB) and keeps the global batch; "
                      f"plan_accumulation would pick {best}: fewer, larger micro-steps run faster and give "
                      "BatchNorm more images")


# ---------------------------------------------------------------- chapter 03
def check_03_layout_bytes(answer) -> bool:
    """(layout string, classifier bytes per rank) for 2 data-parallel groups x 4 model-parallel ranks."""
    if answer is None:
        return _say(None, 'set answer = ("<dp>x<mp>", bytes of classifier weight + bias on one rank, fp32)')
    pair = _pair(answer)
    if pair is None or not isinstance(pair[0], str) or _as_int(pair[1]) is None:
        return _say(False, f'the answer should be ("<dp>x<mp>", bytes), got {answer!r}')
    from helpers.errors import ConfigError
    from helpers.memory import classifier_param_bytes
    from helpers.strategy import Layout

    try:
        layout = Layout.parse(pair[0])
    except ConfigError as exc:
        return _say(False, str(exc))
    want_layout = Layout(EX03_DP, EX03_MP)
    full = classifier_param_bytes(EX03_FEATURES, EX03_CLASSES, 1)
    want = classifier_param_bytes(EX03_FEATURES, EX03_CLASSES, want_layout.mp)
    if layout != want_layout:
        return _say(False, f"{layout.name} is {layout.dp} data-parallel groups of {layout.mp} model-parallel ranks; "
                           f"the exercise wants {EX03_DP} groups of {EX03_MP}: '{want_layout.name}'")
    got = _as_int(pair[1])
    if got != want:
        hint = " (that is the whole layer: the model-parallel ranks split its classes)" if got == full else ""
        return _say(False, f"each rank holds ceil({EX03_CLASSES} / {want_layout.mp}) rows of "
                           f"({EX03_FEATURES} weights + 1 bias) x 4 bytes = {want:,} bytes, not {got:,}{hint}")
    return _say(True, f"'{layout.name}': {want:,} bytes ({want / 2**20:.0f} MiB) per rank instead of "
                      f"{full / 2**20:.0f} MiB for the whole classifier")


def check_03_same_slice(answer) -> bool:
    """The ranks that hold the same classifier slice as rank 5 (and average its gradient) under 2x4."""
    if answer is None:
        return _say(None, f"set answer = the ranks (a tuple) holding the same classifier slice as rank {EX03_RANK}")
    try:
        got = tuple(sorted(int(r) for r in answer))
    except (TypeError, ValueError):
        return _say(False, f"the answer should be a tuple of ranks, got {answer!r}")
    from helpers.strategy import Layout

    layout = Layout(EX03_DP, EX03_MP)
    want = layout.dp_group(EX03_RANK)
    if got == want:
        return _say(True, f"{want}: rank r sits at (dp, mp) = divmod(r, {layout.mp}), so rank {EX03_RANK} is "
                          f"{layout.coords(EX03_RANK)}; the ranks with the same mp index hold the same slice")
    if got == layout.mp_group(EX03_RANK):
        return _say(False, f"{got} is rank {EX03_RANK}'s model-parallel group: they hold the *other* slices "
                           f"(and gather the logits); the same slice is on {want}")
    return _say(False, f"the same slice as rank {EX03_RANK} is on {want}: the ranks with the same model-parallel "
                       f"index ({layout.coords(EX03_RANK)[1]}) in each of the {layout.dp} data-parallel groups")


# ---------------------------------------------------------------- chapter 04
def check_04_allreduce_calls(answer) -> bool:
    """AllReduce calls per step for ``EX04_GRAD_KB`` cut into buckets that close at >= ``EX04_BUCKET_KB``."""
    if answer is None:
        return _say(None, "set answer = the number of AllReduce calls per step after fusion")
    got = _as_int(answer)
    if got is None:
        return _say(False, f"the answer should be a whole number, got {answer!r}")
    from helpers.profiling import fusion_split_indices

    split = fusion_split_indices([kb * 1024 for kb in EX04_GRAD_KB], EX04_BUCKET_KB * 1024)
    want = len(split) + 1
    if got == want:
        return _say(True, f"{want} calls: split points {split} (the 'index' fusion config); without fusion it "
                          f"would be {len(EX04_GRAD_KB)}")
    if got == len(EX04_GRAD_KB):
        return _say(False, f"{got} is one call per tensor, i.e. no fusion; with {EX04_BUCKET_KB} KB buckets: {want}")
    return _say(False, f"walk the tensors in order, closing a bucket once it holds >= {EX04_BUCKET_KB} KB: the split "
                       f"points are {split}, so {want} calls, not {got}")


def ex04_job_profile():
    """``EX04_PROFILE`` as a ``helpers.profiling.JobProfile`` (one profiled step per rank)."""
    from helpers.profiling import JobProfile, RankProfile, StepBreakdown

    ranks, step_s = {}, []
    for rank, step, comm in EX04_PROFILE:
        bd = StepBreakdown(0.0, step * 1e6, step - comm, comm, 0.0, 1, 1, 2)
        ranks[rank] = RankProfile(rank, Path("."), [bd], [[]])
        step_s.append([step])
    step = np.array(step_s, dtype=float)
    return JobProfile(Path("."), ranks, [0], step, np.zeros_like(step))


def check_04_comm_share(answer) -> bool:
    """The job's communication share (mean over ranks of comm / step) from ``EX04_PROFILE``; a fraction or %."""
    if answer is None:
        return _say(None, "set answer = the communication share, as a fraction (0.42) or a percentage (42)")
    got = _as_float(answer)
    if got is None:
        return _say(False, f"the answer should be a number, got {answer!r}")
    if got > 1.0:
        got /= 100.0
    jp = ex04_job_profile()
    want = jp.comm_share
    pooled = float(jp.comm_s.sum() / jp.step_s.sum())
    if abs(got - want) <= 0.005:
        return _say(True, f"{want:.1%}: the mean of the ranks' shares "
                          f"{', '.join(f'{s:.0%}' for s in jp.comm_share_per_rank)} (what JobProfile.comm_share reports)")
    if abs(got - pooled) <= 0.002 and abs(pooled - want) > 0.002:
        return _say(False, f"{pooled:.1%} pools the times of all ranks; the course reports the mean of each rank's "
                           f"share: {want:.1%}")
    return _say(False, f"per rank, comm / step = {', '.join(f'{s:.3f}' for s in jp.comm_share_per_rank)}; their mean "
                       f"is {want:.1%}, not {got:.1%}")


CHECKERS = {
    "00": (check_00_rank_and_size, check_00_two_nodes),
    "01": (check_01_rank3_histogram, check_01_worst_step_classes),
    "02": (check_02_accumulation,),
    "03": (check_03_layout_bytes, check_03_same_slice),
    "04": (check_04_allreduce_calls, check_04_comm_share),
}
