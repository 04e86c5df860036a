"""Writes the offline stand-in: scikit-learn's bundled handwritten digits as JPEGs in ImageNet layout.

1,797 real 8x8 scans of 10 digits ship inside scikit-learn, so the course needs no download. They are
upscaled to 32 px RGB, split into ``train/`` and ``val/`` (20 % of each class held out), and the train
split is given deliberately unequal class counts (class k keeps ``1 - 0.06 k`` of its images), the way
ImageNet's classes range from 732 to 1,300 images. Readers list the files class by class, which is what
makes a naive split across ranks dangerous (chapter 01).

    python -m data_prep.digits [--out data/digits] [--size 32] [--force]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

KEEP_SLOPE = 0.06
VAL_FRACTION = 0.2
MARKER = "stand_in.json"


def class_name(label: int) -> str:
    return f"digit_{label}"


def write_digits(out: str | Path, size: int = 32, seed: int = 0, force: bool = False) -> dict:
    """Write the stand-in under ``out`` (skipped if a complete copy with the same settings is there)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    out = Path(out)
    settings = {"size": size, "seed": seed, "keep_slope": KEEP_SLOPE, "val_fraction": VAL_FRACTION}
    marker = out / MARKER
    if marker.exists() and not force:
        info = json.loads(marker.read_text())
        if info.get("settings") == settings:
            return info
    if out.exists():
        shutil.rmtree(out)
    digits = load_digits()
    rng = np.random.default_rng(seed)
    counts = {"train": {}, "val": {}}
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    for label in range(10):
        idx = rng.permutation(np.flatnonzero(digits.target == label))
        n_val = int(round(len(idx) * VAL_FRACTION))
        val, train = idx[:n_val], idx[n_val:]
        train = train[: int(round(len(train) * (1.0 - KEEP_SLOPE * label)))]
        for split, chosen in (("train", train), ("val", val)):
            folder = tmp / split / class_name(label)
            folder.mkdir(parents=True, exist_ok=True)
            for i in chosen:
                pixels = (digits.images[i] * (255.0 / 16.0)).astype(np.uint8)
                img = Image.fromarray(pixels, mode="L").resize((size, size), Image.BILINEAR).convert("RGB")
                img.save(folder / f"{i:04d}.JPEG", quality=95)
            counts[split][class_name(label)] = int(len(chosen))
    info = {"settings": settings, "counts": counts, "source": "sklearn.datasets.load_digits"}
    (tmp / MARKER).write_text(json.dumps(info, indent=2))
    tmp.rename(out)  # complete or absent: an interrupted run leaves only the .partial folder
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/digits")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    info = write_digits(args.out, args.size, force=args.force)
    print(json.dumps({"out": str(args.out), **info["counts"]}, indent=1))


if __name__ == "__main__":
    main()
