"""Chapter 01's four splits over seeds: is the stratified sampler's accuracy a sampler effect or seed noise?

    python -m benchmarks.ch01_seeds [--preset cpu] [--steps 20] [--lr-schedule constant] [--bn-diagnostic]
    python -m benchmarks.ch01_seeds --pipeline-only [--from-run runs/01/<job>] [--from-chapter <results.json>]

One job: the four splits as phases, each seed (weight init, data order) as more phases. Saves per split and seed
the held-out accuracy and last loss, spread and paired differences, the wall time, under ``<preset>-<lr>-<steps>``
in ``results/ch01_seeds.json``; ``--bn-diagnostic`` adds the same weights' accuracy with BatchNorm on batch
statistics. ``pipeline`` checks the sampler in the worker's real pipeline (``build_dataset``): does the order
change between epochs, does every batch hold the classes in their global proportions. ``--from-run`` reads a
(partial) seeds job's accuracies, ``--from-chapter`` a chapter 01 run's recorded repeats.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks._jobs import RESULTS, save
from helpers.chapters.load_imbalance import STRATEGIES
from helpers.core.config import job_config
from helpers.job.launch import run_job
from helpers.topics import seed_repeats
from helpers.train.data import build_dataset, prepare_data
from helpers.train.worker import BN_DIAGNOSTIC_ENV


def pipeline_checks(base, rank: int = 0, epochs: int = 3) -> dict:
    """The stratified pipeline one rank reads: per-epoch label sequences, do they differ, and per batch the
    largest gap between a class's count and its global share."""
    data = build_dataset(base.replace(sampler="stratified"), "train", rank, base.world_size).repeat()
    it = data.create_tuple_iterator(num_epochs=-1, output_numpy=True)
    index = prepare_data(base)
    per_epoch = len(index.labels) // base.global_batch + (len(index.labels) % base.global_batch > 0)
    share = index.counts / index.counts.sum()
    seqs, gaps = [], []
    for _ in range(epochs):
        labels = [next(it)[1] for _ in range(per_epoch)]
        seqs.append(np.concatenate(labels))
        gaps += [float(np.abs(np.bincount(b, minlength=share.size) - share * b.size).max()) for b in labels]
    same = [bool(np.array_equal(seqs[0], s)) for s in seqs[1:]]
    return {"steps_per_epoch": per_epoch, "epochs_identical_to_first": same,
            "position_agreement_epoch0_1": float(np.mean(seqs[0] == seqs[1])),
            "max_batch_class_gap_images": max(gaps), "batch": base.batch_per_rank}


def seeded_job(base, seeds: list[int], bn_diagnostic: bool = False) -> dict:
    """One job of every split and seed: per-seed figures, their summary and the wall time (``bn_diagnostic``: also
    each phase's accuracy with BatchNorm on batch statistics; one graph more, so not in the shared compile cache)."""
    t0 = time.monotonic()
    cfg = base.replace(name="seeds", phase_samplers=list(STRATEGIES), phase_seeds=seeds)
    if bn_diagnostic:
        # uncached, each evaluation graph compiles between two steps: more than the watchdog's 60 s on a loaded machine
        cfg = cfg.replace(env={**cfg.env, BN_DIAGNOSTIC_ENV: "1"}, compile_cache=False, stall_s=900.0)
    job = run_job(cfg, progress="none")
    wall = time.monotonic() - t0
    values = seed_repeats.per_seed(job, STRATEGIES, seeds)
    return {"seeds": seeds, "steps": base.steps, "lr_schedule": base.lr_schedule, "wall_s": round(wall, 1),
            "run_dir": str(job.run_dir), **values,
            "accuracy_summary": seed_repeats.summary(values["accuracy"]),
            "final_loss_summary": seed_repeats.summary(values["final_loss"]),
            **({"accuracy_batch_stats_summary": seed_repeats.summary(values["accuracy_batch_stats"])}
               if "accuracy_batch_stats" in values else {})}


def from_run(run_dir: str) -> dict:
    """Held-out accuracy per phase that a (possibly interrupted) seeds job recorded, read from rank 0's records."""
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics" / "rank_0.jsonl").read_text().splitlines()]
    return {"run_dir": run_dir, "accuracy": {r["phase"]: r["accuracy"] for r in rows if r["event"] == "phase_summary"}}


def from_chapter(path: str) -> tuple[str, dict]:
    """A chapter 01 run's recorded repeats (``record_results``' JSON), as one more run of this benchmark."""
    r = json.loads(Path(path).read_text())
    keep = ("seeds", "steps", "lr_schedule", "job_s", "chapter_s", "accuracy_by_seed", "final_loss_by_seed",
            "accuracy_summary", "final_loss_summary", "accuracy_batch_stats_by_seed")
    return f"{r['preset']}-{r['lr_schedule']}-{r['steps']}-chapter", {k: r[k] for k in keep if k in r} | {"source": path}


def main(argv=None) -> dict:
    """Run what the arguments ask, merge it into ``results/ch01_seeds.json`` (earlier tags kept)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--lr-schedule", default="constant")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--pipeline-only", action="store_true")
    ap.add_argument("--bn-diagnostic", action="store_true")
    ap.add_argument("--from-run", default=None)
    ap.add_argument("--from-chapter", default=None)
    args = ap.parse_args(argv)
    base = job_config(args.preset, chapter="01", evaluate=True, steps=args.steps, lr_schedule=args.lr_schedule)
    prepare_data(base)
    new = {"pipeline": pipeline_checks(base), "runs": {}}
    if args.from_run:
        new["reproduced"] = from_run(args.from_run)
    if args.from_chapter:
        tag, run = from_chapter(args.from_chapter)
        new["runs"][tag] = run
    if not args.pipeline_only:
        tag = f"{args.preset}-{args.lr_schedule}-{base.steps}" + ("-bn" if args.bn_diagnostic else "")
        new["runs"][tag] = seeded_job(base, args.seeds, args.bn_diagnostic)
    path = RESULTS / "ch01_seeds.json"     # read after the job: runs saved meanwhile are kept
    old = json.loads(path.read_text()) if path.exists() else {}
    out = {k: v for k, v in old.items() if k not in ("benchmark", "machine")} | {"preset": args.preset}
    out.update(pipeline=new["pipeline"], runs={**old.get("runs", {}), **new["runs"]},
               **({"reproduced": new["reproduced"]} if "reproduced" in new else {}))
    return save("ch01_seeds", out)

if __name__ == "__main__":
    main()
