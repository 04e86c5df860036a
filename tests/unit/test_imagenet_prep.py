"""The generated ImageNet-layout tree, the flat-val fix, the layout check, and one file filter for both
the course's folder scan and ImageFolderDataset."""

import shutil

import numpy as np
import pytest

from data_prep.fake_imagenet import write_fake_imagenet
from data_prep.imagenet_val import main as val_main
from data_prep.imagenet_val import sort_val
from helpers.train.image_folder import IMAGE_EXTENSIONS, scan_split
from helpers.train.folder_checks import check_imagenet_layout
from helpers.core.errors import DataError


@pytest.fixture()
def tree(tmp_path):
    write_fake_imagenet(tmp_path / "inet", classes=3, per_class=4, val_per_class=2, size=32)
    return tmp_path / "inet"


def failing(findings):
    return {f["check"]: f for f in findings if not f["ok"]}


def test_fake_tree_has_imagenet_quirks_and_a_flat_labelled_val(tree):
    from PIL import Image

    train = tree / "train"
    modes = sorted(Image.open(p).mode for p in (train / "n01440764").iterdir())
    assert "CMYK" in modes and "L" in modes
    assert any(Image.open(p).format == "PNG" for p in (train / "n01440764").iterdir())
    flat = sorted(p.stem for p in (tree / "val").iterdir())
    labelled = [line.split(",")[0] for line in (tree / "LOC_val_solution.csv").read_text().splitlines()[1:]]
    assert flat == sorted(labelled) and len(flat) == 6


def test_every_quirk_decodes_to_rgb_in_mindspore(tree):
    import mindspore.dataset as ds
    import mindspore.dataset.vision as vision

    data = ds.ImageFolderDataset(str(tree / "train"), shuffle=False, extensions=list(IMAGE_EXTENSIONS))
    data = data.map(vision.Decode(), input_columns="image")
    shapes = [im.shape for im, _ in data.create_tuple_iterator(output_numpy=True, num_epochs=1)]
    assert len(shapes) == 12 and all(s == (32, 32, 3) for s in shapes)


def test_flat_val_is_flagged_with_the_command_then_sorted_idempotently(tree):
    bad = failing(check_imagenet_layout(tree))
    assert "flat" in bad["val/ layout"]["value"]
    assert bad["val/ layout"]["fix"] == f"python -m data_prep.imagenet_val {tree} --labels {tree / 'LOC_val_solution.csv'}"
    first = sort_val(tree, tree / "LOC_val_solution.csv")
    assert (first.moved, first.in_place, first.unlabelled) == (6, 0, ())
    again = sort_val(tree, tree / "LOC_val_solution.csv")
    assert (again.moved, again.in_place) == (0, 6)
    assert failing(check_imagenet_layout(tree)) == {}
    assert len(scan_split(tree, "val").labels) == 6


def test_unlabelled_file_stays_and_unknown_class_moves_nothing(tree, capsys):
    (tree / "val" / "extra_photo.JPEG").write_bytes(b"x")
    report = sort_val(tree, tree / "LOC_val_solution.csv")
    assert report.unlabelled == ("extra_photo.JPEG",) and (tree / "val" / "extra_photo.JPEG").exists()
    fresh = tree.parent / "fresh"
    write_fake_imagenet(fresh, classes=3, per_class=4, val_per_class=2, size=32)
    shutil.rmtree(fresh / "train" / "n01484850")               # a class the labels name, gone from train/
    before = sorted(p.name for p in (fresh / "val").iterdir())
    with pytest.raises(DataError, match="nothing was moved"):
        sort_val(fresh, fresh / "LOC_val_solution.csv")
    assert sorted(p.name for p in (fresh / "val").iterdir()) == before
    (fresh / "bad.csv").write_text("ImageId,PredictionString\nILSVRC2012_val_00000001,\n")
    assert val_main([str(fresh), "--labels", str(fresh / "bad.csv")]) == 2
    assert "line 2" in capsys.readouterr().err


def test_layout_check_names_empty_classes_too_few_images_and_class_mismatch(tree):
    sort_val(tree, tree / "LOC_val_solution.csv")
    (tree / "train" / "n09999999").mkdir()
    (tree / "train" / "n01440764" / ".DS_Store").write_bytes(b"x")
    bad = failing(check_imagenet_layout(tree, world_size=8))
    assert "n09999999" in bad["train/ empty classes"]["value"]
    assert "have < 8 images" in bad["train/ classes with fewer images than ranks"]["value"]
    assert "only in train" in bad["train/ and val/ classes"]["value"]
    ok = {f["check"]: f for f in check_imagenet_layout(tree, world_size=8)}
    assert ok["train/ non-image files"]["ok"] and ok["train/ non-image files"]["value"].startswith("1 ignored")
    assert failing(check_imagenet_layout(tree.parent / "nowhere"))["data_dir"]["fix"]


def test_scan_and_dataset_agree_sample_by_sample_with_stray_files(tmp_path):
    """The sampler indexes scan_split's labels; sample i must be the dataset's sample i."""
    import mindspore.dataset as ds

    rng = np.random.default_rng(0)
    sizes = iter(rng.permutation(np.arange(100, 400)))
    expect = []
    for label, cls in enumerate(("a", "b", "c")):
        folder = tmp_path / "train" / cls
        folder.mkdir(parents=True)
        for name in ("z.JPEG", "a.jpg", "m.JPG", "k.png", "Thumbs.db", ".DS_Store", "notes.txt", "odd.Jpeg"):
            size = int(next(sizes))
            (folder / name).write_bytes(bytes(size))
            if any(name.endswith(e) for e in IMAGE_EXTENSIONS):
                expect.append((label, name, size))
    expect.sort(key=lambda t: (t[0], t[1]))
    index = scan_split(tmp_path, "train")
    data = ds.ImageFolderDataset(str(tmp_path / "train"), shuffle=False, decode=False,
                                 extensions=list(IMAGE_EXTENSIONS))
    got = [(int(y), len(im)) for im, y in data.create_tuple_iterator(output_numpy=True, num_epochs=1)]
    assert index.labels.tolist() == [t[0] for t in expect] == [g[0] for g in got]
    assert [g[1] for g in got] == [t[2] for t in expect]          # the same files, in the same order


def test_build_dataset_reads_with_the_scan_filter(monkeypatch, tmp_path):
    import mindspore.dataset as ds

    from helpers.core.config import JobConfig
    from helpers.train.data import build_dataset

    seen = {}

    class Stop(Exception):
        pass

    def fake(path, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(ds, "ImageFolderDataset", fake)
    with pytest.raises(Stop):
        build_dataset(JobConfig(data_dir=str(tmp_path), world_size=1, global_batch=2), "val", 0, 1)
    assert seen["extensions"] == list(IMAGE_EXTENSIONS)
