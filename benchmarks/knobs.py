"""The knobs that decide CPU throughput of 8 ranks on few cores, each measured against the preset's settings.

Short runs of the preset's model, alternating ``--repeats`` rounds: ``base`` (the preset, no core binding);
``threads_<n>`` (``threads_per_rank=n``); ``bind_core`` (msrun ``--bind_core`` with a dict pinning rank r to
core ``r % cores``; ``--bind_core=True`` binds nothing with fewer cores than workers); ``workers_<n>``
(``dataset_workers=n``); ``model_train_graph`` vs ``model_train_pynative`` (the ``Model.train`` script,
``benchmarks.model_train_worker --mode``, since our worker has no mode switch). Each ratio is img/s(variant) /
img/s(its reference: ``base`` or ``model_train_graph``); the JSON's ``recommendation`` names the settings that
beat it by more than ``--margin`` (sink mode: ``benchmarks.vs_model_train``). Writes ``results/knobs.json``.

    python -m benchmarks.knobs [--preset ci] [--steps 10] [--repeats 3] [--threads 2] [--workers 2]
    python -m benchmarks.knobs --repeats 1 --append --only base threads_2 ...   # one more round, in this order
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from benchmarks._jobs import RESULTS, SKIP_STEPS, alternate, job_record, medians, save
from helpers.core.config import job_config
from helpers.job.launch import bind_core_map

MT = ("-m", "benchmarks.model_train_worker", "--fusion", "config", "--mode")
REFERENCES = ("base", "model_train_graph")


def parse(argv=None) -> argparse.Namespace:
    """The command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--margin", type=float, default=0.05)
    ap.add_argument("--only", nargs="*", default=None, help="variant names to run, in this order (default: all)")
    ap.add_argument("--append", action="store_true",
                    help="add this run's rounds to those already in the results JSON (same preset and steps)")
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def knob_variants(base, args, root: Path) -> dict:
    """name -> variant: the preset without core binding, each knob changed alone, and Model.train's two modes."""
    variants = {
        "base": job_record(base, root),
        f"threads_{args.threads}": job_record(base.replace(name="knobs-threads", threads_per_rank=args.threads), root),
        "bind_core": job_record(base.replace(name="knobs-bind", bind_cores=True), root),
        f"workers_{args.workers}": job_record(base.replace(name="knobs-workers", dataset_workers=args.workers), root),
        "model_train_graph": job_record(base.replace(name="knobs-mt-graph", compile_cache=False), root, (*MT, "graph")),
        "model_train_pynative": job_record(base.replace(name="knobs-mt-pynative", compile_cache=False), root,
                                           (*MT, "pynative")),
    }
    return {k: variants[k] for k in args.only if k in variants} if args.only else variants   # in the order given


def with_earlier_rounds(runs: dict, args) -> tuple[dict, object]:
    """``--append``: this run's rounds after those in the results JSON; returns (runs, rounds per variant)."""
    prev = json.loads(Path(args.out or RESULTS / "knobs.json").read_text())
    if (prev["preset"], prev["steps"]) != (args.preset, args.steps):
        raise SystemExit("--append: the earlier results are for another preset or step count")
    for k, v in prev["runs"].items():
        if not k.startswith("_"):
            runs[k] = v + runs.get(k, [])
    return runs, {k: len(v) for k, v in runs.items() if not k.startswith("_")}


def recommendation(base, args, ratios: dict, ratios_best: dict) -> dict:
    """The settings whose knob wins by more than the margin on the median AND on the best step."""
    better = {k: r for k, r in ratios.items() if r is not None and r > 1 + args.margin
              and (ratios_best.get(k) or 0) > 1 + args.margin}
    return {"threads_per_rank": args.threads if better.get(f"threads_{args.threads}") else base.threads_per_rank,
            "dataset_workers": args.workers if better.get(f"workers_{args.workers}") else base.dataset_workers,
            "bind_cores": bool(better.get("bind_core")),
            "mode": "PYNATIVE" if better.get("model_train_pynative") else "GRAPH"}


def main(argv=None) -> dict:
    """Alternate the knob variants, compute each one's ratio to its reference, save ``knobs.json``."""
    args = parse(argv)
    # the reference pins no cores (the ci/cpu presets do, because of this benchmark), so bind_core is a real toggle
    base = job_config(args.preset, chapter="bench", name="knobs-base", steps=args.steps, bind_cores=False)
    root = Path(tempfile.mkdtemp(prefix="bench_knobs_"))
    runs = alternate(knob_variants(base, args, root), args.repeats)
    runs, rounds = with_earlier_rounds(runs, args) if args.append else (runs, args.repeats)
    med, best = medians(runs), medians(runs, "best_img_per_s")
    refs = {k: ("model_train_graph" if k.startswith("model_train_") else "base") for k in med}

    def ratios_of(m):
        return {k: (m[k] / m[refs[k]] if m.get(k) and m.get(refs[k]) else None) for k in m if k not in REFERENCES}

    ratios, ratios_best = ratios_of(med), ratios_of(best)
    return save("knobs", {
        "preset": args.preset, "arch": base.arch, "width": base.width, "world_size": base.world_size,
        "global_batch": base.global_batch, "steps": args.steps, "steady_from_step": SKIP_STEPS,
        "repeats": rounds, "preset_settings": {"threads_per_rank": base.threads_per_rank,
                                                     "dataset_workers": base.dataset_workers,
                                                     "bind_cores": base.bind_cores, "mode": "GRAPH"},
        "bind_core_dict": bind_core_map(base.world_size, os.cpu_count() or 1), "median_img_per_s": med,
        "reference": refs, "ratios": ratios, "best_step_img_per_s": best, "ratios_best_step": ratios_best,
        "margin": args.margin, "recommendation": recommendation(base, args, ratios, ratios_best),
        "not_in_the_launcher": {
            "mode": "helpers.train.worker.setup_runtime always sets GRAPH_MODE: a mode field would be needed"},
        "runs": runs, "run_root": str(root)}, args.out)


if __name__ == "__main__":
    main()
