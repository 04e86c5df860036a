"""Messy data through the launcher: a truncated image among real ones is named before launch (no run
directory, within seconds); with bad_images="set_aside" it is moved aside and the job trains to the end."""

import dataclasses
import shutil
import time

import pytest

from helpers.core.config import JobConfig
from helpers.core.errors import DataError
from helpers.job.launch import run_job

pytestmark = pytest.mark.jobs

CLASSES = ("digit_0", "digit_1", "digit_2", "digit_3")


@pytest.fixture()
def messy(standin, tmp_path):
    """Four classes of the digits stand-in (real JPEGs, class-sorted), stray files, and one truncated image."""
    data = tmp_path / "messy"
    for split in ("train", "val"):
        for c in CLASSES:
            shutil.copytree(standin / split / c, data / split / c)
    for name, raw in ((".DS_Store", b"\x00\x00\x00\x01Bud1"), ("notes.txt", b"labels later"), ("Thumbs.db", b"\xd0\xcf")):
        (data / "train" / "digit_1" / name).write_bytes(raw)
    victim = sorted((data / "train" / "digit_2").iterdir())[3]
    original = victim.read_bytes()
    victim.write_bytes(original[: len(original) // 2])
    return data, victim


def small(ci_config, data) -> JobConfig:
    return ci_config.replace(data_dir=str(data), world_size=2, global_batch=16, steps=2)


def test_truncated_image_is_named_before_launch(ci_config, messy, tmp_path):
    data, victim = messy
    runs = tmp_path / "runs"
    t0 = time.monotonic()
    with pytest.raises(DataError) as info:
        run_job(small(ci_config, data), progress="text", run_root=runs)
    elapsed = time.monotonic() - t0
    text = str(info.value)
    assert str(victim) in text and "truncated JPEG" in text and "1 corrupt or truncated image:" in text
    assert "bad_images='set_aside'" in text
    assert not any(s in text for s in (".DS_Store", "notes.txt", "Thumbs.db"))
    assert not runs.exists() or not any(runs.rglob("config.json")), "no run directory before the data is fine"
    assert elapsed < 5, f"the check took {elapsed:.1f} s"


def test_set_aside_trains_to_the_end_without_the_bad_file(ci_config, messy, tmp_path, capsys):
    data, victim = messy
    cut = victim.read_bytes()
    res = run_job(dataclasses.replace(small(ci_config, data), bad_images="set_aside"), progress="text",
                  run_root=tmp_path / "runs")
    assert res.returncode == 0 and res.metric("loss").shape == (2, 2)
    moved = data / "_set_aside" / "train" / "digit_2" / victim.name
    assert moved.read_bytes() == cut and not victim.exists()
    assert "set aside 1 corrupt or truncated image" in capsys.readouterr().out
