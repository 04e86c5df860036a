"""Chapter 01's steps (load imbalance): four splits of class-sorted data planned, run, measured, recorded."""

from __future__ import annotations

import inspect
import os
import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np

from helpers.cells.run import FollowOn, ran_follow_on
from helpers.core.config import config_table, job_config
from helpers.core.cpu_share import fair_share
from helpers.job.launch import run_job
from helpers.job.straggler import SPLIT_PARTS, rank_time_split
from helpers.output.plots import class_heatmaps, loss_per_rank, per_strategy_curves, strategy_bars, time_split_bars
from helpers.output.tables import show_md, show_table
from helpers.conclusions.ch01_batchnorm import bn_claims
from helpers.conclusions.ch01_repeats import payoff_sentence
from helpers.topics import bn_ranks, seed_repeats, seen_classes, shard_stats
from helpers.topics.cell_sampler import SAMPLER_CODE, cell_sampler, cell_sampler_class, sampler_file
from helpers.topics.class_load import class_load_md, class_load_rows, every_nth, measure_class_load
from helpers.train.data import HEAVY_STANDIN_DIR, STANDIN_DIR, prepare_data
from helpers.train.sampler import SHARD_KINDS, shard_indices
from helpers.train.stratified_split import stratified_shards

STRATEGIES = SHARD_KINDS     # contiguous, distributed, distributed_shuffle, stratified: the tables' order
# the one job's phase order: the first phase's first step compiles the graph for many seconds, long enough for its
# pipeline to read batches ahead; the contiguous split's slow reader must not start there, hidden
PHASE_ORDER = ("distributed", "contiguous", "distributed_shuffle", "stratified")
IMAGENET_SHARDS_READ = {"ci": 1, "cpu": 2, "gpu8": 8}   # shards of the shuffled DistributedSampler read
SEEDS = {"ci": (1, 2), "cpu": (1, 2, 3, 4, 5), "gpu8": (1, 2, 3)}   # each split trained once per seed
REHEARSAL_SEEDS = (1, 2)
# Chapter 01's training length where it differs from the preset's: at cpu 4 splits x 5 seeds x 8 steps, set by the
# chapter's 8 minutes on 2 cores (benchmarks/results/course_time.json, ch01_cpu_length_20261207); each split trains
# in one round, since a split resumed later finds batches its pipeline read ahead, which hides a slow reader.
CHAPTER_LENGTH = {"ci": dict(phase_rounds=1), "cpu": dict(steps=8, phase_rounds=1)}
# Precise BN before every evaluation: BatchNorm's statistics recomputed from this many training batches per rank
# (random images, every rank's pooled), so accuracy judges the weights, not running statistics that lag them.
BN_RECALIBRATION_BATCHES = {"ci": 2, "cpu": 2, "gpu8": 4}   # x 8 ranks x 16 images at cpu
_STARTED: list[float] = []     # when prepare() ran: the chapter's own wall time
SETTINGS = ("device_target", "world_size", "arch", "width", "image_size", "global_batch", "steps", "data_dir")
REPEAT_FIGURES = {"accuracy": "held-out accuracy", "final_loss": "last loss (ranks' mean)",
                  "accuracy_batch_stats": "held-out accuracy with BatchNorm on batch statistics (diagnostic)"}
SUMMARY_COLUMNS = ("max_tv", "min_classes_per_step", "mean_batch_classes", "accuracy", "loss_spread")
SUMMARY_BARS = {"max_tv": "max TV of a rank's mix (lower is better)",
                "min_classes_per_step": "min classes per global step (higher is better)",
                "accuracy": "held-out accuracy", "loss_spread": "spread of per-rank loss"}


def prepare(preset: str, rehearse: bool, **overrides):
    """The chapter's job config (the preset's, at chapter 01's length) and its train split's index (data made
    and checked); shows both."""
    _STARTED[:] = [time.monotonic()]
    length = {} if rehearse else CHAPTER_LENGTH.get(preset, {})
    given = {k: v for k, v in overrides.items() if v is not None}
    base = job_config(preset, rehearse=rehearse, chapter="01", evaluate=True,
                      bn_recalibration_batches=BN_RECALIBRATION_BATCHES["ci" if rehearse else preset],
                      **{**length, **given})
    if "data_dir" not in given and base.data_dir == STANDIN_DIR:
        base = base.replace(data_dir=HEAVY_STANDIN_DIR)     # the stand-in whose classes cost unequal reading
    base = base.replace(rank_cpu_share=fair_share(base))    # a rank decodes on its share of the cores only
    index = prepare_data(base)
    show_table([r for r in config_table(base, SETTINGS) if r[1] != "n/a"], ["setting", "value"])
    counts = index.counts.tolist()
    show_md(f"Train images per class ({index.classes[0]} to {index.classes[-1]}): " + (
        ", ".join(map(str, counts)) if len(counts) <= 20 else f"{min(counts):,} to {max(counts):,}") + ".")
    return base, index


# ------------------------------------------------------------------------------------- before training
@dataclass
class Plan:
    """Each strategy's shards of the folder listing and its predicted balance row."""

    shards: dict[str, list[np.ndarray]]
    rows: list[tuple]


def plan_splits(labels, world_size: int, seed: int, global_batch: int, stratified=None) -> Plan:
    """Every strategy's shards of ``labels`` and (strategy, max TV, min / mean classes per global step);
    ``stratified``: a sampler class ``(labels, num_shards, shard_id, seed)`` for that split (the code cell's)."""
    def split(kind: str) -> list[np.ndarray]:
        if kind == "stratified" and stratified is not None:
            return [np.fromiter(iter(stratified(labels, world_size, r, seed)), np.int64) for r in range(world_size)]
        whole_steps = {"global_batch": global_batch} if kind == "stratified" else {}   # whole steps
        return shard_indices(kind, labels, world_size, seed, **whole_steps)

    shards = {k: split(k) for k in STRATEGIES}
    rows = []
    for k, s in shards.items():
        cov = shard_stats.step_coverage(s, labels, global_batch // world_size)
        rows.append((k, shard_stats.max_tv(s, labels), cov.min_classes, cov.mean_classes))
    return Plan(shards, rows)


def show_plan(base, index, code_cell=None) -> Plan:
    """The planned split of ``index``'s labels for ``base``'s ranks, shown as a table; the stratified one by the
    sampler class of ``code_cell`` (the ``%%ranks`` cell's job) when given."""
    plan = plan_splits(index.labels, base.world_size, base.seed, base.global_batch,
                       cell_sampler_class(code_cell) if code_cell is not None else None)
    show_table([(k, round(tv, 3), low, round(mean, 2)) for k, tv, low, mean in plan.rows],
               ["strategy", "max TV (rank's epoch)", "min classes / global step", "mean classes / global step"])
    return plan


def show_class_load(base, index, plan: Plan, preset: str) -> dict:
    """What each class costs to read here (``data_prep.class_costs``, the pipeline's decode + resize) and each
    split's predicted slowest rank per step from it, as a table and one sentence; returns the figures."""
    load = measure_class_load(base, index.labels, plan.shards, preset, progress=every_nth(100, len(index.classes)))
    show_table(class_load_rows(load), ["split", "slowest rank's load per step / mean", "rank"])
    show_md(class_load_md(load))
    return load


# ---------------------------------------------------------------------------------------------- the jobs
def chapter_seeds(preset: str, rehearse: bool, override=None) -> tuple[int, ...]:
    """The seeds each split is trained from: ``override``, else 2 when rehearsing, else the preset's."""
    return tuple(override) if override else REHEARSAL_SEEDS if rehearse else SEEDS[preset]


def samplers_job(base, seeds, one_job: bool = True):
    """The experiment's one job as the code cell's follow-on (``%%ranks ... --then``: one launch for both), its
    ``stratified`` split the cell's sampler class; None with ``one_job`` False (one job per split, launched later)."""
    if not one_job:
        return None
    cfg = base.replace(name="samplers", phase_samplers=list(PHASE_ORDER), phase_seeds=[int(x) for x in seeds],
                       sampler_code=SAMPLER_CODE)
    return FollowOn(cfg, sampler_file)


def run_strategies(base, progress="auto", one_job: bool = True, seeds=(1,), code_cell=None) -> tuple[dict, dict]:
    """Every strategy trained once per seed (only the sampler changes within a seed; the seed changes weight
    init and data order): as phases of one job (``one_job``: one launch, see ``helpers.train.phases``) or one
    job each; ``stratified`` is the sampler class of ``code_cell`` (the ``%%ranks`` cell's job) when given.
    Returns the first seed's result per strategy and the repeats (``seed_repeats.per_seed``)."""
    seeds = [int(x) for x in seeds]
    t0 = time.monotonic()
    changes, files = cell_sampler(code_cell) if code_cell is not None else ({}, None)
    base = base.replace(**changes)
    one = base.replace(name="samplers", phase_samplers=list(PHASE_ORDER), phase_seeds=seeds)
    reused = one_job and ran_follow_on(code_cell, one)       # the code cell's launch ran them (its --then)
    if one_job:
        job = code_cell if reused else run_job(one, progress=progress, files=files)
        by_seed = {x: {k: job.phase(f"{k}@{x}") for k in STRATEGIES} for x in seeds}
        first = by_seed[seeds[0]][PHASE_ORDER[0]].metric("step_s")[:, 0].max()
        show_md(f"One {base.world_size}-rank job{' (the code cell above, then these phases)' if reused else ''}, "
                f"{job.wall_s:.0f} s: {len(STRATEGIES)} splits x {len(seeds)} "
                f"seeds = {len(STRATEGIES) * len(seeds)} phases of {base.steps} steps, "
                + ("each seed's from one state (one digest per seed on every rank)."
                   if seeds_same_start(by_seed) else "**not** all from one state.")
                + f" Below, the slowest rank's seconds without the first step ({first:.1f} s: it built the graph).")
    else:
        by_seed = {x: {k: run_job(base.replace(name=f"{k}-seed{x}", sampler=k, seed=x), progress=progress, files=files)
                       for k in STRATEGIES} for x in seeds}
    results = by_seed[seeds[0]]
    rows = [(k, *(round(v, 1) for v in phase_seconds(r)), r.summaries[0]["accuracy"]) for k, r in results.items()]
    show_table(rows, ["strategy", "later steps (s)", "precise BN + evaluation (s)", f"accuracy (seed {seeds[0]})"])
    values = seed_repeats.by_seed_values(by_seed)
    stragglers = {k: [by_seed[x][k].straggler.as_dict() for x in seeds] for k in STRATEGIES}
    per_step = {k: [seen_classes.seconds_per_step(by_seed[x][k]) for x in seeds] for k in STRATEGIES}
    bn = dict(bn_rank=bn_ranks.by_seed(by_seed), device_target=base.device_target,   # what bn_claims reads
              **{k: v for k, v in results[STRATEGIES[0]].summaries[0].items() if k == "sync_batchnorm_error"})
    return results, dict(values, seeds=seeds, same_start=seeds_same_start(by_seed) if one_job else None,
                         job_s=job.wall_s if reused else time.monotonic() - t0, job_with_cell=reused,
                         straggler=stragglers,
                         phase_step_s=per_step, **bn,
                         cpu_share=(job if one_job else results[STRATEGIES[0]]).summaries[0].get("cpu_share"))


def phase_seconds(result) -> tuple[float, float]:
    """A phase's seconds on its slowest rank: its steps after the first, and its evaluation."""
    later = result.metric("step_s")[:, 1:].sum(axis=1).max()
    finish = [result.summaries[r].get("finish_s", 0.0) for r in result.summaries]
    return float(later), float(max(finish))


def same_start(results: dict) -> bool | None:
    """Whether every phase on every rank started from one state (None: the strategies ran as separate jobs)."""
    digests = {x.get("start_digest") for r in results.values() for x in r.summaries.values()}
    return None if digests == {None} else len(digests) == 1


def seeds_same_start(by_seed: dict) -> bool | None:
    """Within every seed one starting state for all phases, and a different one per seed (None: separate jobs)."""
    per_seed = [same_start(results) for results in by_seed.values()]
    if None in per_seed:
        return None
    starts = {x.get("start_digest") for results in by_seed.values() for r in results.values()
              for x in r.summaries.values()}
    return all(per_seed) and len(starts) == len(by_seed)


def show_payoff(repeats: dict, base, index) -> None:
    """The measured answer to "does the fix pay off?" (``ch01_repeats.payoff_claim``), as one sentence."""
    show_md(payoff_sentence(dict(accuracy_by_seed=repeats["accuracy"], num_classes=len(index.classes),
                                 steps=base.steps, bn_recalibration_batches=base.bn_recalibration_batches,
                                 bn_rank=repeats.get("bn_rank"), straggler_by_seed=repeats.get("straggler"))))


def show_batchnorm(results: dict, repeats: dict):
    """The ranks' BatchNorm statistics and losses per split: claims (the batch-means one is the table's column),
    table, heatmaps (``topics.bn_ranks.show``)."""
    return bn_ranks.show(results, repeats["bn_rank"], repeats["seeds"][0],
                         " ".join(c.text for c in bn_claims(repeats) if c.id != "bn_rank_statistics"))


def show_repeats(repeats: dict):
    """Held-out accuracy and last loss per split, mean ± std over the seeds (the figure shows each seed's value);
    returns the figure."""
    keys = [k for k in REPEAT_FIGURES if k in repeats]
    cells = {key: {row[0]: row[-2] for row in seed_repeats.table_rows(repeats[key])} for key in keys}
    show_table([(k, *(cells[key][k] for key in keys)) for k in STRATEGIES],
               [f"strategy ({len(repeats['seeds'])} seeds: mean ± std)", *(REPEAT_FIGURES[key] for key in keys)])
    return plot_repeats(repeats)


def plot_repeats(repeats: dict):
    """One panel per figure: each seed a point (same colour per seed), the mean ± std as a bar."""
    keys = [k for k in REPEAT_FIGURES if k in repeats]
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 3.4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for i, k in enumerate(STRATEGIES):
            v = np.asarray(repeats[key][k])
            ax.errorbar(i + 0.18, v.mean(), yerr=v.std(ddof=1) if v.size > 1 else 0, fmt="o", color="black",
                        capsize=4)
            ax.scatter(np.full(v.size, i) + np.linspace(-0.12, 0.12, v.size), v, c=range(v.size), cmap="viridis",
                       s=22)
        ax.set_xticks(range(len(STRATEGIES)), [k.replace("_", "\n") for k in STRATEGIES], fontsize=8)
        ax.set_title(f"{REPEAT_FIGURES[key].split(' (')[0]}: {len(repeats['seeds'])} seeds (points), mean ± std",
                     fontsize=9)
    fig.tight_layout()
    return fig


def elapsed_s() -> float:
    """Seconds since ``prepare`` ran: the chapter's wall time so far."""
    return time.monotonic() - _STARTED[0] if _STARTED else float("nan")


@dataclass
class Measured:
    """What the ranks read and how they fared, per strategy, from the jobs' own records."""

    hists: dict          # (ranks, classes) images of each class a rank trained on
    coverage: dict       # per step: distinct classes in the global batch
    step_spread: dict    # slowest / fastest rank's mean step time
    data_wait_ms: dict   # the slowest rank's mean data wait
    summary: dict        # figure -> strategy -> value (the side-by-side table and bars)
    same_start: bool | None = None   # phases of one job: all from one state (None: separate jobs)
    stragglers: dict | None = None   # strategy -> its straggler verdict (helpers.job.straggler)


def measure(results: dict, global_counts) -> Measured:
    """The chapter's figures from each strategy's job result."""
    hists = {k: seen_classes.rank_histograms(r) for k, r in results.items()}
    coverage = {k: seen_classes.global_step_classes(r) for k, r in results.items()}
    summary = {
        "max_tv": {k: float(seen_classes.tv_from_global(h, global_counts).max()) for k, h in hists.items()},
        "min_classes_per_step": {k: int(c.min()) for k, c in coverage.items()},
        "mean_batch_classes": {k: float(seen_classes.batch_classes(r).mean()) for k, r in results.items()},
        "accuracy": {k: float(r.summaries[0]["accuracy"]) for k, r in results.items()},
        "loss_spread": {k: float(np.std(r.metric("loss")[:, -1])) for k, r in results.items()},
    }
    return Measured(hists, coverage, {k: seen_classes.rank_step_spread(r) for k, r in results.items()},
                    {k: seen_classes.slowest_data_wait_ms(r) for k, r in results.items()}, summary,
                    same_start(results), {k: r.straggler for k, r in results.items()})


def plot_class_mix(measured: Measured, index, base):
    """Heatmaps of what each rank trained on, one per strategy."""
    return class_heatmaps(measured.hists, index.classes,
                          title=f"class mix each rank trained on ({base.steps} steps x {base.batch_per_rank} "
                                "images)")


def plot_step_coverage(measured: Measured, index, base):
    """Distinct classes in every global step, one line per strategy."""
    title = f"class coverage per global step ({base.global_batch} images, {len(index.classes)} classes)"
    return per_strategy_curves(measured.coverage, "distinct classes in the global batch", title)


def plot_loss_per_rank(results: dict):
    """One panel per strategy, one line per rank's loss."""
    fig, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 3.2), sharey=True, squeeze=False)
    for ax, (k, r) in zip(axes[0], results.items()):
        loss_per_rank(r, title=k, ax=ax)
        ax.legend().remove()
    fig.tight_layout()
    return fig


def timing_rows(results: dict, measured: Measured) -> list[tuple]:
    """(strategy, seconds per step (``seen_classes.seconds_per_step``), slowest / fastest rank, slowest rank's data
    wait, verdict)."""
    return [(k, round(seen_classes.seconds_per_step(r), 3), round(measured.step_spread[k], 3),
             round(measured.data_wait_ms[k], 1), verdict_words(measured.stragglers[k])) for k, r in results.items()]


def verdict_words(v) -> str:
    """A straggler verdict in a table cell: the rank waited for, why, per step and share of the others' time, else
    the wait for the last rank (in full: ``v.line()``)."""
    if v.rank is None:
        return v.line() if v.method == "none" else f"none; last rank {1e3 * v.spread_s:.0f} ms later ({v.spread_share:.0%})"
    return f"rank {v.rank} ({v.cause}): {1e3 * v.wait_s:.0f} ms per step ({v.wait_share:.0%})"


def show_timing(results: dict, measured: Measured) -> None:
    """The per-strategy timing table with the straggler verdicts (seconds per step: every step of the phase)."""
    show_table(timing_rows(results, measured),
               ["strategy", "s per step", "slowest / fastest rank", "data wait (ms)", "others waited for"])


def plot_time_split(results: dict, measured: Measured, strategy: str = "contiguous"):
    """Where each rank's step went under one split (the straggler's, if any split has one): a stacked bar per rank."""
    strategy = next((k for k, v in measured.stragglers.items() if v.rank is not None), strategy)
    ranks, seconds, split = rank_time_split(results[strategy].steps)
    if not split:     # no sampled steps in these short phases: compute and communication ran as one graph
        seconds, parts = seconds[:, [0, 1, 3]], ("data", "compute + communication", "other")
    return time_split_bars(ranks, seconds, SPLIT_PARTS if split else parts, f"{strategy}: where each rank's step went",
                           measured.stragglers[strategy].rank)


def show_summary(measured: Measured):
    """The side-by-side table; returns the bar figure of its main columns."""
    s = measured.summary
    shown = [c for c in SUMMARY_COLUMNS if c not in SUMMARY_BARS or c in ("max_tv", "min_classes_per_step")]
    show_table([(k, *(s[c][k] for c in shown)) for k in STRATEGIES],       # accuracy and loss spread: the bars
               ["strategy", "max TV (seen)", "min classes / step", "classes / rank batch"])
    return strategy_bars(s, SUMMARY_BARS)


# ------------------------------------------------------------------------------ ImageNet scale, errata
def imagenet_shards_to_read(preset: str, rehearse: bool, override: int | None = None) -> int:
    """Shards of the shuffled DistributedSampler to read at ImageNet scale: ``override``, else 1 when
    rehearsing, else the preset's (all 8 only on gpu8: reading one costs seconds on 2 cores)."""
    return override or (1 if rehearse else IMAGENET_SHARDS_READ[preset])


def imagenet_scale(shards_read: int, labels=None) -> dict:
    """Max TV of the stratified split (all 8 shards, timed) and of ``shards_read`` shards of MindSpore's
    shuffled DistributedSampler, on ImageNet-shaped labels (or ``labels``); shows the table."""
    labels = shard_stats.imagenet_shaped_labels(seed=0) if labels is None else labels
    t0 = time.perf_counter()
    strat = stratified_shards(labels, 8, seed=0)
    split_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    dist = shard_indices("distributed_shuffle", labels, 8, seed=0, method="lookup",
                         shards=list(range(shards_read)))
    dist_s = time.perf_counter() - t0
    tv = {"distributed_shuffle": shard_stats.max_tv(dist, labels),
          "stratified": shard_stats.max_tv(strat, labels)}
    show_table([("stratified (8 shards)", f"{split_s:.3f} s", tv["stratified"]),
                (f"DistributedSampler(shuffle=True) ({shards_read} shard(s) read)", f"{dist_s:.2f} s",
                 tv["distributed_shuffle"])], ["split", "time", "max TV"])
    return {"max_tv": tv, "split_s": split_s, "shards_read": shards_read}


def class_column_errata() -> str | None:
    """Shows ``DistributedSampler``'s real signature and what ``class_column=`` raises; returns that error
    (``None`` if this MindSpore accepted it)."""
    import mindspore.dataset as ds

    try:
        ds.DistributedSampler(8, 0, class_column="label")
        error = None
    except TypeError as exc:
        error = str(exc)
    show_md(f"`DistributedSampler{inspect.signature(ds.DistributedSampler.__init__)}`  \n"
            f"`DistributedSampler(8, 0, class_column='label')` → **TypeError**: `{error}`")
    return error


def recorded_values(preset: str, rehearse: bool, base, index, plan: Plan, measured: Measured, inet: dict,
                    class_column_error: str | None, repeats: dict | None = None,
                    class_load: dict | None = None) -> dict:
    """The values the chapter records (and its claims read: ``helpers.conclusions.ch01``); with ``repeats``
    (``run_strategies``) ``accuracy`` is each split's mean over the seeds, every seed's value kept beside it."""
    s = measured.summary
    same = measured.same_start if repeats is None else repeats["same_start"]
    out = dict(
        preset=preset, rehearsal=rehearse, steps=base.steps, num_classes=len(index.classes),
        **{k: s[k] for k in SUMMARY_COLUMNS},
        step_time_spread=measured.step_spread, slowest_data_wait_ms=measured.data_wait_ms,
        planned_max_tv={k: float(v) for k, v, _, _ in plan.rows},
        stratified_class_spread=shard_stats.per_class_spread(plan.shards["stratified"], index.labels),
        contiguous_class_spread=shard_stats.per_class_spread(plan.shards["contiguous"], index.labels),
        imagenet_scale_max_tv=inet["max_tv"], imagenet_scale_split_s=inet["split_s"],
        imagenet_shards_iterated=inet["shards_read"],
        class_column_rejected=class_column_error is not None, phases_of_one_job=same is not None,
        phases_same_start=same,
        straggler={k: v.as_dict() for k, v in (measured.stragglers or {}).items()},
        class_load=class_load,
    )
    if repeats is not None:
        out.update(seeds=repeats["seeds"], accuracy_by_seed=repeats["accuracy"],
                   accuracy={k: float(np.mean(v)) for k, v in repeats["accuracy"].items()},
                   final_loss_by_seed=repeats["final_loss"], accuracy_summary=seed_repeats.summary(repeats["accuracy"]),
                   final_loss_summary=seed_repeats.summary(repeats["final_loss"]), job_s=repeats["job_s"],
                   job_with_cell=repeats.get("job_with_cell", False),
                   lr_schedule=base.lr_schedule, chapter_s=elapsed_s(), straggler_by_seed=repeats.get("straggler"),
                   phase_step_s_by_seed=repeats.get("phase_step_s"), cpu_share=repeats.get("cpu_share"),
                   cores=os.cpu_count(), world_size=base.world_size,
                   bn_recalibration_batches=base.bn_recalibration_batches, bn_rank_means=bn_ranks.means(
                       repeats.get("bn_rank") or {}), **{k: repeats[k] for k in bn_ranks.CLAIM_KEYS if k in repeats})
        if "accuracy_batch_stats" in repeats:
            out["accuracy_batch_stats_by_seed"] = repeats["accuracy_batch_stats"]
    return out
