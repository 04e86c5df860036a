"""Sorts a flat ImageNet ``val/`` into ``val/<wnid>/`` from the labels CSV, so val reads like train.

    python -m data_prep.imagenet_val DATA_DIR --labels LOC_val_solution.csv

Idempotent (files already in their class folder are left alone), loses nothing (a file without a label
stays where it is and is reported), and moves nothing at all when the CSV is unreadable or names a class
that train/ does not have. The CSV is Kaggle's ``ImageId,PredictionString`` (the wnid is the first word
of PredictionString); a two-column ``file,wnid`` CSV works too.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers.core.errors import DataError


@dataclass(frozen=True)
class SortReport:
    moved: int
    in_place: int
    unlabelled: tuple[str, ...]

    def line(self) -> str:
        extra = f" (e.g. {', '.join(self.unlabelled[:3])})" if self.unlabelled else ""
        return (f"moved {self.moved}, already in place {self.in_place}, "
                f"unlabelled {len(self.unlabelled)}{extra}")


def read_labels(csv_path: str | Path) -> dict[str, str]:
    """``{image id without extension: wnid}`` from the labels CSV; DataError names the bad line."""
    path = Path(csv_path)
    if not path.is_file():
        raise DataError(f"labels file {path} does not exist (Kaggle's ImageNet ships LOC_val_solution.csv)")
    labels = {}
    with open(path, newline="") as f:
        for i, row in enumerate(csv.reader(f), 1):
            if not row or (i == 1 and row[0].strip().lower() in ("imageid", "image", "file", "filename")):
                continue
            words = row[1].split() if len(row) >= 2 else []
            if not words or not words[0].startswith("n") or not words[0][1:].isdigit():
                raise DataError(f"{path}, line {i}: expected 'ImageId,<wnid> ...', got {','.join(row)[:80]!r}")
            labels[Path(row[0].strip()).stem] = words[0]
    if not labels:
        raise DataError(f"{path} holds no labels")
    return labels


def sort_val(data_dir: str | Path, labels_csv: str | Path) -> SortReport:
    """Move ``data_dir/val/*`` into ``data_dir/val/<wnid>/`` per ``labels_csv``; see the module docstring."""
    root = Path(data_dir)
    val, train = root / "val", root / "train"
    if not val.is_dir():
        raise DataError(f"{val} does not exist")
    labels = read_labels(labels_csv)
    classes = {p.name for p in train.iterdir() if p.is_dir()} if train.is_dir() else set()
    unknown = sorted({w for w in labels.values()} - classes) if classes else []
    if unknown:
        raise DataError(f"{labels_csv} names {len(unknown)} classes that {train} does not have, e.g. "
                        f"{unknown[:3]}: nothing was moved")
    flat = sorted(p for p in val.iterdir() if p.is_file())
    in_place = sum(1 for d in val.iterdir() if d.is_dir() for f in d.iterdir() if f.is_file())
    moved, unlabelled = 0, []
    for path in flat:
        wnid = labels.get(path.stem)
        if wnid is None:
            unlabelled.append(path.name)
            continue
        (val / wnid).mkdir(exist_ok=True)
        path.rename(val / wnid / path.name)
        moved += 1
    return SortReport(moved, in_place, tuple(unlabelled))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m data_prep.imagenet_val", description=__doc__.splitlines()[0])
    ap.add_argument("data_dir")
    ap.add_argument("--labels", required=True, help="LOC_val_solution.csv (or file,wnid)")
    a = ap.parse_args(argv)
    try:
        report = sort_val(a.data_dir, a.labels)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
