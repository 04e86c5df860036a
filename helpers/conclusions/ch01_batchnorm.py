"""Chapter 01's BatchNorm claims: how far apart the ranks' batch statistics are per split, what makes the ranks'
losses differ, and whether ``nn.SyncBatchNorm`` runs here, from the job's BatchNorm probe (``helpers.topics.bn_ranks``).
"""

from __future__ import annotations

import numpy as np

from helpers.conclusions import Claim, claim
from helpers.conclusions.ch01_repeats import NAMES

SHORT = {k: v.replace("DistributedSampler(", "").rstrip(")") for k, v in NAMES.items()}   # shuffle=True
MOSTLY = 0.5     # shared statistics leave at most this share of the loss spread: BatchNorm made most of it
LITTLE = 0.8     # they leave at least this share: BatchNorm made little of it


def bn_claims(r: dict) -> list[Claim]:
    """The claims from ``r["bn_rank"]`` (``bn_ranks.by_seed``) and ``r["sync_batchnorm_error"]``; none without them."""
    out = []
    if r.get("bn_rank"):
        out += [_rank_statistics(r["bn_rank"]), _loss_source(r["bn_rank"])]
    if "sync_batchnorm_error" in r:
        out.append(sync_batchnorm_claim(r["sync_batchnorm_error"], r.get("device_target", "CPU")))
    return out


def _mean(figures: dict, figure: str, split: str) -> float:
    return float(np.mean(figures[figure][split]))


def _rank_statistics(figures: dict) -> Claim:
    """Mechanism: a contiguous rank's batch holds its own classes, so its BatchNorm statistics sit further from the
    other ranks' than under the stratified split (whose ranks all read the global mix)."""
    c, s = _mean(figures, "rank_spread", "contiguous"), _mean(figures, "rank_spread", "stratified")
    n = len(figures["rank_spread"]["contiguous"])
    others = ", ".join(f"{SHORT[k]} {_mean(figures, 'rank_spread', k):.3f}" for k in figures["rank_spread"]
                       if k not in ("contiguous", "stratified"))
    return claim("bn_rank_statistics", c > s,
                 "Contiguous ranks' BatchNorm batch means sat {c:.3f} channel std apart, stratified ones {s:.3f} "
                 "({n} seeds).",
                 "The ranks' BatchNorm batch means were not further apart under the contiguous split ({c:.3f} channel "
                 "std) than under the stratified one ({s:.3f}; {others}; {n} seeds).",
                 c=c, s=s, n=n, others=others, ratio=c / s if s else float("inf"))


def _loss_source(figures: dict) -> Claim:
    """Observation: the contiguous ranks' loss spread on their next batches with each rank's own batch statistics
    (as in training) against every rank on the same recomputed ones: what is left is the classes themselves."""
    own, shared = _mean(figures, "loss_spread_own", "contiguous"), _mean(figures, "loss_spread_shared", "contiguous")
    left = shared / own if own else 1.0
    if left >= LITTLE:
        tail = "the classes each rank holds make the spread, not BatchNorm."
    elif left <= MOSTLY:
        tail = "BatchNorm's local statistics make most of the spread."
    else:
        tail = "BatchNorm's local statistics make part of the spread, the ranks' classes the rest."
    return claim("loss_spread_source", None,
                 "Contiguous ranks' next-batch losses spread {own:.2f} with their own batch statistics, {shared:.2f} "
                 "with shared ones: " + tail,
                 own=own, shared=shared, left=left)


def sync_batchnorm_claim(error: str | None, device: str) -> Claim:
    """Observation: what ``nn.SyncBatchNorm`` (statistics over all ranks' batches) did on this device."""
    if error:
        return claim("sync_batchnorm", None,
                     "nn.SyncBatchNorm (BatchNorm over all ranks' batches) is refused on {device} ({kind}); on Ascend "
                     "and GPU it replaces nn.BatchNorm2d.", device=device, error=error, kind=error.split(":")[0])
    return claim("sync_batchnorm", None,
                 "nn.SyncBatchNorm, BatchNorm over all ranks' batches, builds on {device}: use it there in place of "
                 "nn.BatchNorm2d.", device=device)
