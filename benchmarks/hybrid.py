"""Hybrid parallel on CPU: 8x1 (pure data parallel) vs 4x2 vs 2x4 on the same global batch, large classifier.

For each layout, real 8-rank msrun jobs (the preset's backbone, ``--classes`` classes, the classifier split per
a strategy file), the layouts alternating ``--repeats`` rounds: throughput (img/s, steady steps; median and
range) and the classifier bytes each rank really held (read from its parameters), plus the ratios of the medians
to pure data parallel. Prints JSON and writes ``benchmarks/results/hybrid.json``.

    python -m benchmarks.hybrid [--classes 100000] [--steps 6] [--repeats 3] [--layouts 8x1 4x2 2x4]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

from benchmarks._jobs import alternate, save
from helpers.core.config import job_config
from helpers.core.step_times import steady_step_s
from helpers.job.launch import run_job
from helpers.topics.hybrid import hybrid_config, write_layout_strategy
from helpers.train.strategy_layout import Layout

OUT = Path(__file__).resolve().parent / "results" / "hybrid.json"


def main(argv=None) -> dict:
    """Alternate the layouts ``--repeats`` rounds with a large classifier; print and save ``hybrid.json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--classes", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--layouts", nargs="+", default=["8x1", "4x2", "2x4"])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    os.environ.setdefault("COURSE_PROGRESS", "text")
    base = job_config(args.preset, name="bench-hybrid", chapter="bench", num_classes=args.classes,
                      steps=args.steps)
    work = Path(tempfile.mkdtemp(prefix="bench_hybrid_"))

    def layout_run(name):
        layout = Layout.parse(name)
        cfg = hybrid_config(base, layout, write_layout_strategy(base, layout, work / f"{name}.ckpt"),
                            name=f"bench-hybrid-{name}")

        def run():
            res = run_job(cfg, progress="none", run_root=work / "runs")
            return {"img_per_s": res.img_per_s(), "median_step_s": steady_step_s(res.metric("step_s")),
                    "classifier_bytes_per_rank": int(max(res.summary("classifier_param_bytes"))),
                    "classifier_shape_per_rank": res.summary("classifier_shape")[0],
                    "peak_rss_mb_per_rank": float(np.max(res.summary("peak_rss_mb"))), "job_wall_s": res.wall_s,
                    "load_avg_1min": round(os.getloadavg()[0], 2)}
        return run

    runs = alternate({name: layout_run(name) for name in args.layouts}, args.repeats)
    rows = {}
    for name in args.layouts:
        if not runs.get(name):
            continue
        ips = [r["img_per_s"] for r in runs[name]]
        rows[name] = {**runs[name][0], "img_per_s": float(np.median(ips)), "img_per_s_runs": ips,
                      "median_step_s": float(np.median([r["median_step_s"] for r in runs[name]])),
                      "job_wall_s": [r["job_wall_s"] for r in runs[name]],
                      "load_avg_1min": [r["load_avg_1min"] for r in runs[name]]}
    ref = rows.get("8x1")
    if ref:
        for r in rows.values():
            r["img_per_s_vs_dp"] = r["img_per_s"] / ref["img_per_s"]
            r["classifier_bytes_vs_dp"] = r["classifier_bytes_per_rank"] / ref["classifier_bytes_per_rank"]
    out = {"preset": args.preset, "num_classes": args.classes, "steps": args.steps, "repeats": args.repeats,
           "global_batch": base.global_batch, "world_size": base.world_size, "arch": base.arch,
           "width": base.width, "path": "CPU explicit collectives (helpers.train.hybrid_step)", "layouts": rows,
           "runs": runs}
    if "2x4" in rows and ref:
        r = rows["2x4"]
        out["goal_2x4"] = {"classifier_bytes_vs_dp_le_0.3": r["classifier_bytes_vs_dp"] <= 0.3,
                           "img_per_s_vs_dp_ge_0.8": r["img_per_s_vs_dp"] >= 0.8}
    return save("hybrid", out, args.out)   # prints, writes, and records the machine


if __name__ == "__main__":
    main()
