"""Writes a small generated tree in real ImageNet's layout and quirks, for rehearsing the gpu8 path on CPU.

``train/<wnid>/<wnid>_<i>.JPEG`` at 224 px (a class-coloured gradient plus noise, so classes are learnable),
including the files real ImageNet has that trip readers: a CMYK JPEG, a grayscale JPEG and a PNG saved
under a ``.JPEG`` name (``mindspore.dataset.vision.Decode`` reads each as 3-channel RGB: tested in
tests/unit/test_imagenet_prep.py). ``val/`` is flat (``ILSVRC2012_val_<8 digits>.JPEG``) with its labels in
``LOC_val_solution.csv`` and the class names in ``LOC_synset_mapping.txt``, as the Kaggle download ships them.

    python -m data_prep.fake_imagenet [--out data/fake_imagenet] [--classes 4] [--per-class 6] [--size 224]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from data_prep.digits import build_tree

WNIDS = ("n01440764", "n01443537", "n01484850", "n01491361", "n01494475", "n01496331", "n01498041",
         "n01514668")
NAMES = ("tench", "goldfish", "great white shark", "tiger shark", "hammerhead", "electric ray", "stingray",
         "cock")
MARKER = "fake_imagenet.json"


def _image(rng, label: int, size: int) -> np.ndarray:
    hue = np.array([(label * 83) % 256, (label * 151 + 60) % 256, (label * 37 + 120) % 256], np.float32)
    ramp = np.linspace(0.3, 1.0, size, dtype=np.float32)[:, None, None]
    pixels = hue * ramp + rng.normal(0, 20, (size, size, 3))
    return np.clip(np.broadcast_to(pixels, (size, size, 3)), 0, 255).astype(np.uint8)


def write_fake_imagenet(out: str | Path, classes: int = 4, per_class: int = 6, val_per_class: int = 2,
                        size: int = 224, seed: int = 0, force: bool = False, sort_val: bool = False) -> dict:
    """Write the tree under ``out`` (skipped when a complete copy with the same settings is there).

    Built in a temporary sibling and renamed into place (``data_prep.digits.build_tree``), so two course runs
    starting at once never see half a tree. ``sort_val`` sorts the flat ``val/`` into class folders
    (``data_prep.imagenet_val``) before the tree is published."""
    from PIL import Image

    if not 1 <= classes <= len(WNIDS):
        raise ValueError(f"classes must be 1..{len(WNIDS)}, got {classes}")
    settings = dict(classes=classes, per_class=per_class, val_per_class=val_per_class, size=size, seed=seed)
    if sort_val:
        settings["val_sorted"] = True

    def build(tmp: Path) -> dict:
        rng = np.random.default_rng(seed)
        quirks = {}
        for label, wnid in enumerate(WNIDS[:classes]):
            folder = tmp / "train" / wnid
            folder.mkdir(parents=True)
            for i in range(per_class):
                path = folder / f"{wnid}_{i}.JPEG"
                img = Image.fromarray(_image(rng, label, size))
                if label == 0 and i == 0:
                    img.convert("CMYK").save(path, format="JPEG")
                    quirks["cmyk_jpeg"] = str(path.relative_to(tmp))
                elif label == 0 and i == 1:
                    img.convert("L").save(path, format="JPEG")
                    quirks["grayscale_jpeg"] = str(path.relative_to(tmp))
                elif label == 0 and i == 2:
                    img.save(path, format="PNG")
                    quirks["png_named_jpeg"] = str(path.relative_to(tmp))
                else:
                    img.save(path, format="JPEG", quality=90)
        (tmp / "val").mkdir()
        rows, n = [], 0
        for label, wnid in enumerate(WNIDS[:classes]):
            for _ in range(val_per_class):
                n += 1
                image_id = f"ILSVRC2012_val_{n:08d}"
                Image.fromarray(_image(rng, label, size)).save(tmp / "val" / f"{image_id}.JPEG", format="JPEG")
                rows.append(f"{image_id},{wnid} 0 0 {size - 1} {size - 1}")
        (tmp / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n" + "\n".join(rows) + "\n")
        (tmp / "LOC_synset_mapping.txt").write_text(
            "".join(f"{w} {name}\n" for w, name in zip(WNIDS[:classes], NAMES)))
        if sort_val:                             # sorted before publishing: nobody sees val/ half-sorted
            from data_prep.imagenet_val import sort_val as sort_flat_val

            sort_flat_val(tmp, tmp / "LOC_val_solution.csv")
        return dict(settings=settings, quirks=quirks, train_images=classes * per_class, val_images=n)

    return build_tree(out, MARKER, settings, build, force)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/fake_imagenet")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=6)
    ap.add_argument("--val-per-class", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    info = write_fake_imagenet(a.out, a.classes, a.per_class, a.val_per_class, a.size, force=a.force)
    print(f"{a.out}: {info['train_images']} train images in {a.classes} classes, {info['val_images']} flat val "
          f"images + LOC_val_solution.csv; quirks: {', '.join(info['quirks'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
