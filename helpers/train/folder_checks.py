"""One fast pass over an ImageNet-layout folder before launch: what a job would trip on, with the fix.

``os.scandir`` and each image's first and last bytes (``helpers.train.image_checks``, no decoding, cached per
class folder): seconds for 1.28 M files. Each finding is a dict ``{"check", "ok", "value", "fix"}``;
``helpers.preflight.preflight`` shows them as checks.
"""

from __future__ import annotations

import os
from pathlib import Path

from helpers.train.image_folder import IMAGE_EXTENSIONS, is_image_file
from helpers.core.paths import resolve

APPLEDOUBLE = "macOS '._' files"       # the finding's name (prepare_data leaves these to the image check)


def _finding(check: str, ok: bool, value: str, fix: str = "") -> dict:
    return {"check": check, "ok": ok, "value": value, "fix": fix}


def _count_split(split_dir: Path) -> tuple[dict[str, int], int, int, list[str]]:
    """(images per class folder, files directly in the split, ignored files, AppleDouble '._' files)."""
    counts, loose, ignored, apple = {}, 0, 0, []
    with os.scandir(split_dir) as top:
        for entry in top:
            if entry.is_dir():
                n = 0
                with os.scandir(entry.path) as files:
                    for f in files:
                        if not f.is_file():
                            continue
                        if f.name.startswith("._") and is_image_file(f.name):
                            apple.append(os.path.join(entry.name, f.name))
                        if is_image_file(f.name):
                            n += 1
                        else:
                            ignored += 1
                counts[entry.name] = n
            elif entry.is_file():
                loose += 1 if is_image_file(entry.name) else 0
                ignored += 0 if is_image_file(entry.name) else 1
    return counts, loose, ignored, apple


def _labels_csv(root: Path) -> Path | None:
    for place in (root, root.parent):
        hit = place / "LOC_val_solution.csv"
        if hit.is_file():
            return hit
    return None


def class_difference(train, val) -> str:
    """'' when the class lists are equal, else how they differ, naming a few classes on each side."""
    a, b = set(train), set(val)
    if a == b:
        return ""
    only_a, only_b = sorted(a - b), sorted(b - a)
    return ", ".join(f"{len(only)} only in {side}" + (f" (e.g. {', '.join(only[:3])})" if only else "")
                     for side, only in (("train", only_a), ("val", only_b)))


def _image_findings(split_dir: Path, split: str, root: Path) -> list[dict]:
    """A FAIL naming the corrupt or truncated images of one split (``helpers.train.image_checks``), else a PASS."""
    from helpers.train.image_checks import find_bad_images, fix_text

    bad = find_bad_images(split_dir)
    if not bad:
        return [_finding(f"{split}/ image bytes", True, "no empty, truncated or non-image files")]
    shown = "; ".join(f"{b.path.relative_to(split_dir)} ({b.reason})" for b in bad[:3])
    return [_finding(f"{split}/ corrupt images", False, f"{len(bad)}: {shown}" + (" ..." if len(bad) > 3 else ""),
                     fix_text(root))]


def check_imagenet_layout(data_dir, splits=("train", "val"), world_size: int = 1, images: bool = True) -> list[dict]:
    """Findings for ``data_dir``: train/ and val/ present with class folders, a flat val/ (and the command
    that sorts it), equal class lists, empty classes, classes with fewer images than ranks, ignored files,
    and (``images``) corrupt or truncated image files."""
    root = resolve(data_dir)
    if not root.is_dir():
        return [_finding("data_dir", False, f"{root} does not exist",
                         "point data_dir at the folder holding train/ and val/ (ImageNet layout)")]
    out, classes = [], {}
    for split in splits:
        d = root / split
        if not d.is_dir():
            out.append(_finding(f"{split}/", False, "missing", f"expected {d}/<wnid>/*.JPEG"))
            continue
        counts, loose, ignored, apple = _count_split(d)
        classes[split] = counts
        if loose and not counts:
            csv = _labels_csv(root)
            fix = (f"python -m data_prep.imagenet_val {root} --labels {csv}" if csv else
                   f"python -m data_prep.imagenet_val {root} --labels <LOC_val_solution.csv>")
            out.append(_finding(f"{split}/ layout", False, f"{loose} images directly in {d} (flat)", fix))
            continue
        total = sum(counts.values())
        out.append(_finding(f"{split}/ layout", bool(counts), f"{len(counts)} class folders, {total} images"
                            + (f", {loose} loose images beside them" if loose else ""),
                            "" if counts else f"expected {d}/<wnid>/*.JPEG"))
        empty = sorted(c for c, n in counts.items() if n == 0)
        if empty:
            out.append(_finding(f"{split}/ empty classes", False, f"{len(empty)}: {', '.join(empty[:5])}",
                                "remove the empty class folders or add their images"))
        few = sorted(c for c, n in counts.items() if 0 < n < world_size)
        if split == "train" and few:
            out.append(_finding("train/ classes with fewer images than ranks", False,
                                f"{len(few)} (e.g. {', '.join(few[:3])}) have < {world_size} images",
                                "the stratified sampler gives every rank each class: add images or use fewer ranks"))
        if apple:
            out.append(_finding(f"{split}/ {APPLEDOUBLE}", False, f"{len(apple)}, e.g. {apple[0]}",
                                f"they end in an image extension but are not images: find {d} -name '._*' -delete"))
        if ignored:
            out.append(_finding(f"{split}/ non-image files", True,
                                f"{ignored} ignored (not {'/'.join(sorted({e.lower() for e in IMAGE_EXTENSIONS}))})"))
        if images and counts:
            out += _image_findings(d, split, root)
    if "train" in classes and "val" in classes and classes["val"]:
        diff = class_difference(classes["train"], classes["val"])
        out.append(_finding("train/ and val/ classes", not diff, diff or "the same",
                            "val/ must hold the same class folders as train/" if diff else ""))
    return out

