"""Corrupt or truncated images are named before launch by their bytes (helpers.train.image_checks): each messy
case, the per-folder cache (reused, rebuilt when corrupt), moving files aside, and prepare_data / the
pre-flight reporting them with the fix."""

import io
import json
import os
import time

import numpy as np
import pytest
from PIL import Image

import helpers.train.image_checks as ic
from helpers.core.config import JobConfig
from helpers.train.data import prepare_data
from helpers.train.image_folder import scan_split
from helpers.train.folder_checks import check_imagenet_layout
from helpers.core.errors import DataError


def encode(fmt: str, seed: int = 0, size: int = 24) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return buf.getvalue()


def age(*folders, seconds: float = 60.0):
    """Make folders look changed a while ago (a just-changed folder is checked but not cached)."""
    then = time.time() - seconds
    for f in folders:
        os.utime(f, (then, then))


def write(folder, files: dict):
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


JPEG, PNG, BMP = encode("JPEG"), encode("PNG"), encode("BMP")
TRUNCATED_JPEG = JPEG[: len(JPEG) // 2]
assert b"\xff\xd9" not in TRUNCATED_JPEG[-32:]

# name -> (bytes, expected reason fragment or None for a file that must pass)
CASES = {
    "good.JPEG": (JPEG, None),
    "padded.JPEG": (JPEG + b"\x00" * 12, None),                  # a little trailing padding is allowed
    "png_named.JPEG": (PNG, None),                              # ImageNet has one; the decoder reads it
    "good.png": (PNG, None),
    "good.bmp": (BMP, None),
    "bmp_named.JPEG": (BMP, None),
    "truncated.JPEG": (TRUNCATED_JPEG, "truncated JPEG"),
    "zero.JPEG": (b"", "empty file"),
    "no_iend.png": (PNG[:-12], "truncated PNG"),
    "truncated_png_named.JPEG": (PNG[: len(PNG) // 2], "truncated PNG"),
    "short.bmp": (BMP[:-100], "truncated BMP"),
    "html.JPEG": (b"<html><body>404 Not Found</body></html>", "not a JPEG, PNG or BMP"),
    "tiny.jpg": (b"\xff", "not a JPEG, PNG or BMP"),
    "header_only.JPEG": (JPEG[:2], "truncated JPEG"),
}


@pytest.fixture()
def split(tmp_path):
    write(tmp_path / "data" / "train" / "a", {n: b for n, (b, _) in CASES.items()})
    return tmp_path / "data" / "train"


def test_every_messy_case_is_judged_by_its_bytes(split):
    found = {b.path.name: b.reason for b in ic.find_bad_images(split)}
    expected = {n: why for n, (_, why) in CASES.items() if why}
    assert set(found) == set(expected)
    for name, why in expected.items():
        assert why in found[name], (name, found[name])


def test_good_files_really_decode(split):
    """What passes is what the reader decodes (the PNG named .JPEG included)."""
    import mindspore.dataset.vision as vision

    for name, (data, why) in CASES.items():
        if why is None:
            assert vision.Decode()(np.frombuffer(data, np.uint8)).shape == (24, 24, 3), name


def test_stray_files_and_one_truncated_image_one_pass_names_only_the_image(tmp_path):
    train = tmp_path / "d" / "train"
    write(train / "cat", {"1.JPEG": JPEG, "2.JPEG": TRUNCATED_JPEG, ".DS_Store": b"\x00\x00\x00\x01Bud1",
                          "notes.txt": b"not an image", "Thumbs.db": b"\xd0\xcf\x11\xe0"})
    write(train / "dog", {"3.JPEG": JPEG})
    assert [(b.path.relative_to(train).as_posix(), b.reason[:14]) for b in ic.find_bad_images(train)] == \
        [("cat/2.JPEG", "truncated JPEG")]
    failing = {f["check"]: f for f in check_imagenet_layout(tmp_path / "d", splits=("train",)) if not f["ok"]}
    assert list(failing) == ["train/ corrupt images"]
    assert failing["train/ corrupt images"]["value"].startswith("1: cat/2.JPEG (truncated JPEG")
    assert "bad_images='set_aside'" in failing["train/ corrupt images"]["fix"]
    with pytest.raises(DataError) as info:
        prepare_data(JobConfig(data_dir=str(tmp_path / "d"), world_size=1, global_batch=1))
    assert "2.JPEG" in str(info.value) and "1 corrupt or truncated image:" in str(info.value)
    assert not any(s in str(info.value) for s in (".DS_Store", "notes.txt", "Thumbs.db", "1.JPEG", "3.JPEG"))


def test_the_cache_is_reused_per_folder_and_redone_when_a_folder_changes(split, monkeypatch):
    age(split / "a")
    first = ic.find_bad_images(split)
    cache = ic.cache_path(split)
    assert cache == split.parent / ".image_checks.train.json" and json.loads(cache.read_text())["folders"]["a"]

    def no_reads(*a, **k):
        raise AssertionError("a cached folder was read again")

    monkeypatch.setattr(ic, "check_file", no_reads)
    assert ic.find_bad_images(split) == first
    monkeypatch.undo()
    (split / "a" / "new_bad.JPEG").write_bytes(b"")              # the folder changes: its mtime and count
    again = ic.find_bad_images(split)
    assert len(again) == len(first) + 1 and "new_bad.JPEG" in {b.path.name for b in again}
    assert "a" not in json.loads(cache.read_text())["folders"], "a folder changed just now is not cached"


@pytest.mark.parametrize("garbage", [b"{not json", b"", b"[1, 2]", b'{"version": 1, "folders": {"a": 7}}',
                                     b'{"version": 0, "folders": {}}'])
def test_a_corrupt_cache_is_rebuilt(split, garbage):
    age(split / "a")
    expected = ic.find_bad_images(split, cache=False)
    cache = ic.cache_path(split)
    cache.write_bytes(garbage)
    assert ic.find_bad_images(split) == expected
    assert json.loads(cache.read_text())["version"] == ic.CHECK_VERSION
    assert not list(cache.parent.glob("*.tmp")), "the temp file of the atomic write is gone"


def test_cache_under_runs_when_the_data_is_read_only(split, tmp_path, monkeypatch):
    monkeypatch.setattr(ic.os, "access", lambda path, mode: False)
    monkeypatch.setattr(ic, "CACHE_DIR", str(tmp_path / "cache"))
    age(split / "a")
    ic.find_bad_images(split)
    (written,) = (tmp_path / "cache").glob("train-*.json")
    assert written == ic.cache_path(split) and not (split.parent / ".image_checks.train.json").exists()


def test_thread_pool_path_gives_the_same_answer(split, monkeypatch):
    expected = ic.find_bad_images(split, cache=False)
    write(split / "b", {f"{i}.JPEG": JPEG if i % 3 else TRUNCATED_JPEG for i in range(12)})
    monkeypatch.setattr(ic, "CHUNK", 2)
    monkeypatch.setattr(ic, "PROBE", 1)
    monkeypatch.setattr(ic, "SLOW_S", 0.0)                         # as if the disk were slow
    got = ic.find_bad_images(split, cache=False, threads=4)
    assert got[: len(expected)] == expected
    assert [b.path.name for b in got[len(expected):]] == sorted(f"{i}.JPEG" for i in range(0, 12, 3))


def test_set_aside_moves_files_keeps_their_bytes_and_the_reader_no_longer_sees_them(tmp_path):
    data = tmp_path / "d"
    write(data / "train" / "cat", {"1.JPEG": JPEG, "2.JPEG": TRUNCATED_JPEG, "3.JPEG": b""})
    write(data / "train" / "dog", {"4.JPEG": JPEG, "5.png": PNG[:-12]})
    bad = ic.find_bad_images(data / "train")
    before = {b.path.name: b.path.read_bytes() for b in bad}
    moved = ic.set_aside(bad, data)
    assert [p.relative_to(data).as_posix() for p in moved] == [
        "_set_aside/train/cat/2.JPEG", "_set_aside/train/cat/3.JPEG", "_set_aside/train/dog/5.png"]
    assert {p.name: p.read_bytes() for p in moved} == before
    assert not any(b.path.exists() for b in bad)
    assert len(scan_split(data, "train").labels) == 2 and ic.find_bad_images(data / "train") == []
    (data / "train" / "cat" / "2.JPEG").write_bytes(b"")           # the same name goes bad again
    (again,) = ic.set_aside(ic.find_bad_images(data / "train"), data)
    assert again.name == "2.JPEG.1" and (data / "_set_aside/train/cat/2.JPEG").read_bytes() == before["2.JPEG"]


class BadImagesMode:
    """A config with ``bad_images`` set, whether or not JobConfig has the field yet."""

    def __init__(self, cfg, mode):
        self._cfg, self.bad_images = cfg, mode

    def __getattr__(self, name):
        return getattr(self._cfg, name)


def tree(tmp_path, bad_val: bool = False):
    data = tmp_path / "d"
    for split in ("train", "val"):
        for c in ("cat", "dog"):
            write(data / split / c, {f"{c}{i}.JPEG": JPEG for i in range(3)})
    (data / "train" / "dog" / "dog1.JPEG").write_bytes(TRUNCATED_JPEG)
    if bad_val:
        (data / "val" / "cat" / "cat2.JPEG").write_bytes(b"")
    return data


def test_prepare_data_stops_naming_the_files_the_count_and_the_fix(tmp_path):
    data = tree(tmp_path, bad_val=True)
    cfg = JobConfig(data_dir=str(data), world_size=1, global_batch=2)
    with pytest.raises(DataError) as info:
        prepare_data(cfg)
    text = str(info.value)
    assert "1 corrupt or truncated image:" in text and "dog1.JPEG: truncated JPEG" in text
    assert "cat2.JPEG" not in text, "val/ is checked only when evaluate=True"
    assert f"bad_images='set_aside' to move them to {data / '_set_aside'}" in text
    with pytest.raises(DataError, match=r"2 corrupt or truncated images:(.|\n)*cat2.JPEG: empty file"):
        prepare_data(JobConfig(data_dir=str(data), world_size=1, global_batch=2, evaluate=True))


def test_prepare_data_names_at_most_ten(tmp_path):
    data = tmp_path / "d"
    write(data / "train" / "cat", {f"{i:02d}.JPEG": b"" for i in range(25)} | {"ok.JPEG": JPEG})
    with pytest.raises(DataError) as info:
        prepare_data(JobConfig(data_dir=str(data), world_size=1, global_batch=1))
    text = str(info.value)
    assert "25 corrupt or truncated images:" in text and "09.JPEG" in text and "10.JPEG" not in text
    assert "... and 15 more" in text


def test_prepare_data_sets_aside_and_rescans(tmp_path, capsys):
    data = tree(tmp_path, bad_val=True)
    cfg = BadImagesMode(JobConfig(data_dir=str(data), world_size=1, global_batch=2, evaluate=True), "set_aside")
    index = prepare_data(cfg)
    assert len(index.labels) == 5
    out = capsys.readouterr().out
    assert "set aside 2 corrupt or truncated images" in out and str(data / "_set_aside") in out
    assert (data / "_set_aside/train/dog/dog1.JPEG").read_bytes() == TRUNCATED_JPEG
    assert (data / "_set_aside/val/cat/cat2.JPEG").exists()
    assert prepare_data(cfg).labels.tolist() == index.labels.tolist() and capsys.readouterr().out == ""
    with pytest.raises(Exception, match="bad_images"):
        prepare_data(BadImagesMode(JobConfig(data_dir=str(data), world_size=1, global_batch=2), "ignore"))


def test_evaluate_needs_a_sorted_val_with_train_classes(tmp_path):
    data = tree(tmp_path)
    (data / "train" / "dog" / "dog1.JPEG").write_bytes(JPEG)
    cfg = JobConfig(data_dir=str(data), world_size=1, global_batch=2, evaluate=True)
    prepare_data(cfg)
    write(data / "val" / "zebra", {"z.JPEG": JPEG})
    with pytest.raises(DataError, match=r"different classes: 0 only in train, 1 only in val \(e.g. zebra\)"):
        prepare_data(cfg)
    for f in list((data / "val").rglob("*.JPEG")):
        f.rename(data / "val" / f.name)                          # a flat val/, as ImageNet ships it
    for d in (data / "val").iterdir():
        if d.is_dir():
            d.rmdir()
    with pytest.raises(DataError, match=r"flat(.|\n)*data_prep.imagenet_val"):
        prepare_data(cfg)
    for f in (data / "val").iterdir():
        f.unlink()
    (data / "val").rmdir()
    with pytest.raises(DataError, match=r"evaluate=True reads val/(.|\n)*missing"):
        prepare_data(cfg)
    prepare_data(JobConfig(data_dir=str(data), world_size=1, global_batch=2))    # without evaluate: fine
