"""The always-on time split (``helpers.train.time_split``): its cost on the step time, and its agreement with the
profiler's split (chapter 04's baseline against its first look: the absolute difference of the communication shares).

Overhead: jobs with the split off and on (the default period), alternated; judged inside each "on" job, where the
load is the same for both kinds of step: (mean split step / mean fused step - 1) / the period. The two jobs' mean
step ratio and the first step's time (the split graphs compile there) are recorded beside it.

    python -m benchmarks.time_split [--preset ci] [--repeats 2] [--steps 45]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks._jobs import alternate, save
from helpers.core.config import job_config
from helpers.job.launch import run_job
from helpers.topics.first_look import EVERY_STEP, read_first_look
from helpers.topics.profiling import read_job_profile
from helpers.train.time_split import SPLIT_EVERY_ENV, split_every

SKIP = 2    # step 0 compiles, step 1 warms caches


def overhead_record(res, every: int) -> dict:
    """Mean step time (ranks' mean, steps from ``SKIP``), and in a job with split steps their extra cost."""
    step = res.metric("step_s").mean(axis=0)[SKIP:]
    out = {"mean_step_s": float(step.mean()), "first_step_s": float(res.metric("step_s")[:, 0].max()),
           "img_per_s": res.config.global_batch / float(step.mean()), "run_dir": str(res.run_dir)}
    if every:
        split = np.array(["reduce_s" in x for x in res.steps[0]])[SKIP:]
        fused_s, split_s = float(step[~split].mean()), float(step[split].mean())
        out.update(split_steps=int(split.sum()), fused_step_s=fused_s, split_step_s=split_s,
                   split_step_extra=split_s / fused_s - 1, overhead=(split_s / fused_s - 1) / every)
    return out


def agreement_record(base, root: Path):
    """One round of chapter 04's baseline (profiled) and first look; their communication shares."""
    def run():
        prof = read_job_profile(run_job(base.replace(name="profiled"), progress="none", run_root=root))
        look = read_first_look(run_job(base.replace(name="first_look", profile=False,
                                                    steps=max(4, base.profile_skip_steps + 1),
                                                    env={**base.env, **EVERY_STEP}), progress="none", run_root=root))
        return {"profiler_comm_share": prof.comm_share, "first_look_comm_share": look.comm_share,
                "difference": abs(prof.comm_share - look.comm_share), "first_look_steps": look.verdict.steps,
                "verdict": look.verdict.line(), "img_per_s": 0.0}
    return run


def main(argv=None) -> dict:
    """Alternate the overhead jobs, then the agreement jobs; save the JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=45)
    ap.add_argument("--profile-from", type=int, default=3)
    ap.add_argument("--skip-agreement", action="store_true")
    args = ap.parse_args(argv)
    every = split_every(args.steps, env={})
    base = job_config(args.preset, chapter="bench", steps=args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        runs = alternate({name: (lambda e=e, name=name: overhead_record(run_job(
            base.replace(name=f"split_{name}", env={**base.env, SPLIT_EVERY_ENV: str(e)}), progress="none",
            run_root=root), e)) for name, e in (("off", 0), ("on", every))}, args.repeats)
        agree = [] if args.skip_agreement else alternate({"round": agreement_record(
            job_config(args.preset, chapter="bench", name="ch04", steps=args.profile_from + 2, comm_fusion={},
                       profile=True, profile_skip_steps=args.profile_from), root)}, args.repeats)["round"]
    on, off = runs.get("on", []), runs.get("off", [])
    med = lambda rs, k: statistics.median(r[k] for r in rs) if rs else None    # noqa: E731
    out = {"preset": args.preset, "steps": args.steps, "every": every, "repeats": args.repeats,
           "overhead": med(on, "overhead"), "split_step_extra": med(on, "split_step_extra"),
           "mean_step_ratio_on_over_off": (med(on, "mean_step_s") / med(off, "mean_step_s")) if on and off else None,
           "first_step_s": {"off": med(off, "first_step_s"), "on": med(on, "first_step_s")},
           "agreement": {"comm_share_difference": med(agree, "difference"),
                         "profiler_comm_share": med(agree, "profiler_comm_share"),
                         "first_look_comm_share": med(agree, "first_look_comm_share"), "rounds": agree},
           "runs": runs}
    print(f"overhead {out['overhead']}, agreement {out['agreement']['comm_share_difference']}", file=sys.stderr)
    return save("time_split", out)


if __name__ == "__main__":
    main()
