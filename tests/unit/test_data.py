import numpy as np
import pytest

from data_prep.digits import write_digits
from helpers.core.config import job_config
from helpers.train.data import build_dataset, prepare_data
from helpers.train.image_folder import scan_split
from helpers.core.errors import DataError


def test_standin_is_class_sorted_with_unequal_classes(standin):
    idx = scan_split(standin, "train")
    assert len(idx.classes) == 10
    assert np.all(np.diff(idx.labels) >= 0), "the reader lists samples class by class"
    counts = idx.counts
    assert counts.max() > 1.5 * counts.min()
    assert len(scan_split(standin, "val").labels) > 300


def test_missing_and_empty_folders_are_named(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        scan_split(tmp_path / "nowhere")
    (tmp_path / "train").mkdir()
    with pytest.raises(DataError, match="no class folders"):
        scan_split(tmp_path)
    (tmp_path / "train" / "cat").mkdir()
    with pytest.raises(DataError, match="cat.*no images"):
        scan_split(tmp_path)


def test_a_batch_larger_than_a_shard_is_refused(standin):
    cfg = job_config("ci", global_batch=8 * 256)
    with pytest.raises(DataError, match="fewer than one batch"):
        prepare_data(cfg)


def test_writer_is_idempotent_and_complete(tmp_path):
    a = write_digits(tmp_path / "d")
    b = write_digits(tmp_path / "d")
    assert a == b
    assert not (tmp_path / "d.partial").exists()


def test_images_saved_on_every_core_are_the_bytes_saved_one_by_one(tmp_path, monkeypatch):
    import data_prep.digits as digits

    scans = np.random.default_rng(0).integers(0, 17, (70, 8, 8)).astype(np.float64)
    jobs = [(s, 64 if i % 2 else 32, bool(i % 2), tmp_path / f"p{i}.JPEG") for i, s in enumerate(scans)]
    digits.save_all(jobs)                                              # 70 images: a process pool
    for scan, side, heavy, path in jobs[:6]:
        digits.save_image(scan, side, heavy, tmp_path / "one.JPEG")
        assert path.read_bytes() == (tmp_path / "one.JPEG").read_bytes()
    assert all(p.stat().st_size > 0 for *_, p in jobs)


def test_reader_yields_normalised_chw_batches_for_one_shard(standin):
    cfg = job_config("ci")
    data = build_dataset(cfg, "train", rank=3, world_size=8)
    images, labels = next(data.create_tuple_iterator(num_epochs=1, output_numpy=True))
    assert images.shape == (cfg.batch_per_rank, 3, 32, 32) and images.dtype == np.float32
    assert labels.dtype == np.int32 and labels.max() < 10
    assert abs(float(images.mean())) < 3


@pytest.mark.parametrize("sampler", ["contiguous", "distributed", "distributed_shuffle", "stratified"])
def test_every_train_sharding_reads_real_batches(standin, sampler):
    cfg = job_config("ci", sampler=sampler)
    data = build_dataset(cfg, "train", rank=7, world_size=8)
    _, labels = next(data.create_tuple_iterator(num_epochs=1, output_numpy=True))
    assert len(labels) == cfg.batch_per_rank
    if sampler == "contiguous":
        assert len(set(labels.tolist())) == 1 and labels[0] >= 8, "the last block holds the last classes, in order"


def test_standin_passes_every_check_and_stays_fast(standin):
    """prepare_data runs before every job: with the image check (cached per class folder) it stays in
    milliseconds on the stand-in, train and val."""
    import time

    cfg = job_config("ci", evaluate=True)
    prepare_data(cfg)
    t0 = time.perf_counter()
    for _ in range(5):
        index = prepare_data(cfg)
    assert (time.perf_counter() - t0) / 5 < 0.1
    assert len(index.classes) == 10 and not (standin / "_set_aside").exists()


def test_a_complete_standin_is_found_without_importing_scikit_learn(standin):
    """Every job's pre-flight calls ensure_standin; importing scikit-learn there cost 3 s per fresh process."""
    import subprocess
    import sys

    code = ("import sys; from helpers.train.data import ensure_standin; ensure_standin(); "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=standin.parents[1])
    assert out.stdout.strip() == "False", out.stderr


def test_heavy_classes_are_stored_large_in_train_only(tmp_path):
    from PIL import Image

    from data_prep.class_costs import class_costs

    info = write_digits(tmp_path / "h", heavy_classes=(9,), heavy_size=256)
    assert info["settings"]["heavy_classes"] == [9] and info["settings"]["heavy_size"] == 256
    sides = {p.parent.name: Image.open(p).size for p in sorted((tmp_path / "h" / "train").glob("*/*.JPEG"))}
    assert sides["digit_9"] == (256, 256) and sides["digit_0"] == (32, 32)
    assert {Image.open(p).size for p in (tmp_path / "h" / "val" / "digit_9").glob("*.JPEG")} == {(32, 32)}
    report = class_costs(tmp_path / "h", sample=5, size=32, stem="small", repeat=3)
    cost = {c["name"]: c["decode_resize_s"] for c in report["classes"]}
    assert cost["digit_9"] > 3 * max(v for k, v in cost.items() if k != "digit_9"), cost


def test_the_digits_are_read_from_scikit_learns_csv_exactly_as_load_digits_gives_them():
    from sklearn.datasets import load_digits

    from data_prep.digits import load_scans

    scans, targets = load_scans()
    digits = load_digits()
    assert np.array_equal(scans, digits.images) and np.array_equal(targets, digits.target)
