"""Chapter 01's BatchNorm probe: per-split figures from the ranks' records (helpers.topics.bn_ranks) and the
claims they give (helpers.conclusions.ch01_batchnorm)."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from helpers.conclusions.ch01_batchnorm import bn_claims, sync_batchnorm_claim  # noqa: E402
from helpers.topics import bn_ranks  # noqa: E402


class _Phase:
    """A phase's JobResult as bn_ranks reads it: each rank's closing record."""

    def __init__(self, losses_own, losses_shared, layers, z=(0.1, -0.1)):
        self.summaries = {r: {"bn_probe": dict(loss_own=o, loss_shared=s, layers=layers, z=list(z),
                                               shared_statistics=True)}
                          for r, (o, s) in enumerate(zip(losses_own, losses_shared))}


def _by_seed(own_c=(1.0, 2.0), shared_c=(1.05, 1.95), spread_c=0.05, spread_s=0.02):
    phases = {"contiguous": _Phase(own_c, shared_c, [spread_c, spread_c]),
              "distributed": _Phase((1.0, 1.0), (1.0, 1.0), [0.03]),
              "distributed_shuffle": _Phase((1.0, 1.2), (1.0, 1.2), [0.02]),
              "stratified": _Phase((1.0, 1.1), (1.0, 1.1), [spread_s])}
    return {1: phases, 2: phases}


def test_figures_per_split_and_seed():
    fig = bn_ranks.by_seed(_by_seed())
    assert fig["rank_spread"]["contiguous"] == [0.05, 0.05]
    assert fig["loss_spread_own"]["contiguous"] == [pytest.approx(0.5)] * 2
    assert fig["loss_spread_shared"]["contiguous"] == [pytest.approx(0.45)] * 2
    assert bn_ranks.table_rows(fig)[0] == ("contiguous", 0.05, 0.5, 0.45)
    assert bn_ranks.by_seed({1: {"contiguous": type("R", (), {"summaries": {0: {}}})()}}) is None
    assert bn_ranks.z_matrix(_by_seed()[1]["contiguous"]).shape == (2, 2)
    assert bn_ranks.plot_rank_statistics(_by_seed()[1], "t").axes


def test_claims_follow_the_probe_both_ways():
    c = {x.id: x for x in bn_claims({"bn_rank": bn_ranks.by_seed(_by_seed()), "sync_batchnorm_error": "E: x"})}
    assert c["bn_rank_statistics"].holds is True and "0.050 channel std apart" in c["bn_rank_statistics"].text
    assert "the classes each rank holds make the spread" in c["loss_spread_source"].text      # shared 0.45 of own 0.5
    assert c["sync_batchnorm"].holds is None and "refused on CPU" in c["sync_batchnorm"].text
    flipped = {x.id: x for x in bn_claims({"bn_rank": bn_ranks.by_seed(_by_seed(spread_c=0.01))})}
    assert flipped["bn_rank_statistics"].holds is False and "were not further apart" in flipped["bn_rank_statistics"].text
    assert "sync_batchnorm" not in flipped
    mostly = {x.id: x for x in bn_claims({"bn_rank": bn_ranks.by_seed(_by_seed(shared_c=(1.4, 1.6)))})}
    assert "make most of the spread" in mostly["loss_spread_source"].text
    part = {x.id: x for x in bn_claims({"bn_rank": bn_ranks.by_seed(_by_seed(shared_c=(1.2, 1.8)))})}
    assert "make part of the spread" in part["loss_spread_source"].text
    assert "builds on GPU" in sync_batchnorm_claim(None, "GPU").text
    assert bn_claims({}) == []
