"""Writes the offline stand-in: scikit-learn's bundled handwritten digits as JPEGs in ImageNet layout.

1,797 real 8x8 scans of 10 digits ship inside scikit-learn, so the course needs no download. They are
upscaled to 32 px RGB, split into ``train/`` and ``val/`` (20 % of each class held out), and the train
split is given deliberately unequal class counts (class k keeps ``1 - 0.06 k`` of its images), the way
ImageNet's classes range from 732 to 1,300 images. Readers list the files class by class, which is what
makes a naive split across ranks dangerous (chapter 01).

    python -m data_prep.digits [--out data/digits] [--size 32] [--force]

Two course runs may start at once on one machine (two clones, or two users with one data folder), so the
tree is built in a private temporary sibling folder, its marker file written last, and renamed into place
in one step (``build_tree``): a reader sees the whole tree or none, the slower writer discards its copy, and
a folder without the marker (an interrupted older write) is rebuilt.

``--heavy-classes 8 9 --heavy-size 2048`` stores those classes' training images at that size instead (the same
digit, upscaled), as progressive JPEGs without chroma subsampling: reading one then costs a large decode before
the resize to the model's size, the way a class of big or progressive JPEGs costs more to read in real data
(chapter 01's load-imbalance tree).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Callable

import numpy as np

KEEP_SLOPE = 0.06
VAL_FRACTION = 0.2
MARKER = "stand_in.json"
HEAVY_FORMAT = dict(progressive=True, subsampling=0)   # a heavy class's JPEGs: progressive, full colour resolution


def class_name(label: int) -> str:
    return f"digit_{label}"


def complete_info(out: Path, marker: str, settings: dict) -> dict | None:
    """The marker's contents when ``out`` holds a complete tree written with ``settings``, else None."""
    try:
        info = json.loads((Path(out) / marker).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and info.get("settings") == settings else None


def _remove_abandoned_partials(out: Path) -> None:
    """Temporary folders left by writers that were killed (their pid, in the name, is gone), and old trees
    set aside by a writer killed before it removed them."""
    for stale in out.parent.glob(f"{out.name}.stale-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for tmp in out.parent.glob(f"{out.name}.partial*"):
        pid = tmp.name[len(out.name) + len(".partial-"):].split("-", 1)[0]
        try:
            os.kill(int(pid), 0)
            continue                             # its writer is still at work
        except (ValueError, ProcessLookupError):
            pass                                 # the old fixed ".partial" name, or a dead writer
        except PermissionError:
            continue                             # alive, another user's
        shutil.rmtree(tmp, ignore_errors=True)


def build_tree(out: str | Path, marker: str, settings: dict, build: Callable[[Path], dict],
               force: bool = False) -> dict:
    """Make ``out`` a complete tree: ``build(folder)`` writes the files into a temporary sibling and returns
    the info dict (with ``settings``), written last as ``marker``; the folder is then renamed to ``out``.
    Returns the info of the tree now at ``out`` (another run's, when it finished first)."""
    out = Path(out)
    if not force and (info := complete_info(out, marker, settings)) is not None:
        return info
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_partials(out)
    tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.partial-{os.getpid()}-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)                     # mkdtemp makes it private
        info = build(tmp)
        (tmp / marker).write_text(json.dumps(info, indent=2))
        # publish under a lock so two finishing writers cannot swap trees under each other
        with open(out.parent / f".{out.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not force and (done := complete_info(out, marker, settings)) is not None:
                return done                      # another run finished first: keep its tree, drop ours
            stale = out.with_name(f"{out.name}.stale-{uuid.uuid4().hex[:8]}")
            if out.exists() or out.is_symlink():
                os.rename(out, stale)            # incomplete or other settings: set aside, removed below
            os.rename(tmp, out)
        shutil.rmtree(stale, ignore_errors=True)
        return info
    finally:
        shutil.rmtree(tmp, ignore_errors=True)   # gone after a successful rename; our copy otherwise


def load_scans() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits, (1797, 8, 8) scans valued 0-16 and their labels, as ``load_digits()`` gives them: read
    from the CSV the package ships (1-3 s less than importing scikit-learn), else through ``load_digits``."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec and spec.origin else None
    if path is not None and path.is_file():
        table = np.loadtxt(path, delimiter=",")
        return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(int)
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images, digits.target


def save_image(scan: np.ndarray, side: int, heavy: bool, path: Path) -> None:
    """One 8x8 scan (values 0-16) upscaled to ``side`` px RGB and saved as a JPEG (``HEAVY_FORMAT`` if ``heavy``)."""
    from PIL import Image

    pixels = (scan * (255.0 / 16.0)).astype(np.uint8)
    img = Image.fromarray(pixels, mode="L").resize((side, side), Image.BILINEAR).convert("RGB")
    img.save(path, quality=95, **(HEAVY_FORMAT if heavy else {}))


def save_all(images: list[tuple]) -> None:
    """``save_image`` for every ``(scan, side, heavy, path)``, on every core: a 2048 px progressive JPEG costs
    ~70 ms to encode and Pillow holds the GIL while it does, so threads would not help."""
    import multiprocessing

    workers = min(len(os.sched_getaffinity(0)), 8)
    if workers < 2 or len(images) < 64 or multiprocessing.current_process().daemon:   # a pool's worker: no children
        for args in images:
            save_image(*args)
        return
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(save_image, *zip(*images), chunksize=16))


def write_digits(out: str | Path, size: int = 32, seed: int = 0, force: bool = False,
                 heavy_classes: tuple[int, ...] = (), heavy_size: int | None = None) -> dict:
    """Write the stand-in under ``out`` (skipped if a complete copy with the same settings is there); the train
    images of ``heavy_classes`` are stored at ``heavy_size`` px."""
    settings = {"size": size, "seed": seed, "keep_slope": KEEP_SLOPE, "val_fraction": VAL_FRACTION}
    if heavy_classes:
        settings.update(heavy_classes=sorted(int(k) for k in heavy_classes), heavy_size=int(heavy_size or size),
                        heavy_format=HEAVY_FORMAT)

    def build(tmp: Path) -> dict:
        scans, targets = load_scans()
        rng = np.random.default_rng(seed)
        counts, images = {"train": {}, "val": {}}, []
        for label in range(10):
            idx = rng.permutation(np.flatnonzero(targets == label))
            n_val = int(round(len(idx) * VAL_FRACTION))
            val, train = idx[:n_val], idx[n_val:]
            train = train[: int(round(len(train) * (1.0 - KEEP_SLOPE * label)))]
            for split, chosen in (("train", train), ("val", val)):
                folder = tmp / split / class_name(label)
                folder.mkdir(parents=True, exist_ok=True)
                heavy = split == "train" and label in settings.get("heavy_classes", ())
                side = settings["heavy_size"] if heavy else size
                images += [(scans[i], side, heavy, folder / f"{i:04d}.JPEG") for i in chosen]
                counts[split][class_name(label)] = int(len(chosen))
        save_all(images)
        return {"settings": settings, "counts": counts, "source": "sklearn.datasets.load_digits"}

    return build_tree(out, MARKER, settings, build, force)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/digits")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--heavy-classes", type=int, nargs="*", default=[], help="classes stored large (train split)")
    ap.add_argument("--heavy-size", type=int, default=None, help="their side in px")
    args = ap.parse_args(argv)
    info = write_digits(args.out, args.size, force=args.force, heavy_classes=tuple(args.heavy_classes),
                        heavy_size=args.heavy_size)
    print(json.dumps({"out": str(args.out), **info["counts"]}, indent=1))


if __name__ == "__main__":
    main()
