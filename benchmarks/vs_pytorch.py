"""One CPU training step of the course's ResNet-18 layout: MindSpore (im2col) against PyTorch, side by side.

Goal: MindSpore's step <= 1.5x PyTorch's on the same layout, width, image size, batch and thread
count, at the ``ci`` and ``cpu`` models and at batch 128. Each measurement runs in a fresh interpreter:
MindSpore through ``helpers.core.fresh_python.call_fresh`` (``helpers.train.conv_autoselect.time_train_step``:
GRAPH_MODE, ``plain_train_step``), PyTorch through ``benchmarks/torch_step.py`` in the benchmark's own torch
environment (PyTorch is never a course dependency). The two alternate ``--repeats`` times per case, so a
change in the shared machine's load hits both alike; each run records the 1-minute load average.

    python -m benchmarks.vs_pytorch [--repeats 3] [--steps 20] [--steps-big 5] [--variants]
    python -m benchmarks.vs_pytorch --torch-python /path/to/python   # an interpreter that already has torch
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from helpers.core.im2col_shape import FOLD_ENV

ARCH, STEM, CLASSES = "resnet18", "small", 10
DEPTHS = (2, 2, 2, 2)            # resnet18's BasicBlocks per stage (helpers.core.resnet_layout.ARCHS)
TORCH_VERSION = "2.13.0"         # a CPU wheel of it sits in PIP_FIND_LINKS: no other version is downloaded
TORCH_ENV = "runs/bench-envs/torch"
TORCH_STEP = Path(__file__).resolve().parent / "torch_step.py"
GOAL = 1.5                       # MindSpore s/step / PyTorch s/step <= 1.5 at every size (issue 31)
# MindSpore settings tried as extra variants (``--variants``): name -> {"context": set_context keywords,
# "dispatch_threads_num": mindspore.runtime.dispatch_threads_num's argument}. (``enable_graph_kernel`` is
# deprecated in 2.10 for jit_level O1, which the startup benchmark already compares.)
MS_VARIANTS = {"dispatch_threads_1": {"dispatch_threads_num": 1}}
# Always timed: the im2col convolution as it was before deep layers multiplied once over the batch
# (helpers.core.im2col_shape), so the change's effect is measured beside PyTorch in the same run.
PER_IMAGE = {"env": {FOLD_ENV: "0"}}


def cases(big_batch: int = 128) -> dict[str, dict]:
    """The measured cases: the ``ci`` and ``cpu`` presets' model and per-rank batch, and the cpu model at
    ``big_batch``; each with the stage widths both sides build (``resnet_layout.stage_widths``)."""
    from helpers.core.config import job_config
    from helpers.core.resnet_layout import ARCHS, stage_widths

    assert ARCHS[ARCH] == ("basic", DEPTHS), "torch_step.py builds BasicBlocks only"
    out = {}
    picks = (("ci", "ci", None), ("cpu", "cpu", None), (f"cpu_b{big_batch}", "cpu", big_batch))
    for name, preset, batch in picks:
        cfg = job_config(preset)
        assert (cfg.arch, cfg.stem) == (ARCH, STEM), f"{preset} preset is not {ARCH}/{STEM}"
        out[name] = {"preset": preset, "width": cfg.width, "image_size": cfg.image_size,
                     "batch": batch or cfg.batch_per_rank, "widths": stage_widths(cfg.width),
                     "depths": list(DEPTHS)}
    return out


def torch_command(python: str, case: dict, threads: int, steps: int,
                  channels_last: bool = False) -> list[str]:
    """The command line that times ``case`` with PyTorch (``benchmarks/torch_step.py``)."""
    cmd = [python, str(TORCH_STEP), "--widths", *map(str, case["widths"]),
           "--depths", *map(str, case["depths"]), "--classes", str(CLASSES),
           "--image-size", str(case["image_size"]), "--batch", str(case["batch"]),
           "--threads", str(threads), "--steps", str(steps)]
    return cmd + (["--channels-last"] if channels_last else [])


def ensure_torch_env(torch_python: str | None = None) -> str:
    """The torch interpreter: ``torch_python`` if given, else ``<course home>/runs/bench-envs/torch`` (created
    with python3.11 and torch==2.13.0, numpy<2 when missing)."""
    if torch_python:
        return torch_python
    from helpers.core.paths import resolve

    env = resolve(TORCH_ENV)
    py = env / "bin" / "python"
    if not py.exists():
        print(f"creating the torch environment {env}", file=sys.stderr, flush=True)
        env.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["python3.11", "-m", "venv", str(env)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", f"torch=={TORCH_VERSION}", "numpy<2"],
                       check=True)
    return str(py)


def run_torch(python: str, case: dict, threads: int, steps: int, channels_last: bool = False) -> dict:
    """One PyTorch measurement in a new process: its JSON line, plus wall seconds and the load."""
    t0 = time.monotonic()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(torch_command(python, case, threads, steps, channels_last), capture_output=True,
                          text=True, env=env, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stdout + proc.stderr)[-1500:]
        raise RuntimeError(f"torch_step.py failed (rc {proc.returncode}): {tail}")
    return {**json.loads(lines[-1]), "wall_s": round(time.monotonic() - t0, 1),
            "load_avg_1min": round(os.getloadavg()[0], 2)}


def ms_time_with(settings: dict, *args) -> float:
    """``time_train_step(*args)`` after a variant's settings (see ``MS_VARIANTS``), this process."""
    import mindspore as ms

    from helpers.train.conv_autoselect import time_train_step

    os.environ.update(settings.get("env") or {})        # read when the model's graph is built
    if settings.get("context"):
        ms.set_context(**settings["context"])
    if settings.get("dispatch_threads_num"):
        ms.runtime.dispatch_threads_num(settings["dispatch_threads_num"])
    return time_train_step(*args)


def ms_param_count(arch: str, width: float, stem: str, classes: int, impl: str) -> int:
    """Trainable scalars of the MindSpore model (``helpers.train.models.count_parameters``), this process."""
    from helpers.train.models import build_model, count_parameters

    return count_parameters(build_model(arch, classes, width, stem, impl))


def run_mindspore(case: dict, impl: str, threads: int, steps: int, settings: dict | None = None) -> dict:
    """One MindSpore measurement (median of ``steps`` steps after the compile step) in a fresh interpreter."""
    from helpers.core.fresh_python import call_fresh

    args = (ARCH, case["width"], STEM, case["image_size"], case["batch"], impl, steps, threads)
    t0 = time.monotonic()
    if settings:
        s = call_fresh("benchmarks.vs_pytorch:ms_time_with", settings, *args, timeout_s=1800)
    else:
        s = call_fresh("helpers.train.conv_autoselect:time_train_step", *args, timeout_s=1800)
    return {"median_s": float(s), "steps": steps, "impl": impl, "wall_s": round(time.monotonic() - t0, 1),
            "load_avg_1min": round(os.getloadavg()[0], 2)}


def alternate(variants: dict, repeats: int) -> dict[str, list[dict]]:
    """Run ``variants`` (name -> zero-argument callable) A B A B ... ``repeats`` rounds; a failure is recorded
    under ``_failed`` and that variant is not retried."""
    runs: dict[str, list] = {k: [] for k in variants}
    failed = {}
    for i in range(repeats):
        for name, fn in variants.items():
            if name in failed:
                continue
            try:
                runs[name].append(fn())
                r = runs[name][-1]
                print(f"[{i + 1}/{repeats}] {name}: {r['median_s']:.4f} s/step ({r['wall_s']} s, load "
                      f"{r['load_avg_1min']})", file=sys.stderr, flush=True)
            except Exception as exc:  # noqa: BLE001 - recorded in the JSON; the other variants go on
                failed[name] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
                print(f"[{i + 1}/{repeats}] {name}: FAILED {str(exc)[-400:]}", file=sys.stderr, flush=True)
    if failed:
        runs["_failed"] = failed
    return runs


def summary(runs: list[dict]) -> dict | None:
    """Median, min and max over the runs' per-run median step seconds, and the loads they ran under."""
    vals = [r["median_s"] for r in runs if r.get("median_s") is not None]
    if not vals:
        return None
    return {"median_s": statistics.median(vals), "min_s": min(vals), "max_s": max(vals), "n": len(vals),
            "loads_1min": [r.get("load_avg_1min") for r in runs]}


def step_ratio(summaries: dict[str, dict | None], ours: str = "mindspore", ref: str = "pytorch",
               stat: str = "median_s") -> float | None:
    """``ours``' step seconds over ``ref``'s by ``stat`` (``median_s``, or ``min_s``: the ratio least hit by other
    jobs' load), or None when either has no run."""
    a, b = summaries.get(ours), summaries.get(ref)
    return a[stat] / b[stat] if a and b else None


def best_ratio(summaries: dict[str, dict | None], ours: str = "mindspore", ref: str = "pytorch") -> float | None:
    """The fastest run of ``ours`` over the fastest of ``ref``."""
    return step_ratio(summaries, ours, ref, "min_s")


def ratios(summaries: dict[str, dict | None],
           references=("pytorch", "pytorch_channels_last")) -> dict[str, float]:
    """Each MindSpore variant's median step seconds over each PyTorch reference's (> 1: slower)."""
    return {f"{k}_over_{ref}": v["median_s"] / summaries[ref]["median_s"] for ref in references
            if summaries.get(ref) for k, v in summaries.items() if v and k.startswith("mindspore")}


def case_variants(case: dict, name: str, args, torch_py: str) -> dict:
    """The alternated variants of one case: MindSpore im2col, PyTorch, and the optional extras."""
    steps = args.steps_big if case["batch"] >= 128 else args.steps
    th = args.threads
    v = {"mindspore": lambda: run_mindspore(case, "im2col", th, steps),
         "pytorch": lambda: run_torch(torch_py, case, th, steps),
         "mindspore_per_image": lambda: run_mindspore(case, "im2col", th, steps, PER_IMAGE)}
    if name == "ci" and not args.no_native:
        v["mindspore_native"] = lambda: run_mindspore(case, "native", th, steps)
    if args.variants:
        for k, settings in MS_VARIANTS.items():
            v[f"mindspore_{k}"] = lambda st=settings: run_mindspore(case, "im2col", th, steps, st)
        v["pytorch_channels_last"] = lambda: run_torch(torch_py, case, th, steps, channels_last=True)
    return v


def param_counts(case: dict, torch_py: str) -> dict:
    """Trainable parameters of both models (they must be equal: the same layout)."""
    from helpers.core.fresh_python import call_fresh

    ms_n = call_fresh("benchmarks.vs_pytorch:ms_param_count", ARCH, case["width"], STEM, CLASSES, "im2col")
    pt_n = run_torch(torch_py, {**case, "batch": 2}, 1, 1)["params"]
    return {"mindspore": int(ms_n), "pytorch": int(pt_n)}


def main(argv=None) -> dict:
    """Alternate MindSpore and PyTorch per case, save ``benchmarks/results/vs_pytorch.json``."""
    from benchmarks._jobs import save

    ap = argparse.ArgumentParser(prog="python -m benchmarks.vs_pytorch", description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="alternated rounds per case")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per measurement (after a warm-up)")
    ap.add_argument("--steps-big", type=int, default=5, help="timed steps per measurement at batch >= 128")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--big-batch", type=int, default=128)
    ap.add_argument("--torch-python", default=None, help="an interpreter with torch (default: our own env)")
    ap.add_argument("--only", nargs="*", default=None, help="case names to run (default: all)")
    ap.add_argument("--no-native", action="store_true", help="skip MindSpore's native conv at the ci case")
    ap.add_argument("--out", default=None, help="write the JSON here (default benchmarks/results/)")
    ap.add_argument("--variants", action="store_true", help=f"also time MindSpore {sorted(MS_VARIANTS)} and "
                    "PyTorch channels-last")
    args = ap.parse_args(argv)
    torch_py = ensure_torch_env(args.torch_python)
    out_cases = {}
    for name, case in cases(args.big_batch).items():
        if args.only and name not in args.only:
            continue
        print(f"== case {name}: {case}", file=sys.stderr, flush=True)
        params = param_counts(case, torch_py)
        assert params["mindspore"] == params["pytorch"], f"layouts differ: {params}"
        runs = alternate(case_variants(case, name, args, torch_py), args.repeats)
        sums = {k: summary(v) for k, v in runs.items() if not k.startswith("_")}
        rat = ratios(sums)
        out_cases[name] = {**case, "params": params, "summary": sums, "ratios": rat, "runs": runs,
                           "ratio": rat.get("mindspore_over_pytorch"), "ratio_best": best_ratio(sums),
                           "folded_over_per_image": step_ratio(sums, "mindspore", "mindspore_per_image")}
    return save("vs_pytorch", {"goal": f"<= {GOAL:g}", "threads": args.threads, "repeats": args.repeats,
                               "steps": args.steps, "steps_big": args.steps_big, "arch": ARCH, "stem": STEM,
                               "classes": CLASSES, "torch_python": torch_py, "cases": out_cases}, args.out)


if __name__ == "__main__":
    main()
