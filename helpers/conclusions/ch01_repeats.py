"""Chapter 01's payoff verdicts, from the splits trained over several seeds (``helpers.topics.seed_repeats``).

A sentence ranks two splits only when their paired difference over the seeds is outside its 95 % interval
(``seed_repeats.paired``: the same seed's splits differ only by the sampler); otherwise it says they are within
the seeds' spread. Before any split has trained (best mean accuracy under ``NEAR_CHANCE`` x chance, the ``ci``
preset's few steps) nothing is ranked and only the robust effect, shuffle=False at chance, is a verdict.
"""

from __future__ import annotations

import numpy as np

from helpers.conclusions import Claim, claim
from helpers.topics.seed_repeats import paired, spread

NAMES = {"contiguous": "contiguous", "distributed": "DistributedSampler(shuffle=False)",
         "distributed_shuffle": "DistributedSampler(shuffle=True)", "stratified": "stratified"}
NEAR_CHANCE = 2.0        # a split "trained" once its mean accuracy is at least this many times chance
BLOG_SWING = 0.02        # the source blog's "validation accuracy swinging by 2 %"
MIN_SEEDS_TO_RANK = 3    # with 2 seeds the paired 95 % interval is 12.7 x the differences' std / sqrt(2) wide


def trained(acc: dict, chance: float) -> bool:
    """Whether some split's mean accuracy over the seeds reached ``NEAR_CHANCE`` x chance."""
    return max(spread(v)["mean"] for v in acc.values()) >= NEAR_CHANCE * chance


def comparable(acc: dict, chance: float) -> bool:
    """Whether the splits can be ranked: some split trained, over at least ``MIN_SEEDS_TO_RANK`` seeds."""
    return trained(acc, chance) and min(len(v) for v in acc.values()) >= MIN_SEEDS_TO_RANK


def ranked_pairs(values: dict) -> list[tuple[str, str, dict]]:
    """(better, worse, paired difference) for every pair of splits whose difference is outside its 95 %
    interval; pairs within the seeds' spread are left out."""
    keys, out = list(values), []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            p = paired(values[a], values[b])
            if p["ranked"]:
                out.append((a, b, p) if p["mean"] > 0 else (b, a, paired(values[b], values[a])))
    return out


def repeat_claims(r: dict) -> list[Claim]:
    """The verdicts from ``r["accuracy_by_seed"]`` (split -> one held-out accuracy per seed), ``num_classes``
    and ``steps``; none when the run has fewer than 2 seeds."""
    acc = r.get("accuracy_by_seed")
    if not acc or min(len(v) for v in acc.values()) < 2:
        return []
    chance = 1.0 / r["num_classes"]
    out = [payoff_claim(r), _at_chance(acc, chance, r["steps"]), _stratified_vs_shuffle(acc, chance),
           _ranking(acc, chance), _seed_noise(acc)]
    if r.get("accuracy_batch_stats_by_seed") and trained(acc, chance):
        out.append(_batchnorm(acc, r["accuracy_batch_stats_by_seed"]))
    return out


def _pct(x: float) -> str:
    return f"{100.0 * x:+.1f}"


def _at_chance(acc: dict, chance: float, steps: int) -> Claim:
    """Robust at any length: DistributedSampler(shuffle=False) on class-sorted data stays at chance; once the
    others have trained, each must also beat it beyond the seeds' spread."""
    d = spread(acc["distributed"])
    others = {k: paired(v, acc["distributed"]) for k, v in acc.items() if k != "distributed"}
    at_chance = d["max"] < NEAR_CHANCE * chance
    figures = dict(mean=d["mean"], std=d["std"], max=d["max"], n=d["n"], chance=chance, steps=steps)
    if not trained(acc, chance):
        return claim("shuffle_false_chance", at_chance,
                     "DistributedSampler(shuffle=False) on class-sorted data stayed at chance: {mean:.3f} ± {std:.3f} "
                     "over {n} seeds (at most {max:.3f}; chance {chance:.2f}). After {steps} steps no split reached "
                     "twice chance: not ranked.",
                     "DistributedSampler(shuffle=False) reached {max:.3f} in one of {n} seeds, more than twice "
                     "chance ({chance:.2f}), on class-sorted data.", **figures)
    beaten = [NAMES[k] for k, p in others.items() if p["ranked"] and p["mean"] > 0]
    within = [NAMES[k] for k in others if NAMES[k] not in beaten]
    gaps = ", ".join(f"{NAMES[k]} {_pct(p['mean'])} ± {100 * p['half_width']:.1f}" for k, p in others.items())
    tail = (" every other split beat it beyond the seeds' spread" if not within else
            (" " + ", ".join(beaten) + " beat it beyond the seeds' spread, " if beaten else " ")
            + ", ".join(within) + " not (its own seeds came near chance too)")
    tail += " (paired, points: {gaps})"
    if d["n"] < MIN_SEEDS_TO_RANK:           # the gaps stay in the record
        tail = f" {d['n']} seeds cannot rank the others against it"
    return claim("shuffle_false_chance", at_chance,
                 "DistributedSampler(shuffle=False) on class-sorted data trained at chance: {mean:.3f} ± {std:.3f} "
                 "over {n} seeds (at most {max:.3f}; chance {chance:.2f});" + tail + ".",
                 "DistributedSampler(shuffle=False) reached {max:.3f} in one of {n} seeds, more than twice chance "
                 "({chance:.2f}), on class-sorted data (paired gaps of the others, points: {gaps}).",
                 gaps=gaps, beaten=len(beaten), **figures)


def _stratified_vs_shuffle(acc: dict, chance: float) -> Claim:
    """The chapter's fix against plain shuffling: "stratified >= shuffle=True within the seeds' spread"."""
    p = paired(acc["stratified"], acc["distributed_shuffle"])
    s, d = spread(acc["stratified"]), spread(acc["distributed_shuffle"])
    figures = dict(diff=100 * p["mean"], low=100 * p["low"], high=100 * p["high"], n=s["n"], s=s["mean"],
                   ss=s["std"], d=d["mean"], ds=d["std"])
    head = ("Held-out accuracy over {n} seeds: stratified {s:.3f} ± {ss:.3f}, DistributedSampler(shuffle=True) "
            "{d:.3f} ± {ds:.3f}; paired difference {diff:+.1f} points (95 % interval {low:+.1f} to {high:+.1f}). ")
    if not trained(acc, chance):
        return claim("stratified_vs_shuffle", None, head + "Neither has trained yet: not compared.", **figures)
    if not comparable(acc, chance):
        return claim("stratified_vs_shuffle", None, head + "{n} seeds cannot rank them: not compared.", **figures)
    if p["ranked"] and p["mean"] > 0:
        tail = "The stratified sampler trained better than shuffling, beyond the seeds' spread."
    elif p["ranked"]:
        tail = "The stratified sampler trained worse than shuffling, beyond the seeds' spread."
    else:
        tail = ("The interval includes 0: the two are tied within the seeds' spread, and one seed's run cannot "
                "rank them (use the stratified sampler for its exact per-rank class balance, not for accuracy "
                "on a dataset this balanced).")
    return claim("stratified_vs_shuffle", p["high"] >= 0, head + tail, **figures)


def _ranking(acc: dict, chance: float) -> Claim:
    """Every pair of splits ranked beyond the seeds' spread, and how many pairs were not (an observation)."""
    if not trained(acc, chance):
        return claim("accuracy_ranking", None, "No split has trained yet: no pair of splits is ranked.")
    if not comparable(acc, chance):
        return claim("accuracy_ranking", None, "With {n} seeds no pair of splits is ranked.",
                     n=min(len(v) for v in acc.values()))
    names = NAMES
    pairs = ranked_pairs(acc)
    total = len(acc) * (len(acc) - 1) // 2
    listed = "; ".join(f"{names[a]} > {names[b]} ({_pct(p['mean'])} points)" for a, b, p in pairs)
    return claim("accuracy_ranking", None,
                 ("Ranked beyond the seeds' spread (paired 95 % intervals): " + listed + "; the other {rest} of "
                  "{total} pairs are within it." if pairs else
                  "No pair of splits differs beyond the seeds' spread (paired 95 % intervals, {total} pairs)."),
                 rest=total - len(pairs), total=total, ranked=len(pairs))


def _seed_noise(acc: dict) -> Claim:
    """The blog's "accuracy swinging by 2 %" against the seed-to-seed spread measured here (an observation)."""
    trained_ones = {k: spread(v) for k, v in acc.items() if k != "distributed"}
    lo = min(trained_ones.values(), key=lambda s: s["std"])
    hi = max(trained_ones.values(), key=lambda s: s["std"])
    figures = dict(lo=100 * lo["std"], hi=100 * hi["std"], n=lo["n"], blog=100 * BLOG_SWING)
    return claim("seed_noise", None,
                 "Seed to seed (weight initialisation and data order), one split's held-out accuracy varied by "
                 "{lo:.1f} to {hi:.1f} points (std over {n} seeds, shuffle=False left out): "
                 + ("the blog's {blog:.0f} % swing is inside that noise, so one run cannot show it."
                    if lo["std"] > BLOG_SWING else "a {blog:.0f} % swing would stand out of it."), **figures)


def _batchnorm(acc: dict, batch: dict) -> Claim:
    """The diagnostic: the same weights evaluated with BatchNorm on batch statistics instead of its running ones.
    If the running statistics make the noise, the spread shrinks and the accuracy rises there (an observation)."""
    kept = [k for k in acc if k != "distributed"]
    run_sd = max(spread(acc[k])["std"] for k in kept)
    batch_sd = max(spread(batch[k])["std"] for k in kept)
    gain = min(paired(batch[k], acc[k])["mean"] for k in kept)
    figures = dict(run=100 * run_sd, batch=100 * batch_sd, gain=100 * gain,
                   means=", ".join(f"{NAMES[k]} {spread(batch[k])['mean']:.3f}" for k in kept))
    return claim("batchnorm_statistics", None,
                 "The same weights evaluated with BatchNorm normalising each batch instead of its running "
                 "statistics: {means} (largest std over seeds {batch:.1f} points, against {run:.1f} with the "
                 "running statistics; every split gained at least {gain:+.1f} points on average). "
                 + ("The running statistics, not the sampler, make most of the seed-to-seed noise."
                    if batch_sd < 0.5 * run_sd else
                    "The running statistics do not explain the seed-to-seed noise here."), **figures)


def payoff_sentence(r: dict) -> str:
    """The answer to "does the fix pay off?" from ``r`` (``accuracy_by_seed``, ``num_classes``, ``steps``; with
    ``bn_rank`` and ``straggler`` the reasons left to stratify): held-out accuracy with BatchNorm statistics
    recomputed for the weights, over the seeds, ranked only beyond their spread."""
    return payoff_claim(r).text


def payoff_claim(r: dict) -> Claim:
    """The payoff answer as a claim (an observation; the verdicts are the claims beside it)."""
    acc, chance = r["accuracy_by_seed"], 1.0 / r["num_classes"]
    m = {k: spread(v)["mean"] for k, v in acc.items()}
    p = paired(acc["stratified"], acc["distributed_shuffle"])
    n = min(len(v) for v in acc.values())
    how = ("Judged on the weights (precise BN: BatchNorm statistics recomputed before evaluating)"
           if r.get("bn_recalibration_batches") else "Judged with BatchNorm's running statistics")
    figures = dict(n=n, steps=r["steps"], chance=chance, s=m["stratified"], d=m["distributed_shuffle"],
                   f=m["distributed"], c=m["contiguous"], diff=100 * p["mean"], low=100 * p["low"],
                   high=100 * p["high"], ss=spread(acc["stratified"])["std"], ds=spread(acc["distributed_shuffle"])["std"])
    means = ("stratified {s:.3f}, shuffle=True {d:.3f}, shuffle=False {f:.3f}, contiguous {c:.3f} (means over "
             "{n} seeds)")
    if not trained(acc, chance):
        return claim("payoff", None, how + ", no split reached twice chance ({chance:.2f}) after {steps} steps: "
                     + means + "; this run cannot say whether stratifying pays off.", **figures)
    if not comparable(acc, chance):
        return claim("payoff", None, how + ", after {steps} steps: " + means + "; {n} seeds cannot rank them "
                     "(stratified minus shuffle=True: {diff:+.1f} points, 95 % interval {low:+.1f} to {high:+.1f}).",
                     **figures)
    pair = ("{d:.3f} ± {ds:.3f} against stratified {s:.3f} ± {ss:.3f} over {n} seeds (paired {diff:+.1f} points, "
            "95 % interval {low:+.1f} to {high:+.1f})")
    if p["ranked"] and p["mean"] > 0:
        return claim("payoff", None, how + ", stratifying paid off: shuffle=True reached " + pair + ".", **figures)
    if p["ranked"]:
        return claim("payoff", None, how + ", shuffle=True trained better than stratified: " + pair + ".", **figures)
    false_beaten = paired(acc["distributed_shuffle"], acc["distributed"])
    lines = (["never shuffle=False on sorted data"] if false_beaten["ranked"] and false_beaten["mean"] > 0 else [])
    lines.append("shuffle=True suffices for accuracy")
    reasons = _stratify_reasons(r)
    if reasons:
        lines.append("stratify for " + " and ".join(reasons))
    about_false = (", and shuffle=False on sorted data reached {f:.3f}" if lines[0].startswith("never") else
                   "; shuffle=False ({f:.3f}) was not beaten beyond the seeds' spread")
    ahead = sum(x > 0 for x in p["diffs"])
    return claim("payoff", None, how + ", shuffle=True is as good as stratified for accuracy within the seeds' "
                 "spread: " + pair.replace(")", f"; stratified ahead in {ahead} of {n})") + about_false + ": "
                 + "; ".join(lines) + ".", **figures)


def _stratify_reasons(r: dict) -> list[str]:
    """What this run measured in the stratified split's favour besides accuracy: no straggler where the contiguous
    split had one in every seed, ranks' BatchNorm statistics closer together."""
    out = []
    lag = r.get("straggler_by_seed") or {}       # split -> one straggler verdict per seed
    if (lag.get("contiguous") and all(v["rank"] is not None for v in lag["contiguous"])
            and lag.get("stratified") and all(v["rank"] is None for v in lag["stratified"])):
        out.append("balanced time")
    bn = (r.get("bn_rank") or {}).get("rank_spread")
    if bn and np.mean(bn["stratified"]) < np.mean(bn["contiguous"]):
        out.append("per-rank BatchNorm")
    return out
