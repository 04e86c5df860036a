"""What the side-by-side benchmarks share: run records of a job, alternating variants, machine facts, the results JSON.

Every benchmark job is started by ``helpers.job.launch.run_job``; a script other than our worker (MindSpore's
``Model.train``, mindcv's pipeline) is named with ``run_job(..., worker=...)`` and writes the same metrics
records (``helpers.core.metrics.MetricsWriter``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from helpers.core.errors import JobFailed
from helpers.core.step_times import steady_step_s

RESULTS = Path(__file__).resolve().parent / "results"
SKIP_STEPS = 2   # step 0 compiles, step 1 still warms caches: steady state starts at step 2


def machine() -> dict:
    """Cores, load average and time of the measurement (absolute speeds on a shared machine are noise)."""
    import platform

    from helpers.train.conv_autoselect import cpu_name

    return {"cores": os.cpu_count(), "cpu": cpu_name(), "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()],
            "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "python": platform.python_version()}


def best_img_per_s(res, skip: int = SKIP_STEPS) -> float:
    """Global batch / the fastest steady step (slowest rank): less sensitive to other people's jobs."""
    return float(res.config.global_batch / steady_step_s(res.metric("step_s"), skip, fastest=True))


def run_record(res, skip: int = SKIP_STEPS) -> dict:
    """One run's figures: steady img/s (median step; best step), job wall time, load when it ended."""
    step_s = res.metric("step_s")
    median = steady_step_s(step_s, skip)
    return {"img_per_s": res.config.global_batch / median, "best_img_per_s": best_img_per_s(res, skip),
            "median_step_s": median,
            "first_step_s": float(step_s[:, 0].max()), "wall_s": round(res.wall_s, 1),
            "load_avg_1min": round(os.getloadavg()[0], 2), "run_dir": str(res.run_dir)}


def job_record(cfg, root: Path, worker: tuple[str, ...] = (), bin_dir: str | None = None):
    """A variant for ``alternate``: run ``cfg`` (with ``worker`` instead of ours, from ``bin_dir``'s environment)
    under ``run_root=root`` and return its ``run_record``."""
    from helpers.job.launch import run_job

    return lambda: run_record(run_job(cfg, progress="none", run_root=root, worker=worker, bin_dir=bin_dir))


def alternate(variants: dict, repeats: int, log=print) -> dict[str, list[dict]]:
    """Run ``variants`` (name -> zero-argument callable returning a run record) in turn, ``repeats`` rounds
    (A B A B ...), so that a change in machine load hits each alike. A failed variant is recorded once
    (kind, message, log tail) and not retried."""
    runs: dict[str, list[dict]] = {k: [] for k in variants}
    failed: dict[str, dict] = {}
    for i in range(repeats):
        for name, fn in variants.items():
            if name in failed:
                continue
            t0 = time.monotonic()
            try:
                runs[name].append(fn())
                log(f"[{i + 1}/{repeats}] {name}: {runs[name][-1]['img_per_s']:.1f} img/s "
                    f"({time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.2f})", file=sys.stderr)
            except JobFailed as exc:
                failed[name] = {"kind": exc.kind if hasattr(exc, "kind") else "crash", "error": str(exc)[-3000:]}
                log(f"[{i + 1}/{repeats}] {name}: FAILED {str(exc)[:400]}", file=sys.stderr)
    if failed:
        runs["_failed"] = failed
    return runs


def median_img_per_s(runs: list[dict], key: str = "img_per_s") -> float | None:
    """Median of ``key`` over the runs that recorded it (``None`` if none did)."""
    vals = [r[key] for r in runs if r.get(key) is not None]
    return float(np.median(vals)) if vals else None


def medians(runs: dict[str, list[dict]], key: str = "img_per_s") -> dict[str, float | None]:
    """Per variant, the median of ``key`` over its runs (keys starting with ``_`` are skipped)."""
    return {k: median_img_per_s(v, key) for k, v in runs.items() if not k.startswith("_")}


def save(name: str, out: dict, path: str | Path | None = None) -> dict:
    """Print the JSON and write ``benchmarks/results/<name>.json`` (or ``path``)."""
    out = {"benchmark": name, **out, "machine": machine()}
    text = json.dumps(out, indent=2)
    print(text)
    path = Path(path) if path else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return out
