"""Measures what each class of an ImageNet-layout tree costs to read; predicts each split's straggler from it.

Real classes differ in what an image costs to load (ImageNet's classes range from small web JPEGs to large
photos), so a split that gives a rank whole classes can give it a heavier load. Per class, a seeded sample of
``<tree>/train/<class>/*`` (the course's own scan and file filter, ``helpers.train.image_folder``) is read and
run through the training pipeline's per-image ops (``helpers.train.data``'s transforms up to ``Normalize``:
``RandomCropDecodeResize`` with the ImageNet stem, ``Decode`` + ``Resize`` with the small one, to ``--size``),
eagerly on one image at a time; each image's time is the best of ``--repeat`` runs. Reported per class: files
sampled, files skipped (not images, or unreadable), mean file size, mean decode + resize time, and the class's
share of the epoch's load (its images x its mean time, over the sum of all classes).

The prediction, for the four splits chapter 01 compares (``helpers.train.sampler.SHARD_KINDS``: contiguous
blocks of the class-sorted listing; ``DistributedSampler`` shuffle=False, i::n; shuffle=True, random;
stratified), over ``--ranks`` ranks reading ``--batch`` images per step:

- the load of a step on rank r is the sum of the per-image costs (its class's mean time) of the images r reads
  in that step;
- a step waits for its slowest rank, so a run takes sum_s max_r load[s, r] against sum_s mean_r load[s, r] if
  the load were even: their ratio is ``step_max_over_mean`` (1.0 = no rank waits; 1.3 = steps 30 % longer);
- ``shard_max_over_mean``: the heaviest rank's whole share against the mean (what a rank would cost if
  steps did not synchronise; for contiguous, the heaviest block of classes).

Decoding is assumed to be the step's bottleneck and to scale with the images read (no prefetch hiding it).

    python -m data_prep.class_costs <tree> [--sample 20] [--size 224] [--stem imagenet] [--ranks 8]
        [--batch 128] [--steps N] [--seed 0] [--repeat 1] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from helpers.core.errors import DataError
from helpers.train.image_folder import is_image_file, scan_split

SPLIT_NAMES = {"contiguous": "contiguous blocks", "distributed": "DistributedSampler(shuffle=False)",
               "distributed_shuffle": "DistributedSampler(shuffle=True)", "stratified": "stratified"}
STEMS = ("imagenet", "small")
TABLE_ROWS = 30          # above this many classes the table shows the costliest and cheapest halves


# ------------------------------------------------------------------------------------------- measuring
def pipeline_ops(size: int = 224, stem: str = "imagenet") -> list:
    """The train pipeline's per-image ops before ``Normalize`` (decode, crop, resize, flip), from
    ``helpers.train.data`` itself so the timing follows the pipeline."""
    import mindspore.dataset.vision as vision

    from helpers.train.data import _transforms

    if stem not in STEMS:
        raise ValueError(f"stem must be one of {STEMS}, got {stem!r}")
    ops = _transforms(size, train=True, imagenet_stem=stem == "imagenet")
    return [op for op in ops if not isinstance(op, (vision.Normalize, vision.HWC2CHW))]


def decode_seconds(raw: np.ndarray, ops: Sequence, repeat: int = 1) -> float:
    """Best time of ``repeat`` runs of ``ops`` on one image's bytes (the best: other load only adds time)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        x = raw
        for op in ops:
            x = op(x)
        best = min(best, time.perf_counter() - t0)
    return best


def class_files(folder: Path) -> tuple[list[Path], int]:
    """A class folder's image files (the reader's filter, sorted) and how many other files it holds."""
    images, other = [], 0
    for f in sorted(folder.iterdir()):
        if f.is_file() and is_image_file(f.name):
            images.append(f)
        elif f.is_file():
            other += 1
    return images, other


def measure_class(folder: Path, ops: Sequence, sample: int, rng: np.random.Generator,
                  repeat: int = 1) -> dict:
    """One class: a seeded sample of its images read and decoded; files sampled, skipped, mean bytes, time."""
    images, non_image = class_files(folder)
    if not images:
        raise DataError(f"class folder {folder} has no images")
    picked = sorted(rng.choice(len(images), size=min(sample, len(images)), replace=False))
    sizes, seconds, unreadable = [], [], []
    for i in picked:
        raw = np.fromfile(images[i], dtype=np.uint8)
        try:
            seconds.append(decode_seconds(raw, ops, repeat))
        except (RuntimeError, ValueError):          # MindSpore's Decode raises RuntimeError on a bad image
            unreadable.append(images[i].name)
            continue
        sizes.append(raw.size)
    if not seconds:
        raise DataError(f"class folder {folder}: none of the {len(picked)} sampled images decodes "
                        f"(e.g. {unreadable[0]}); check the files (helpers.train.image_checks)")
    return dict(images=len(images), sampled=len(seconds), non_image_skipped=non_image,
                unreadable_skipped=len(unreadable), mean_bytes=float(np.mean(sizes)),
                decode_resize_s=float(np.mean(seconds)))


def class_costs(tree: str | Path, sample: int = 20, size: int = 224, stem: str = "imagenet", repeat: int = 1,
                seed: int = 0, progress: Callable[[str], None] | None = None) -> dict:
    """Per-class cost of ``tree``'s train split (see the module docstring), as a JSON-ready dict.

    ``classes``: one row per class in the reader's (sorted) order; ``class_cost_s``: the mean decode + resize
    seconds per image in that order (what :func:`predict_splits` takes beside :func:`report_labels`).
    ``progress`` receives one line per class measured."""
    if sample < 1 or repeat < 1:
        raise ValueError(f"sample and repeat must be >= 1 (got {sample}, {repeat})")
    if not Path(tree).is_dir():
        raise DataError(f"{tree} does not exist: expected an ImageNet-layout folder, train/<class>/*.JPEG")
    index = scan_split(tree, "train")            # no train/, no classes, an empty class: DataError
    ops = pipeline_ops(size, stem)
    rng = np.random.default_rng(seed)
    first, _ = class_files(index.root / index.classes[0])
    decode_seconds(np.fromfile(first[0], dtype=np.uint8), ops)     # warm-up: the first call sets the ops up
    rows = []
    for k, name in enumerate(index.classes):
        row = dict(name=name, **measure_class(index.root / name, ops, sample, rng, repeat))
        rows.append(row)
        if progress is not None:
            skipped = row["non_image_skipped"] + row["unreadable_skipped"]
            progress(f"[{k + 1}/{len(index.classes)}] {name}: {row['sampled']} images read"
                     + (f", {skipped} file(s) skipped" if skipped else ""))
    load = np.array([r["images"] * r["decode_resize_s"] for r in rows])
    for r, share in zip(rows, load / load.sum()):
        r["load_share"] = float(share)
    return dict(tree=str(Path(tree)), size=size, stem=stem, sample=sample, repeat=repeat, seed=seed,
                classes=rows, class_cost_s=[r["decode_resize_s"] for r in rows])


# ------------------------------------------------------------------------------------------ predicting
def report_labels(report: dict) -> np.ndarray:
    """The class-sorted label of every image the report counted (the reader's order): no second listing."""
    counts = [r["images"] for r in report["classes"]]
    return np.repeat(np.arange(len(counts), dtype=np.int32), counts)


def split_shards(labels, ranks: int, batch: int, seed: int = 0) -> dict[str, list[np.ndarray]]:
    """Each split's per-rank sample indices: the course's own (``shard_indices``), except shuffle=True, whose
    order lives in MindSpore's engine: a seeded permutation dealt i::n (same distribution, no pipeline)."""
    from helpers.train.sampler import SHARD_KINDS, shard_indices

    labels = np.asarray(labels)
    shards = {}
    for kind in SHARD_KINDS:
        if kind == "distributed_shuffle":
            order = np.random.default_rng(seed).permutation(labels.size)
            length = -(-labels.size // ranks)
            padded = np.resize(order, length * ranks)           # padded by wrapping, as DistributedSampler
            shards[kind] = [padded[r::ranks] for r in range(ranks)]
        else:
            extra = {"global_batch": ranks * batch} if kind == "stratified" else {}
            try:
                shards[kind] = shard_indices(kind, labels, ranks, seed, **extra)
            except DataError as exc:             # e.g. a class smaller than the number of ranks
                raise DataError(f"the {kind} split over {ranks} ranks: {exc}") from exc
    return shards


def step_loads(shards: Sequence[np.ndarray], image_cost: np.ndarray, batch: int,
               steps: int | None = None) -> np.ndarray:
    """load[s, r]: the summed cost of the images rank r reads in step s (whole batches, as drop_remainder)."""
    full = min(len(s) for s in shards) // batch
    n = full if steps is None else min(steps, full)
    if n == 0:
        raise DataError(f"the shards ({min(len(s) for s in shards)} images on the smallest rank) do not hold "
                        f"one batch of {batch}: lower --batch or --ranks")
    return np.stack([image_cost[np.asarray(s[:n * batch])].reshape(n, batch).sum(axis=1) for s in shards],
                    axis=1)


def imbalance(loads: np.ndarray) -> dict:
    """The step-synchronous slowdown (sum of step maxima over sum of step means), the heaviest rank's share
    against the mean, and which rank that is."""
    per_rank = loads.sum(axis=0)
    return dict(step_max_over_mean=float(loads.max(axis=1).sum() / loads.mean(axis=1).sum()),
                shard_max_over_mean=float(per_rank.max() / per_rank.mean()),
                slowest_rank=int(np.argmax(per_rank)), steps=int(loads.shape[0]))


def predict_splits(labels, class_cost: Sequence[float], ranks: int = 8, batch: int = 128, seed: int = 0,
                   steps: int | None = None, shards: dict[str, list[np.ndarray]] | None = None) -> dict:
    """Per split: :func:`imbalance` of the loads when each image costs its class's ``class_cost`` (the
    model of the module docstring). ``shards`` (e.g. chapter 01's planned ones) replaces :func:`split_shards`;
    ``steps`` limits the prediction to the first steps (a run shorter than an epoch)."""
    labels = np.asarray(labels)
    cost = np.asarray(class_cost, dtype=np.float64)
    if labels.size and int(labels.max()) >= cost.size:
        raise ValueError(f"labels go up to {int(labels.max())} but class_cost has {cost.size} classes")
    shards = split_shards(labels, ranks, batch, seed) if shards is None else shards
    image_cost = cost[labels]
    return {kind: imbalance(step_loads(s, image_cost, batch, steps)) for kind, s in shards.items()}


# ------------------------------------------------------------------------------------------------- CLI
def format_report(report: dict, predictions: dict, ranks: int, batch: int) -> str:
    """The per-class table (the costliest and cheapest classes when there are many) and the split table."""
    rows = report["classes"]
    shown = list(enumerate(rows))
    hidden = 0
    if len(rows) > TABLE_ROWS:
        by_cost = sorted(shown, key=lambda kr: -kr[1]["decode_resize_s"])
        hidden = len(rows) - TABLE_ROWS
        shown = by_cost[:TABLE_ROWS // 2] + by_cost[-(TABLE_ROWS // 2):]
    width = max(len("class"), *(len(r["name"]) for _, r in shown))
    lines = [f"{report['tree']}: {len(rows)} classes, decode + resize to {report['size']} px "
             f"({report['stem']} stem), up to {report['sample']} images per class",
             f"{'class':<{width}}  {'images':>7}  {'sampled':>7}  {'skipped':>7}  {'mean KB':>8}  "
             f"{'ms/image':>8}  {'load share':>10}"]
    for i, (_, r) in enumerate(shown):
        if hidden and i == TABLE_ROWS // 2:
            lines.append(f"{'...':<{width}}  ({hidden} classes between these, all in --json)")
        lines.append(f"{r['name']:<{width}}  {r['images']:>7}  {r['sampled']:>7}  "
                     f"{r['non_image_skipped'] + r['unreadable_skipped']:>7}  "
                     f"{r['mean_bytes'] / 1024:>8.1f}  "
                     f"{r['decode_resize_s'] * 1e3:>8.3f}  {r['load_share']:>10.1%}")
    cost = np.array(report["class_cost_s"])
    lines += [f"costliest class / cheapest: {cost.max() / cost.min():.2f}x", "",
              f"predicted slowest rank against the mean, {ranks} ranks x {batch} images per step "
              f"(a step waits for its slowest rank):",
              f"{'split':<34}  {'per step':>9}  {'per shard':>9}  {'heaviest rank':>13}  {'steps':>6}"]
    for kind, p in predictions.items():
        lines.append(f"{SPLIT_NAMES.get(kind, kind):<34}  {p['step_max_over_mean']:>9.3f}  "
                     f"{p['shard_max_over_mean']:>9.3f}  {p['slowest_rank']:>13}  {p['steps']:>6}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Measure, predict, print the tables and write ``--json``; exit 2 with the reason on a data error."""
    ap = argparse.ArgumentParser(prog="python -m data_prep.class_costs", description=__doc__.splitlines()[0])
    ap.add_argument("tree", help="ImageNet-layout folder holding train/<class>/*")
    ap.add_argument("--sample", type=int, default=20, help="images read per class (default 20)")
    ap.add_argument("--size", type=int, default=224, help="the model's image size (default 224)")
    ap.add_argument("--stem", choices=STEMS, default="imagenet", help="the pipeline's ops for this stem")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--batch", type=int, default=128, help="images per rank per step (default 128: gpu8)")
    ap.add_argument("--steps", type=int, default=None, help="predict the first N steps (default: one epoch)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="time each image N times, keep the best")
    ap.add_argument("--json", type=Path, default=None, help="write the report and predictions here")
    a = ap.parse_args(argv)
    try:
        report = class_costs(a.tree, a.sample, a.size, a.stem, a.repeat, a.seed,
                             progress=lambda line: print(line, file=sys.stderr, flush=True))
        predictions = predict_splits(report_labels(report), report["class_cost_s"], a.ranks, a.batch, a.seed,
                                     a.steps)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_report(report, predictions, a.ranks, a.batch))
    if a.json is not None:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(dict(report, ranks=a.ranks, batch=a.batch, predictions=predictions),
                                     indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
