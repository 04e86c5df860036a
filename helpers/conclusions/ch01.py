"""Chapter 01's conclusions, from the values its notebook records (``record_results(...)``'s keyword values).

Mechanisms (hold at any scale): the stratified sampler deals every class within 1 image between ranks, its ranks
read the global class mix best, class-sorted sharding gives class-homogeneous batches (one class per rank batch
for a contiguous split, one or two per global step for ``DistributedSampler(shuffle=False)``). Per-rank step time is
an observation. Held-out accuracy, trained over several seeds, gives verdicts computed from the repeats
(``helpers.conclusions.ch01_repeats``); a single-seed run's accuracy stays an observation.
"""

from __future__ import annotations

from helpers.conclusions import Claim, claim
from helpers.conclusions.ch01_batchnorm import bn_claims
from helpers.conclusions.ch01_repeats import NAMES, repeat_claims
from helpers.core.cpu_share import QUIET, quiet
from helpers.topics.seed_repeats import paired, spread
from helpers.topics.class_load import times
NEAR_CHANCE = 2.0   # best accuracy below this many times chance: too few steps to compare the splits
UNEVEN = 2.0        # a split whose heaviest rank reads this many times the mean load per epoch should slow it


def chapter01_claims(r: dict) -> list[Claim]:
    """Claims from chapter 01's recorded values ``r``."""
    tv, steps_min, batch = r["max_tv"], r["min_classes_per_step"], r["mean_batch_classes"]
    others = {k: v for k, v in tv.items() if k != "stratified"}
    best_other = min(others, key=others.get)
    out = [
        claim("per_class_split", r["stratified_class_spread"] <= 1,
              ("Per class, every rank's stratified shard holds the same number of images"
               if r["stratified_class_spread"] == 0
               else "Per class, the stratified shards' counts differ by at most {s} image between ranks")
              + " (contiguous: up to {c}).",
              "Per class, the stratified shards' counts differ by up to {s} images between ranks (expected <= 1).",
              s=r["stratified_class_spread"], c=r["contiguous_class_spread"]),
        claim("homogeneous_batches",
              batch["contiguous"] < batch["stratified"] and steps_min["distributed"] < steps_min["stratified"],
              "Class-sorted sharding gave class-homogeneous batches: {cb:.1f} classes per contiguous rank batch "
              "(stratified {sb:.1f}), as few as {dmin} class(es) of {n} in a DistributedSampler(shuffle=False) global "
              "step (stratified at least {smin}).",
              "The class-sorted splits' batches were not more homogeneous than the stratified ones here: "
              "contiguous {cb:.1f} classes per rank batch vs stratified {sb:.1f}; fewest classes in a global step "
              "{dmin} (DistributedSampler(shuffle=False)) vs {smin} (stratified).",
              cb=batch["contiguous"], sb=batch["stratified"], dmin=steps_min["distributed"],
              smin=steps_min["stratified"], n=r["num_classes"]),
        claim("rank_mix", tv["stratified"] < min(others.values()),
              "The stratified ranks read the global class mix best: worst rank {s:.3f} TV away (next best, "
              "{other}: {o:.3f}; contiguous {c:.3f}).",
              "The stratified ranks' worst class mix ({s:.3f} TV) was not closer to the global one than "
              "{other}'s ({o:.3f}).",
              s=tv["stratified"], o=others[best_other], other=NAMES[best_other], c=tv["contiguous"]),
        _loss_spread_claim(r),
        *bn_claims(r),
        _step_time_claim(r),
        *_time_verdict_claim(r),
        *(repeat_claims(r) if len(r.get("seeds", ())) > 1 else [_accuracy_claim(r)]),
    ]
    inet = r["imagenet_scale_max_tv"]
    out.append(claim("imagenet_scale", inet["stratified"] < inet["distributed_shuffle"],
                     "At ImageNet scale the stratified split's worst shard is {s:.4f} TV from the global mix, "
                     "DistributedSampler(shuffle=True)'s {d:.4f} ({n} shard(s) read); all 8 stratified shards were "
                     "split in {t:.2f} s.",
                     "At ImageNet scale the stratified split's worst shard ({s:.4f} TV) was not closer to the global "
                     "mix than DistributedSampler(shuffle=True)'s ({d:.4f}).",
                     s=inet["stratified"], d=inet["distributed_shuffle"], n=r["imagenet_shards_iterated"],
                     t=r["imagenet_scale_split_s"]))
    if r.get("class_load"):
        out.append(_class_load_claim(r["class_load"]))
    out += _job_claims(r)
    out.append(claim("class_column", r["class_column_rejected"],
                     "The blog's DistributedSampler(..., class_column='label') raises TypeError: the fix has to be "
                     "a sampler of one's own.",
                     "DistributedSampler accepted class_column='label' in this MindSpore."))
    return out


def _job_claims(r: dict) -> list[Claim]:
    """Phases of one job: did every phase of a seed start from one state; the chapter's own wall time."""
    out = []
    if r.get("phases_of_one_job"):
        seeds = len(r.get("seeds", ()))
        out.append(claim("phases_same_start", r["phases_same_start"],
                         ("The four splits ran as phases of one job (one launch), and every phase on every rank "
                          "started from the same weights and optimizer state (one digest)." if seeds < 2 else
                          "The four splits x {n} seeds ran as phases of one job (one launch): within each seed every "
                          "phase on every rank started from the same weights and optimizer state (one digest), each "
                          "seed from its own."),
                         "The four splits ran as phases of one job, but their starting states differed: the "
                         "comparison is not on equal terms.", n=seeds))
    if r.get("chapter_s"):
        out.append(claim("chapter_time", None,
                         "This chapter ran {m:.1f} min on this machine ({s:.0f} s, {job} {j:.0f} s of it), "
                         "{steps} steps per phase, {lr} learning rate.",
                         m=r["chapter_s"] / 60, s=r["chapter_s"], j=r["job_s"],
                         job=("the code cell's launch with the {}-seed training job" if r.get("job_with_cell") else
                              "the {}-seed training job").format(len(r["seeds"])),
                         steps=r["steps"], lr=r["lr_schedule"]))
    return out


def _loss_spread_claim(r: dict) -> Claim:
    """How far apart the ranks' last losses are (each on its own batch): an observation."""
    spread = r["loss_spread"]
    other = max(v for k, v in spread.items() if k != "contiguous")
    return claim("loss_spread", None,
                 ("The ranks' last losses spread {c:.2f} (std over ranks) under the contiguous split, {o:.2f} at most "
                  "under the others: the weights are the same on every rank, but each contiguous rank's batch holds its own "
                  "classes." if spread["contiguous"] > other else
                  "The ranks' last losses spread {c:.2f} (std over ranks) under the contiguous split, not more than "
                  "under the other splits (up to {o:.2f})."),
                 c=spread["contiguous"], o=other)


def _step_time_claim(r: dict) -> Claim:
    """The blog's "cards 30% slower": seconds per step under the contiguous and the stratified split, over the
    seeds. A rank's step ends at the AllReduce, so a slow reader makes every rank slower; spreading its reading
    over the ranks shortens the step only where each rank decodes on cores of its own. With each rank held to its
    share of the cores (``cpu_share``, as on a card server) that is a verdict; where the ranks share the cores
    freely, an observation."""
    steps = r.get("phase_step_s_by_seed")
    if not steps:                    # one seed: the ranks' spread and data waits
        return _rank_spread_claim(r)
    c, st = (spread(steps[k]) for k in ("contiguous", "stratified"))
    share = r.get("cpu_share") or {}
    d = paired(steps["contiguous"], steps["stratified"])
    figures = dict(c=c["mean"], st=st["mean"], ratio=c["mean"] / st["mean"], n=c["n"], cores=r["cores"],
                   ranks=r["world_size"], noise=max(c["max"] - c["min"], st["max"] - st["min"]),
                   share=share.get("share"), why=share.get("why"), low=d["low"], high=d["high"])
    if c["n"] > 2:          # as the accuracy verdicts: the paired 95 % interval over the seeds excludes 0
        shorter = d["ranked"] and d["mean"] > 0
        beyond = "the seeds' spread (paired 95 % interval {low:+.2f} to {high:+.2f} s)"
    else:                   # 2 seeds give no useful interval: the difference against either split's seed-to-seed range
        shorter, beyond = c["mean"] - st["mean"] > figures["noise"], "the seeds' range ({noise:.2f} s)"
    measured = ("a step took {c:.2f} s under the contiguous split and {st:.2f} s under the stratified one (every "
                "step of a phase, its first included; mean of {n} seeds; {ratio:.2f}x)")
    if share.get("held") and quiet(share, r["cores"]):
        held = ("With each rank held to its share of the {cores} cores ({share:.2f} of a core: a rank cannot borrow "
                "the cores an idle rank leaves, as on a card server), ")
        return claim("step_time", shorter, held + measured + ": stratified is shorter beyond " + beyond + ".",
                     held + measured + ": not shorter beyond " + beyond + ".", **figures)
    if share.get("held"):           # a quota caps a rank; it cannot give it cores another program is using
        return claim("step_time", None, measured[0].upper() + measured[1:] + ". Each rank was held to its share of "
                     "the {cores} cores, but other work on this machine took up to {other:.2f} of them during a phase "
                     "(more than {quiet:.0%}; a second job, a test beside this one), so the ranks did not get their "
                     "shares: the step time is not judged here. Run the chapter on a quiet machine for the verdict.",
                     other=share["other_cores_max"], quiet=QUIET, **figures)
    text = measured[0].upper() + measured[1:] + (": stratified is shorter beyond " + beyond + "." if shorter else
                                                 "; " + beyond + " is too wide to call either shorter.")
    if r["cores"] < r["world_size"]:
        text += (" Here {ranks} ranks share {cores} cores" + (" (no per-rank CPU quota: {why})" if share else "")
                 + ": the decoding a split spreads over the ranks still queues for the same cores, so the step time "
                 "is not judged; the straggler verdict is.")
    return claim("step_time", None, text, **figures)


def _rank_spread_claim(r: dict) -> Claim:
    """One seed's observation: per-rank step-time spread and slowest data wait under each split."""
    apart = {k: 100.0 * (v - 1.0) for k, v in r["step_time_spread"].items()}
    rest = [v for k, v in apart.items() if k != "contiguous"]
    lo, hi = min(rest), max(rest)
    wait = r["slowest_data_wait_ms"]
    figures = dict(c=apart["contiguous"], lo=lo, hi=hi, w=wait["contiguous"],
                   wo=max(v for k, v in wait.items() if k != "contiguous"))
    if apart["contiguous"] <= hi and figures["w"] <= 2 * figures["wo"]:
        text = ("Under the contiguous split the ranks' mean steps were within {c:.1f}% of each other ({lo:.1f}-{hi:.1f}% "
                "under the other splits) and no rank waited more than {w:.1f} ms per step for data (others: up to "
                "{wo:.1f} ms): no rank was slower for its classes here.")
    else:
        text = ("Under the contiguous split the ranks' mean steps were {c:.1f}% apart (other splits: {lo:.1f}-{hi:.1f}%) "
                "and the slowest rank waited {w:.1f} ms per step for data (others: up to {wo:.1f} ms).")
    return claim("step_time", None, text, **figures)


def _time_verdict_claim(r: dict) -> list[Claim]:
    """Per split and seed, the job's own straggler verdict (``helpers.job.straggler``) against what the class costs
    predict: where the contiguous split gives one rank ``UNEVEN`` times the mean reading load per epoch, that rank
    should hold the others back for data on every seed and the stratified split should have no straggler; where no
    split is predicted uneven (classes that cost the same to read), no split should have one."""
    by_seed = r.get("straggler_by_seed") or ({k: [v] for k, v in r["straggler"].items()} if r.get("straggler") else None)
    if not by_seed:                  # recorded before the verdict existed
        return []
    predicted = (r.get("class_load") or {}).get("predicted", {})
    uneven = {k: p["slowest_rank"] for k, p in predicted.items() if p["shard_max_over_mean"] >= UNEVEN}
    seeds = len(by_seed["contiguous"])
    named = {k: [v for v in vs if v["rank"] is not None] for k, vs in by_seed.items()}
    worst = max((v for vs in by_seed.values() for v in vs), key=lambda v: v["spread_s"])
    how = ("from the sampled steps that time compute and communication apart" if worst["method"] == "split" else
           "from the data wait alone: these phases are too short to sample a split step, so a compute straggler "
           "would not show")
    figures = dict(seeds=seeds, how=how, spread_ms=1e3 * worst["spread_s"], share=worst["spread_share"],
                   stragglers=sum(map(len, named.values())))
    if "contiguous" not in uneven:
        return [claim("time_verdict", not figures["stragglers"],
                      "No split made one rank hold the others back, as the even class costs predict: the ranks waited "
                      "at most {spread_ms:.1f} ms per step for the last ({share:.1%} of a step), verdict {how}.",
                      "A rank held the others back although no split was predicted uneven — " + _named(named)
                      + " (verdict {how}).", **figures)]
    rank = uneven["contiguous"]
    contiguous = by_seed["contiguous"]
    hit = [v for v in contiguous if v["rank"] == rank and v["cause"] == "data"]
    figures.update(rank=rank, hits=len(hit), wait_ms=1e3 * _mean(v["wait_s"] for v in hit),
                   wait_share=_mean(v["wait_share"] for v in hit), stratified=len(named["stratified"]),
                   strat_ms=1e3 * max(v["spread_s"] for v in by_seed["stratified"]),
                   others=_others(named))
    holds = len(hit) == seeds and not named["stratified"]
    return [claim("time_verdict", holds,
                  "As predicted, under the contiguous split rank {rank} held the others back for data on {hits} of "
                  "{seeds} seeds ({wait_ms:.0f} ms per step, {wait_share:.0%} of their time); under the stratified "
                  "split no rank did{others}.",
                  "The class costs predicted rank {rank} as the contiguous split's data straggler and none for the "
                  "stratified split; the run named: " + _named(named) + ".", **figures)]


def _others(named: dict) -> str:
    """The splits besides contiguous and stratified, as the end of a sentence: none, or their named stragglers."""
    rest = {k: v for k, v in named.items() if k not in ("contiguous", "stratified")}
    return ". Other splits: " + _named(rest) if any(rest.values()) else ", nor under the others"


def _named(named: dict) -> str:
    """Each split's named stragglers, one phrase per split ('no straggler' for a split without any)."""
    def one(v):
        return (f"rank {v['rank']}" + (f" on {v['node']}" if v["node"] else "") + f" held the others back by "
                f"{1e3 * v['wait_s']:.1f} ms per step ({v['wait_share']:.0%} of their time, cause {v['cause']})")
    return "; ".join(f"{NAMES[k]}: " + (", ".join(one(v) for v in vs) if vs else "no straggler")
                     for k, vs in named.items())


def _mean(values) -> float:
    v = list(values)
    return sum(v) / len(v) if v else 0.0


def _accuracy_claim(r: dict) -> Claim:
    """Held-out accuracy per split (an observation): compared only when the best is well above chance."""
    acc, chance = r["accuracy"], 1.0 / r["num_classes"]
    lo, hi = min(acc.values()), max(acc.values())
    if hi < NEAR_CHANCE * chance:
        span = f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"
        return claim("accuracy", None,
                     "After {steps} steps every split's held-out accuracy is {span}, near chance "
                     "({chance:.2f}): too few steps to compare the splits by accuracy (the cpu preset trains longer).",
                     steps=r["steps"], lo=lo, hi=hi, span=span, chance=chance)
    best = max(acc, key=acc.get)
    return claim("accuracy", None,
                 "Held-out accuracy after {steps} steps: " + ", ".join(f"{NAMES[k]} {v:.3f}" for k, v in acc.items())
                 + " (chance {chance:.2f}); the best was {best}, {gap:.1f} points above the contiguous split, the "
                 "worst {worst}.",
                 steps=r["steps"], chance=chance, best=NAMES[best], gap=100.0 * (acc[best] - acc["contiguous"]),
                 worst=NAMES[min(acc, key=acc.get)])


def _class_load_claim(load: dict) -> Claim:
    """An observation: what the classes cost to read here, and each split's predicted slowest rank from it."""
    p = {k: v["step_max_over_mean"] for k, v in load["predicted"].items()}
    return claim("class_read_cost", None,
                 "Reading cost per class (decode + resize, {n} images each): the costliest took "
                 + times(load["cost_ratio"]) + " the "
                 "cheapest; predicted slowest rank per step against the mean: contiguous {c:.2f}x, stratified "
                 "{st:.2f}x.", n=load["sample"], ratio=load["cost_ratio"], c=p["contiguous"], st=p["stratified"])
