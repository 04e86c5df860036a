"""Chapter 01 executed with papermill (preset="ci"), then its recorded results asserted."""


import pytest

from tests.notebooks.chapter_run import execute

pytestmark = pytest.mark.notebooks


def test_01_load_imbalance(standin, tmp_path):
    r = execute("01_load_imbalance", tmp_path)
    kinds = {"contiguous", "distributed", "distributed_shuffle", "stratified"}
    assert set(r["max_tv"]) == set(r["min_classes_per_step"]) == set(r["accuracy"]) == kinds
    others = [v for k, v in r["max_tv"].items() if k != "stratified"]
    assert r["max_tv"]["stratified"] < min(others)
    assert r["min_classes_per_step"]["stratified"] > r["min_classes_per_step"]["contiguous"]
    assert r["min_classes_per_step"]["distributed"] <= 2, "DistributedSampler(shuffle=False) steps see 1-2 classes"
    assert all(0.0 <= a <= 1.0 for a in r["accuracy"].values())
    assert r["imagenet_scale_max_tv"]["stratified"] <= 0.002
    assert r["imagenet_scale_max_tv"]["stratified"] < r["imagenet_scale_max_tv"]["distributed_shuffle"]
    assert 0 < r["imagenet_scale_split_s"] < 5
    assert r["class_column_rejected"] is True
