"""The hybrid step's gather bytes, counted by hand for a small layout."""

from helpers.topics.logits_traffic import gather_bytes


def test_gather_bytes_count_forward_and_backward_payloads_per_rank():
    g = gather_bytes(mp=2, batch=8, classes=1000, features=64)
    assert g["logits_gather"] == 2 * (2 * 8) * 1000 * 4 == 128_000       # (mp*b x C) floats, forward and backward
    assert g["features_gather"] == 2 * 16 * 64 * 4 == 8_192
    assert g["sharded_ce"] == 5 * 16 * 4 == 320                           # max, sum of exp, target; 2 back
    assert g["logits_over_sharded"] == 400.0                              # 2C / 5
