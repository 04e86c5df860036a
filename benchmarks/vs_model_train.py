"""Our worker vs MindSpore's own high-level path, ``Model.train`` under ``DATA_PARALLEL``, on 8 ranks.

Same network, data pipeline and sharding, loss/optimizer and global batch, both launched by msrun; the variants
alternate ``--repeats`` times. Steady-state img/s = global batch / median over steps >= 2 of the slowest rank's
step time (both count the wait for the batch). ``Model.train`` variants: ``model_train`` (the tutorials'
context: one AllReduce per gradient tensor), ``model_train_fused`` (plus the preset's ``comm_fusion``, as our
worker) and ``model_train_sink`` (fused, ``dataset_sink_mode=True``; on CPU ``Model.train`` runs the non-sink
loop, so this measures that nothing changes).

Goal: ours >= 1.0x ``Model.train``. Writes ``benchmarks/results/vs_model_train.json``.

    python -m benchmarks.vs_model_train [--preset ci] [--steps 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks._jobs import SKIP_STEPS, alternate, job_record, medians, save
from helpers.core.config import job_config

SCRIPT = ("-m", "benchmarks.model_train_worker")
MODEL_TRAIN = {"model_train": ["--fusion", "default", "--sink", "0"],
               "model_train_fused": ["--fusion", "config", "--sink", "0"],
               "model_train_sink": ["--fusion", "config", "--sink", "1"]}


def main(argv=None) -> dict:
    """Alternate our worker and the ``Model.train`` variants; returns ``summarize``'s dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", nargs="*", default=list(MODEL_TRAIN))
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    base = job_config(args.preset, chapter="bench", name="ours", steps=args.steps)
    root = Path(tempfile.mkdtemp(prefix="bench_vs_model_train_"))
    variants = {"ours": job_record(base, root)}
    for name in args.variants:
        variants[name] = job_record(base.replace(name=name, compile_cache=False), root, (*SCRIPT, *MODEL_TRAIN[name]))
    runs = alternate(variants, args.repeats)
    return summarize(runs, base, args, root)


def summarize(runs, base, args, root) -> dict:
    """Median and best-step img/s per variant, ours over each, saved as ``vs_model_train.json``."""
    med, best = medians(runs), medians(runs, "best_img_per_s")

    def over(m):
        return {f"ours_over_{k}": (m["ours"] / v if m.get("ours") and v else None) for k, v in m.items() if k != "ours"}

    ratios = over(med)
    main_ratio = ratios.get("ours_over_model_train")
    return save("vs_model_train", {
        "preset": args.preset, "arch": base.arch, "width": base.width, "stem": base.stem,
        "image_size": base.image_size, "world_size": base.world_size, "global_batch": base.global_batch,
        "comm_fusion_of_preset": base.comm_fusion, "steps": args.steps, "steady_from_step": SKIP_STEPS,
        "repeats": args.repeats, "median_img_per_s": med, "ratios": ratios,
        "best_step_img_per_s": best, "ratios_best_step": over(best),
        "ratio": main_ratio, "goal": ">= 1.0", "goal_met": None if main_ratio is None else main_ratio >= 1.0,
        "ratio_vs_same_fusion": ratios.get("ours_over_model_train_fused"),
        "sink_mode_on_cpu": "Model.train falls back to the non-sink loop on CPU ('The CPU cannot support "
                            "dataset sink mode currently', mindspore/train/model.py)",
        "runs": runs, "run_root": str(root),
    }, args.out)


if __name__ == "__main__":
    main()
