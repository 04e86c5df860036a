"""Balance figures from what a job's ranks actually read (their per-step ``class_counts`` records).

``helpers.topics.shard_stats`` predicts balance from index arrays before anything runs; this module measures it after
a job, from the metrics files, so the chapter can show that the prediction is what the ranks really saw.
"""

from __future__ import annotations

import numpy as np

from helpers.core.step_times import phase_step_s


def step_histograms(result, num_classes: int | None = None) -> np.ndarray:
    """(ranks, steps, classes): class counts of every rank's batch at every step, from the sparse
    ``class_counts`` records; ``num_classes`` defaults to the job's summary (else the largest class seen + 1)."""
    ranks = sorted(result.steps)
    if num_classes is None:
        known = [s.get("num_classes") for s in getattr(result, "summaries", {}).values() if s.get("num_classes")]
        seen_max = max((c for r in ranks for rec in result.steps[r] for c, _ in rec["class_counts"]), default=-1)
        num_classes = max(known + [seen_max + 1])
    out = np.zeros((len(ranks), max(len(result.steps[r]) for r in ranks), num_classes), dtype=np.int64)
    for i, r in enumerate(ranks):
        for j, rec in enumerate(result.steps[r]):
            for c, n in rec["class_counts"]:
                out[i, j, c] += n
    return out


def rank_histograms(result) -> np.ndarray:
    """(ranks, classes): the images of each class a rank trained on, over the whole job."""
    return step_histograms(result).sum(axis=1)


def tv_from_global(hists: np.ndarray, global_counts) -> np.ndarray:
    """Per row: total-variation distance of its class mix from the global one."""
    hists = np.asarray(hists, dtype=np.float64)
    g = np.asarray(global_counts, dtype=np.float64)
    mix = hists / np.maximum(hists.sum(axis=1, keepdims=True), 1)
    return 0.5 * np.abs(mix - g / g.sum()).sum(axis=1)


def global_step_classes(result) -> np.ndarray:
    """Per step: how many distinct classes the global batch (all ranks together) held."""
    return (step_histograms(result).sum(axis=0) > 0).sum(axis=1)


def global_step_entropy(result) -> np.ndarray:
    """Per step: entropy (bits) of the global batch's class mix."""
    h = step_histograms(result).sum(axis=0).astype(np.float64)
    p = h / h.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.nansum(np.where(p > 0, p * np.log2(p), 0.0), axis=1)


def batch_classes(result) -> np.ndarray:
    """(ranks, steps): how many distinct classes each rank's own batch held at each step (1 = a batch of one
    class: what a contiguous split of class-sorted data feeds a rank)."""
    return (step_histograms(result) > 0).sum(axis=2)


def seconds_per_step(result) -> float:
    """``step_times.phase_step_s`` of a phase (or a job of its own): every step, the first too unless it was the
    job's first, which built the graph."""
    first = result.steps[min(result.steps)][0]
    return phase_step_s(result.metric("step_s"), skip=int(first.get("job_step", 0) == 0))


def rank_step_spread(result, skip: int = 1) -> float:
    """Slowest over fastest rank's mean step time, the first ``skip`` steps (graph compilation) left out."""
    per_rank = np.asarray(result.metric("step_s"))[:, skip:].mean(axis=1)
    return float(per_rank.max() / per_rank.min())


def slowest_data_wait_ms(result, skip: int = 1) -> float:
    """The largest per-rank mean wait for data (ms per step, first ``skip`` steps left out): a rank whose
    images cost more to read and decode would show here, before the AllReduce makes all ranks wait alike."""
    return float(np.asarray(result.metric("data_s"))[:, skip:].mean(axis=1).max() * 1000.0)
