"""Chapter 02 exercises: micro-batch and accumulation steps on a 16 GiB card, a rank's memory at another
micro-batch of the code cell (public via ``helpers.exercises``)."""

from __future__ import annotations

import numpy as np

from helpers.exercises.common import RUN_NAME, as_int, cell_run, checker, kind_of, say, tuple_error

EX02_ARCH, EX02_IMAGE_SIZE = "resnet50", 224
EX02_GLOBAL_BATCH, EX02_CARDS, EX02_CAPACITY_GB = 2048, 8, 16   # 256 images per card, 16 GiB cards


def _accumulation_hint(micro: int, steps: int, best: tuple[int, int]) -> str:
    """Why (micro, steps) is not the largest micro-batch that fits, naming the usual confusion."""
    from helpers.core.memory_planner import estimate

    per_card = EX02_GLOBAL_BATCH // EX02_CARDS
    if (steps, micro) == best:
        return "the two are swapped: the tuple is (micro_batch, accumulation_steps), the micro-batch first"
    if micro < 1 or steps < 1:
        return f"micro-batch and steps are at least 1, got {micro} x {steps}"
    if micro * steps == EX02_GLOBAL_BATCH:
        return (f"{micro} x {steps} = {EX02_GLOBAL_BATCH} is the global batch; each card accumulates its own "
                f"share, the per-card batch {EX02_GLOBAL_BATCH} / {EX02_CARDS} = {per_card}")
    if micro * steps != per_card:
        return (f"micro_batch x accumulation_steps must be the per-card batch {per_card} (equal "
                f"micro-batches, so the micro-batch divides {per_card}), got {micro} x {steps} = {micro * steps}")
    est = estimate(EX02_ARCH, micro, EX02_IMAGE_SIZE, accumulation_steps=steps)
    if not est.fits(EX02_CAPACITY_GB):
        return (f"micro-batch {micro} needs about {est.total_gib:.1f} GiB by the planner, more than "
                f"{EX02_CAPACITY_GB} GiB")
    return (f"{micro} x {steps} fits (~{est.total_gib:.1f} GiB) but is not the largest micro-batch that fits: "
            f"the exercise asks for the fewest accumulation steps, and micro-batch {best[0]} fits too")


@checker
def check_02_accumulation(answer) -> bool:
    """(micro_batch, accumulation_steps) for ResNet-50, 224 px, 256 images per 16 GiB card: the largest
    micro-batch that divides 256 and fits, i.e. the fewest accumulation steps (``plan_accumulation``)."""
    if answer is None:
        return say(None, "set answer = (micro_batch, accumulation_steps): the largest micro-batch that fits")
    error = tuple_error(answer, "(micro_batch, accumulation_steps)", 2)
    if error:
        return say(False, error)
    from helpers.core.memory_planner import estimate, plan_accumulation

    micro, steps = (as_int(v) for v in answer)
    best = plan_accumulation(EX02_ARCH, EX02_GLOBAL_BATCH, EX02_CARDS, EX02_CAPACITY_GB, EX02_IMAGE_SIZE)
    if (micro, steps) != best:
        return say(False, _accumulation_hint(micro, steps, best))
    est = estimate(EX02_ARCH, micro, EX02_IMAGE_SIZE, accumulation_steps=steps)
    twice = estimate(EX02_ARCH, 2 * micro, EX02_IMAGE_SIZE, accumulation_steps=max(steps // 2, 1))
    return say(True, f"{micro} x {steps}: the largest micro-batch that fits (~{est.total_gib:.1f} GiB of "
                      f"{EX02_CAPACITY_GB}; {2 * micro} would need ~{twice.total_gib:.1f}), what "
                      "plan_accumulation picks")


EX02_MEMORY_KEYS = ("micro-batch x K", "peak RSS MB")    # in the code cell's finish(...)
EX02_MICRO, EX02_TOLERANCE = 2, 0.05                      # the rerun's micro-batch; a prediction within 5 %


@checker
def check_02_micro_memory(answer, run=None) -> bool:
    """A rank's peak resident memory (MB) predicted for the code cell rerun at micro-batch 2 (``on_ranks``):
    right within 5 % of the ranks' median."""
    todo = (f"run the code cell again with the config line %%ranks ch.code_cfg.replace(micro_batch={EX02_MICRO}, "
            "accumulation_steps=...) (micro-batch x K = the per-rank batch)")
    returns, _tree, verdict = cell_run(run, EX02_MEMORY_KEYS, todo)    # the cell that made it is readable too
    if returns is None:
        return verdict
    micro = {str(v[EX02_MEMORY_KEYS[0]]).split(" x ")[0] for v in returns.values()}
    if micro != {str(EX02_MICRO)}:
        return say(None, f"the last run of the code cell used micro-batch {', '.join(sorted(micro))}: {todo}")
    if answer is None:
        return say(None, "set answer = your prediction of one rank's peak RSS in MB (a number), before looking")
    if isinstance(answer, bool) or not isinstance(answer, (int, float, np.integer, np.floating)):
        return say(False, f"the exercise asks for a number of MB, got {kind_of(answer)}")
    peaks = np.array([float(v[EX02_MEMORY_KEYS[1]]) for v in returns.values()])
    want = float(np.median(peaks))
    off = float(answer) / want - 1
    if abs(off) <= EX02_TOLERANCE:
        return say(True, f"{RUN_NAME} measured {want:.0f} MB per rank ({peaks.min():.0f}-{peaks.max():.0f}); "
                          f"your {float(answer):.0f} is {off:+.1%} off. At micro-batch {EX02_MICRO} a rank's memory "
                          "is mostly MindSpore's runtime, the model and its optimizer state, not activations")
    if float(answer) < 0.5 * want:
        return say(False, f"{float(answer):.0f} MB is less than half the measured {want:.0f} MB: a rank holds "
                           "MindSpore's runtime, the weights, gradients, momentum and the accumulation buffers "
                           "whatever the micro-batch")
    return say(False, f"{RUN_NAME} measured {want:.0f} MB per rank (median of {len(peaks)}), your {float(answer):.0f} "
                       f"is {off:+.0%} off (right within {EX02_TOLERANCE:.0%})")
