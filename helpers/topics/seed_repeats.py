"""One training comparison repeated over seeds: per-split figures per seed, their mean and spread, and paired
differences (the same seed's splits differ only by the sampler) judged against their own noise.

A difference ranks two splits only when its paired 95 % interval (Student's t over the seeds) excludes 0;
otherwise it is "within the seeds' spread". With fewer than 2 seeds nothing is ranked.
"""

from __future__ import annotations

import math

import numpy as np

# Student's t, two-sided 95 %, by degrees of freedom (scipy.stats.t.ppf(0.975, df)); more than 30: 1.96 is close
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    """The two-sided 95 % Student's t quantile for ``df`` degrees of freedom (the nearest tabled df below)."""
    if df < 1:
        return math.inf
    return T95[max(d for d in T95 if d <= df)] if df <= 30 else 1.96


def per_seed(job, samplers, seeds) -> dict:
    """``{"accuracy"|"final_loss": {sampler: [one value per seed]}}`` from a job whose phases are
    ``sampler@seed`` (``helpers.train.phases``): held-out accuracy, and the ranks' mean loss at the last step;
    ``accuracy_batch_stats`` too when the job recorded it (BatchNorm on batch statistics: a diagnostic)."""
    return by_seed_values({s: {k: job.phase(f"{k}@{s}") for k in samplers} for s in seeds})


def by_seed_values(by_seed: dict) -> dict:
    """The same figures from ``{seed: {sampler: JobResult}}`` (one job per phase or phases of one job)."""
    first = next(iter(by_seed.values()))
    out = {"accuracy": {}, "final_loss": {}}
    if all("accuracy_batch_stats" in r.summaries[0] for r in first.values()):
        out["accuracy_batch_stats"] = {}
    for k in first:
        runs = [results[k] for results in by_seed.values()]
        for key in out:
            out[key][k] = [float(np.mean(r.metric("loss")[:, -1])) if key == "final_loss" else
                           float(r.summaries[0][key]) for r in runs]
    return out


def spread(values) -> dict:
    """Mean, sample std (0 for one value), min and max of one split's values over seeds."""
    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "min": float(v.min()), "max": float(v.max()), "n": int(v.size)}


def paired(a, b) -> dict:
    """``a - b`` seed by seed: mean, its 95 % half-width, and whether the interval excludes 0 (``ranked``),
    with the sign of every seed's difference (``same_sign``: all seeds agree)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    half = t95(d.size - 1) * d.std(ddof=1) / math.sqrt(d.size) if d.size > 1 else math.inf
    mean = float(d.mean())
    return {"mean": mean, "half_width": float(half), "low": mean - float(half), "high": mean + float(half),
            "ranked": bool(abs(mean) > half), "same_sign": bool(np.all(d > 0) or np.all(d < 0)),
            "diffs": [float(x) for x in d]}


def summary(values: dict) -> dict:
    """Per split: ``spread``; per pair of splits (``"a-b"``, in the given order): ``paired``."""
    keys = list(values)
    pairs = {f"{a}-{b}": paired(values[a], values[b]) for i, a in enumerate(keys) for b in keys[i + 1:]}
    return {"spread": {k: spread(v) for k, v in values.items()}, "paired": pairs}


def table_rows(values: dict, names: dict | None = None, digits: int = 3) -> list[tuple]:
    """(split, each seed's value, mean ± std, min-max): the chapter's table."""
    rows = []
    for k, v in values.items():
        s = spread(v)
        f = f".{digits}f"
        rows.append(((names or {}).get(k, k), *(round(x, digits) for x in v),
                     f"{s['mean']:{f}} ± {s['std']:{f}}", f"{s['min']:{f}}-{s['max']:{f}}"))
    return rows
