"""Where a course run writes: the course home follows the clone whose notebook runs (two clones may share
one virtualenv), an unusable runs folder is refused with the fix named, and the shared caches and data
trees survive two course runs writing them at once."""

import filecmp
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import helpers
from helpers.core import paths
from helpers.core.errors import DataError

REPO = Path(__file__).resolve().parents[2]


def fake_checkout(root: Path, full_helpers: bool = False) -> Path:
    """A second clone: this project's pyproject.toml and a helpers/ package (the real one when asked)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    if full_helpers:
        shutil.copytree(REPO / "helpers", root / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(REPO / "data_prep", root / "data_prep", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        (root / "helpers").mkdir()
        shutil.copy(REPO / "helpers" / "__init__.py", root / "helpers" / "__init__.py")
    (root / "notebooks").mkdir()
    return root


def test_checkout_is_found_from_any_folder_inside_it_and_only_for_this_project(tmp_path):
    clone = fake_checkout(tmp_path / "clone_b")
    assert paths.checkout_of(clone / "notebooks") == clone.resolve()
    assert paths.checkout_of(REPO / "tests" / "unit") == REPO
    assert paths.checkout_of(tmp_path) is None
    other = tmp_path / "other_project"
    (other / "helpers").mkdir(parents=True)
    (other / "helpers" / "__init__.py").write_text("")
    (other / "pyproject.toml").write_text('[project]\nname = "someone-else"\n')
    assert paths.checkout_of(other) is None
    (tmp_path / "clone_c").mkdir()
    (tmp_path / "clone_c" / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    assert paths.checkout_of(tmp_path / "clone_c") is None, "a pyproject.toml without helpers/ is not a clone"
    for folder in (clone / "notebooks", other, tmp_path):      # the package's own copy agrees
        found = helpers._checkout_of(folder)
        assert (Path(found) if found else None) == paths.checkout_of(folder)


def test_course_home_follows_the_working_directorys_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("COURSE_HOME", raising=False)
    clone = fake_checkout(tmp_path / "clone_b")
    monkeypatch.chdir(clone / "notebooks")
    assert paths.course_home() == clone.resolve()
    assert paths.resolve("runs/conv_choice.json") == clone.resolve() / "runs" / "conv_choice.json"
    monkeypatch.chdir(tmp_path)                                 # outside any clone: this package's clone
    assert paths.course_home() == REPO
    monkeypatch.setenv("COURSE_HOME", str(tmp_path / "mine"))   # an explicit home always wins
    monkeypatch.chdir(clone / "notebooks")
    assert paths.course_home() == (tmp_path / "mine").resolve()


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_HOME", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_second_clones_notebook_imports_that_clones_helpers(tmp_path):
    """The virtualenv was installed from this repository (``pip install -e .``); a notebook of another clone
    (working directory <clone>/notebooks) must run that clone's helpers and write to its runs/."""
    clone = fake_checkout(tmp_path / "clone_b", full_helpers=True).resolve()
    code = ("import helpers, helpers.core.paths, data_prep.digits; print(helpers.__path__[0]); "
            "print(helpers.core.paths.__file__); print(data_prep.digits.__file__); print(helpers.core.paths.course_home()); "
            "print(helpers.core.paths.code_root())")
    res = run_python(code, clone / "notebooks")
    assert res.returncode == 0, res.stderr
    pkg, paths_file, digits_file, home, root = res.stdout.split("\n")[:5]
    assert pkg == str(clone / "helpers")
    assert paths_file == str(clone / "helpers" / "core" / "paths.py"), "a submodule still came from the installed clone"
    assert digits_file == str(clone / "data_prep" / "digits.py")
    assert home == str(clone) and root == str(clone)
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("helpers:")]
    assert len(notes) == 1, res.stderr
    assert f"using {clone / 'helpers'}" in notes[0] and f"not {REPO / 'helpers'}" in notes[0]
    assert "installed" in notes[0]


def test_no_redirect_and_no_message_outside_another_clone(tmp_path):
    for cwd in (tmp_path, REPO / "notebooks"):
        res = run_python("import helpers, helpers.core.paths; print(helpers.__path__[0]); "
                         "print(helpers.core.paths.code_root())", cwd)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split("\n")[:2] == [str(REPO / "helpers"), str(REPO)]
        assert "helpers:" not in res.stderr


def test_unwritable_runs_folder_is_refused_with_the_fix(tmp_path, monkeypatch):
    def denied(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", denied)                 # works as root too
    with pytest.raises(DataError, match="COURSE_HOME") as err:
        paths.new_run_dir("00", "job", tmp_path / "runs")
    assert str(tmp_path / "runs" / "00") in str(err.value) and "Permission denied" in str(err.value)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_runs_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(DataError, match="writable"):
            paths.new_run_dir("00", "job", locked / "runs")
    finally:
        locked.chmod(0o700)


def test_a_nearly_full_disk_is_refused_saying_how_much_is_free(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(paths.shutil, "disk_usage", lambda p: usage._replace(free=50 * 2**20))
    with pytest.raises(DataError, match=r"only 50 MB free.*200 MB"):
        paths.new_run_dir("00", "job", tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
    monkeypatch.setattr(paths.shutil, "disk_usage", lambda p: usage._replace(free=paths.MIN_FREE_BYTES))
    assert paths.new_run_dir("00", "job", tmp_path / "runs").is_dir()


def _write_digits(out):
    from data_prep.digits import write_digits

    return write_digits(out)


def tree_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_two_runs_writing_the_digits_stand_in_at_once_get_one_complete_tree(tmp_path):
    target = tmp_path / "shared" / "digits"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        infos = pool.map(_write_digits, [target, target])
    assert infos[0] == infos[1]
    single = tmp_path / "single" / "digits"
    assert _write_digits(single) == infos[0]
    assert tree_files(target) == tree_files(single)
    match, mismatch, errors = filecmp.cmpfiles(target, single, tree_files(single), shallow=False)
    assert not mismatch and not errors
    assert sorted(p.name for p in target.parent.iterdir() if not p.name.startswith(".")) == ["digits"], \
        "a temporary copy was left next to the tree"


def test_a_half_written_stand_in_is_rebuilt(tmp_path):
    from data_prep.digits import MARKER, write_digits

    target = tmp_path / "digits"
    write_digits(target)
    (target / MARKER).unlink()                                  # the marker is written last: no marker,
    shutil.rmtree(target / "val")                               # an incomplete tree
    (tmp_path / f"digits.partial-{2**22 + 7}-x").mkdir()        # and a dead writer's leftover
    write_digits(target)
    assert (target / MARKER).exists() and (target / "val").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["digits"]


def test_the_rehearsal_tree_is_published_with_val_already_sorted(tmp_path, monkeypatch):
    from helpers.train.data import ensure_fake_imagenet

    monkeypatch.setenv("COURSE_HOME", str(tmp_path))
    root = ensure_fake_imagenet("data/fake")
    assert root == tmp_path / "data" / "fake"
    assert not [p for p in (root / "val").iterdir() if p.is_file()], "val/ is still flat"
    assert len(list((root / "val").rglob("*.JPEG"))) == 8
    assert ensure_fake_imagenet("data/fake") == root            # complete: left alone


def test_the_notebooks_are_the_code_checkouts_whatever_course_home_says(tmp_path, monkeypatch):
    """COURSE_HOME moves runs, data and results (the disk-space error's advice); the code stays where it is."""
    monkeypatch.setenv("COURSE_HOME", str(tmp_path / "course-runs"))
    assert paths.course_home() == (tmp_path / "course-runs").resolve()
    assert paths.notebooks_dir() == REPO / "notebooks"
    assert paths.code_root() == REPO
