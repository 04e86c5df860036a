"""Each chapter notebook executed with papermill (preset="ci"), then its recorded results asserted."""

from pathlib import Path

import pytest

from helpers.course import run_chapter
from helpers.multinode import netns_unavailable

pytestmark = pytest.mark.notebooks
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def execute(stem: str, tmp_path: Path) -> dict:
    run = run_chapter(NOTEBOOKS / f"{stem}.ipynb", "ci", tmp_path)
    assert run.ok, f"{stem} failed: {run.error} (executed notebook: {run.notebook})"
    assert Path(run.html).exists()
    return run.results


def test_00_environment_setup(standin, tmp_path):
    r = execute("00_environment_setup", tmp_path)
    assert r["world_size"] == 8 and r["ranks_finished"] == 8
    assert r["weights_identical"] is True
    assert r["job_wall_s"] > 0
    assert r["rank_num_is_invalid"] is True
    if netns_unavailable() is None:
        assert r["multinode_world_size"] == 8 and r["multinode_weights_identical"] is True
    else:
        assert r["multinode_skipped"]


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
