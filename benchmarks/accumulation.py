"""Gradient accumulation on 8 ranks: the same global batch as (B x 1) and (B/K x K), measured in one run.

Per case the full-batch and the accumulated job alternate ``--repeats`` times (the machine's load changes over
minutes); throughput is the global batch over the slowest rank's step time, activation memory the peak RSS
minus the rank's RSS before its first step. Then the planner's activation bytes per image against the measured
slope of single-process steps (native and im2col convolution). Goals: accumulated activation memory <= 0.35x
the full batch's, throughput >= 0.9x, planner slope within 25 %. Cases: ``oom_experiment`` (chapter 02's ci experiment:
resnet18 x0.125, 64 px, im2col, 96 images per rank, K=4) and ``tiny_micro_batch`` (the ci preset's 8 per rank
as 2 x 4, native: micro-steps where the fixed cost of a graph launch dominates).

    python -m benchmarks.accumulation [--repeats 3] [--out benchmarks/results/accumulation.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks._jobs import machine
from helpers.core.config import job_config
from helpers.job.launch import run_job
from helpers.topics.memory_runs import job_memory, planner_vs_measured, sweep

CASES = {
    "oom_experiment": dict(conv_impl="im2col", batch_per_rank=96, k=4, steps=3, image_size=64),
    "tiny_micro_batch": dict(conv_impl="native", batch_per_rank=8, k=4, steps=6, image_size=None),
}


def run_case(name: str, spec: dict, repeats: int, root: Path) -> dict:
    """One case: full batch and accumulated jobs alternated ``repeats`` times; throughput and memory."""
    base = job_config("ci", chapter="bench", conv_impl=spec["conv_impl"], steps=spec["steps"],
                      global_batch=8 * spec["batch_per_rank"], image_size=spec["image_size"])
    micro = spec["batch_per_rank"] // spec["k"]
    variants = {"full_batch": base.replace(name=f"{name}-full"),
                "accumulated": base.replace(name=f"{name}-acc", micro_batch=micro,
                                            accumulation_steps=spec["k"])}
    tp = {k: [] for k in variants}
    mem = {}
    for _ in range(repeats):
        for key, cfg in variants.items():
            res = run_job(cfg, progress="none", run_root=root)
            tp[key].append(res.img_per_s())
            mem[key] = job_memory(res)
    med = {k: statistics.median(v) for k, v in tp.items()}
    act = {k: mem[k]["max_activation"] for k in mem}
    return {
        "config": {"arch": base.arch, "width": base.width, "image_size": base.image_size,
                   "conv_impl": base.conv_impl, "world_size": base.world_size,
                   "global_batch": base.global_batch,
                   "batch_per_rank": spec["batch_per_rank"], "micro_batch": micro,
                   "accumulation_steps": spec["k"], "steps": spec["steps"]},
        "throughput_img_s": tp, "median_throughput_img_s": med,
        "throughput_ratio_accumulated_over_full": med["accumulated"] / med["full_batch"],
        "peak_rss_mb": {k: mem[k]["max_peak_rss"] for k in mem},
        "ready_rss_mb": {k: max(mem[k]["ready_rss"]) for k in mem},
        "activation_mb": act,
        "activation_ratio_accumulated_over_full": act["accumulated"] / act["full_batch"],
        "vms_peak_mb": {k: mem[k]["max_vms_peak"] for k in mem},
    }


def main(argv=None):
    """Run the cases and the planner-vs-measured sweep; print the JSON (and write it to ``--out``)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--sweep", type=int, nargs="*", default=[16, 48, 96])
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    out = {"benchmark": "accumulation", "repeats": args.repeats, "cases": {},
           "goals": {"activation_ratio": "<= 0.35", "throughput_ratio": ">= 0.90",
                     "planner_vs_measured_slope_ratio": "within 0.75..1.25 (native and im2col)"}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases:
            out["cases"][name] = run_case(name, CASES[name], args.repeats, Path(tmp))
    keys = ("batches", "measured_peak_mb", "measured_slope_mib_per_image", "planner_slope_mib_per_image",
            "planner_workspace_mib_per_image", "planner_vs_measured_slope_ratio", "conv_impl", "image_size")
    for field, impl in (("planner", "native"), ("planner_im2col", "im2col")):
        pvm = planner_vs_measured(sweep(args.sweep, conv_impl=impl, steps=1))
        out[field] = {k: pvm[k] for k in keys}
    out["machine"] = machine()
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
