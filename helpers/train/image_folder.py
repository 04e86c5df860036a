"""List an ImageFolder tree (``<root>/<split>/<class>/<image>``): its classes and one label per file, no decoding."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from helpers.core.errors import DataError
from helpers.core.paths import resolve

# The one file filter: scan_split counts exactly what ImageFolderDataset reads (its ``extensions`` match the
# suffix case-sensitively, dot included), so stray files (.DS_Store, notes.txt, Thumbs.db) are skipped by both.
IMAGE_EXTENSIONS = (".JPEG", ".jpeg", ".JPG", ".jpg", ".PNG", ".png", ".BMP", ".bmp")

@dataclass(frozen=True)
class FolderIndex:
    """What a split holds, read from the file listing only: class names, and one label per sample."""

    root: Path
    classes: tuple[str, ...]
    labels: np.ndarray            # int32, in the reader's (class-sorted) order

    @property
    def counts(self) -> np.ndarray:
        return np.bincount(self.labels, minlength=len(self.classes))


def is_image_file(name: str) -> bool:
    """Whether ImageFolderDataset (given ``IMAGE_EXTENSIONS``) reads this file name."""
    return name.endswith(IMAGE_EXTENSIONS)


def scan_split(data_dir: str | Path, split: str = "train") -> FolderIndex:
    """Index ``data_dir/split`` with clear errors for a missing or empty folder or an empty class."""
    root = resolve(data_dir) / split
    if not root.parent.is_dir():
        raise DataError(f"data_dir {root.parent} does not exist (for the stand-in run "
                        f"`python -m data_prep.digits`, or set data_dir to your ImageNet folder)")
    if not root.is_dir():
        raise DataError(f"{root} does not exist: expected the ImageNet layout {root}/<class>/*.JPEG")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise DataError(f"{root} has no class folders: expected {root}/<class>/*.JPEG")
    labels = []
    for label, name in enumerate(classes):
        n = sum(1 for f in (root / name).iterdir() if is_image_file(f.name))
        if n == 0:
            raise DataError(f"class folder {root / name} has no images ({'/'.join(IMAGE_EXTENSIONS)})")
        labels.append(np.full(n, label, dtype=np.int32))
    return FolderIndex(root, tuple(classes), np.concatenate(labels))
