"""The class-cost command: measured per-class read cost on a tree with known costs, the per-split prediction
with exact numbers, and the CLI end to end on the generated ImageNet-layout tree."""

import json

import numpy as np
import pytest

from data_prep.class_costs import class_costs, main, predict_splits, report_labels, step_loads
from data_prep.fake_imagenet import write_fake_imagenet
from helpers.core.errors import DataError
from helpers.train.image_folder import scan_split
from helpers.train.sampler import SHARD_KINDS


def write_tree(root, sizes: dict, per_class: int = 4):
    """Class name -> (pixels, format): noise images, so a larger one is a larger file and a longer decode."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, (px, fmt) in sizes.items():
        folder = root / "train" / name
        folder.mkdir(parents=True)
        for i in range(per_class):
            img = Image.fromarray(rng.integers(0, 256, (px, px, 3), dtype=np.uint8))
            img.save(folder / f"{name}_{i}.{'png' if fmt == 'PNG' else 'JPEG'}", format=fmt)
    return root


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Class a_heavy: 320 px PNG; b_light: 40 px JPEG, plus a text file and a broken .JPEG."""
    root = write_tree(tmp_path_factory.mktemp("costs"), {"a_heavy": (320, "PNG"), "b_light": (40, "JPEG")})
    (root / "train" / "b_light" / "notes.txt").write_text("not an image")
    (root / "train" / "b_light" / "broken.JPEG").write_bytes(b"\xff\xd8 truncated")
    return root, class_costs(root, sample=20, size=64, repeat=3)


def test_a_heavier_class_measures_heavier(measured):
    _, report = measured
    heavy, light = report["classes"]
    assert (heavy["name"], light["name"]) == ("a_heavy", "b_light")
    assert heavy["mean_bytes"] > 10 * light["mean_bytes"]
    assert heavy["decode_resize_s"] > 1.5 * light["decode_resize_s"]
    assert heavy["load_share"] > 0.5 > light["load_share"]
    assert sum(c["load_share"] for c in report["classes"]) == pytest.approx(1.0)
    assert report["class_cost_s"] == [heavy["decode_resize_s"], light["decode_resize_s"]]


def test_non_images_and_unreadable_files_are_skipped_and_counted(measured):
    _, report = measured
    heavy, light = report["classes"]
    assert (heavy["sampled"], heavy["non_image_skipped"], heavy["unreadable_skipped"]) == (4, 0, 0)
    assert (light["images"], light["sampled"]) == (5, 4)      # broken.JPEG is listed, then fails to decode
    assert (light["non_image_skipped"], light["unreadable_skipped"]) == (1, 1)


def test_measured_costs_predict_contiguous_slow_and_stratified_even(measured):
    root, report = measured
    labels = scan_split(root, "train").labels
    labels = labels[labels == 0].tolist() + labels[labels == 1].tolist()[:4]   # 4 + 4 readable images
    pred = predict_splits(np.array(labels), report["class_cost_s"], ranks=2, batch=2)
    assert set(pred) == set(SHARD_KINDS)
    assert pred["contiguous"]["step_max_over_mean"] > 1.2 and pred["contiguous"]["slowest_rank"] == 0
    assert pred["stratified"]["step_max_over_mean"] == pytest.approx(1.0, abs=1e-9)


def test_prediction_with_given_costs_is_exact():
    labels = np.repeat([0, 1], 8)                # class-sorted, class 0 costs 3, class 1 costs 1 per image
    pred = predict_splits(labels, [3.0, 1.0], ranks=2, batch=2)
    # contiguous: rank 0 reads 2 x 3 = 6 per step, rank 1 2 x 1 = 2: max 6 over mean 4, every step
    assert pred["contiguous"] == dict(step_max_over_mean=1.5, shard_max_over_mean=1.5, slowest_rank=0,
                                      steps=4)
    # i::n: both ranks read the same class in a step (6, 6 then 2, 2): even per step and per shard
    assert pred["distributed"]["step_max_over_mean"] == 1.0
    assert pred["distributed"]["shard_max_over_mean"] == 1.0
    assert pred["stratified"]["step_max_over_mean"] == 1.0
    assert pred["distributed_shuffle"]["step_max_over_mean"] >= 1.0


def test_even_shards_still_wait_when_their_steps_differ():
    """Equal shard totals, opposite order: each step waits for the heavy rank (6 against a mean of 4)."""
    labels = np.repeat([0, 1], 4)
    shards = {"crossed": [np.array([0, 1, 4, 5]), np.array([6, 7, 2, 3])]}
    pred = predict_splits(labels, [3.0, 1.0], ranks=2, batch=2, shards=shards)["crossed"]
    assert (pred["step_max_over_mean"], pred["shard_max_over_mean"]) == (1.5, 1.0)
    loads = step_loads(shards["crossed"], np.array([3.0, 1.0])[labels], batch=2, steps=1)
    assert loads.tolist() == [[6.0, 2.0]]


def test_too_few_images_for_one_batch_is_a_clear_error():
    with pytest.raises(DataError, match="one batch of 8"):
        predict_splits(np.repeat([0, 1], 4), [1.0, 1.0], ranks=2, batch=8)


def test_missing_tree_and_empty_class_are_clear_errors(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "nowhere does not exist" in capsys.readouterr().err
    write_tree(tmp_path, {"a": (16, "JPEG")}, per_class=1)
    (tmp_path / "train" / "empty").mkdir()
    with pytest.raises(DataError, match="empty has no images"):
        class_costs(tmp_path)


def test_cli_on_the_generated_imagenet_tree(tmp_path, capsys):
    tree = tmp_path / "inet"
    write_fake_imagenet(tree, classes=4, per_class=6, size=64)
    out = tmp_path / "costs.json"
    assert main([str(tree), "--ranks", "2", "--batch", "3", "--size", "64", "--json", str(out)]) == 0
    printed = capsys.readouterr()
    assert "[4/4] n01491361: 6 images read" in printed.err
    assert "contiguous blocks" in printed.out and "stratified" in printed.out
    report = json.loads(out.read_text())
    assert [c["sampled"] for c in report["classes"]] == [6, 6, 6, 6]  # CMYK, grayscale, PNG-as-JPEG decode
    assert set(report["predictions"]) == set(SHARD_KINDS)
    assert report["predictions"]["contiguous"]["steps"] == 4             # 12 images per rank / 3
    assert report_labels(report).tolist() == scan_split(tree, "train").labels.tolist()
    assert all(p["step_max_over_mean"] >= 1.0 for p in report["predictions"].values())
