"""What the side-by-side benchmarks share: launching any script as an 8-rank msrun job, steady-state
throughput from per-rank step records, machine facts (cores, load average) and writing the results JSON.

``launch_script`` is ``helpers.job.launch.run_job`` for a script other than ``helpers.train.worker`` (MindSpore's
``Model.train``, mindcv's pipeline, or our own worker with extra msrun flags such as ``--bind_core``): the
same config file, environment and run-directory layout, msrun from any environment, every process of the
job swept at the end (by the job's id, as ``run_job`` does). The script writes the same metrics files as
our worker (``helpers.core.metrics.MetricsWriter``), so both are read back with ``helpers.job.launch.load_result``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from helpers.core.config import JobConfig
from helpers.core.errors import JobFailed
from helpers.job.processes import stop_job
from helpers.job.launch import find_msrun, free_port, job_env, load_result, log_tail, msrun_command
from helpers.core.paths import new_run_dir

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]
SKIP_STEPS = 2   # step 0 compiles, step 1 still warms caches: steady state starts at step 2


def machine() -> dict:
    """Cores, load average and time of the measurement (absolute speeds on a shared machine are noise)."""
    import platform

    from helpers.train.conv_autoselect import cpu_name

    return {"cores": os.cpu_count(), "cpu": cpu_name(), "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()],
            "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "python": platform.python_version()}


def steady_img_per_s(res, skip: int = SKIP_STEPS) -> float:
    """Global batch / median over steady steps of the slowest rank's step time (a step ends when its
    slowest rank does). ``step_s`` includes the wait for the batch in every script measured here."""
    step_s = res.metric("step_s")
    if step_s.shape[1] > skip:
        step_s = step_s[:, skip:]
    return float(res.config.global_batch / np.median(step_s.max(axis=0)))


def resolved(cfg: JobConfig) -> JobConfig:
    """What ``run_job`` does before it starts: make the stand-in data, resolve ``conv_impl="auto"``."""
    from helpers.train.conv_autoselect import resolve_conv_impl
    from helpers.train.data import prepare_data

    prepare_data(cfg)
    if cfg.conv_impl == "auto":
        cfg = cfg.replace(conv_impl=resolve_conv_impl(cfg)[0])
    return cfg


def launch_script(cfg: JobConfig, script: list[str], root: Path, msrun_flags: tuple[str, ...] = (),
                  python_bin: str | None = None):
    """Run ``python -u <script...> <run_dir>/config.json`` on ``cfg.world_size`` ranks via msrun.

    ``script`` is e.g. ``["benchmarks/model_train_worker.py", "--sink", "0"]`` or ``["-m", "helpers.train.worker"]``;
    the config path is appended last. ``python_bin``: the bin folder of another environment (its msrun
    and its python start the job). Returns a ``JobResult``; raises ``JobFailed`` with the rank-0 log tail.
    """
    cfg = resolved(cfg)
    run_dir = new_run_dir(cfg.chapter, cfg.name, root)
    cfg = cfg.replace(master_port=free_port())
    config_path = cfg.save(run_dir / "config.json")
    job_id = f"{run_dir.name}-{os.getpid()}-{cfg.master_port}"
    env = job_env(cfg, job_id)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    if python_bin:
        env["PATH"] = f"{python_bin}{os.pathsep}{env['PATH']}"
        env.pop("VIRTUAL_ENV", None)
        msrun = str(Path(python_bin) / "msrun")
    else:
        msrun = find_msrun()
    cmd = msrun_command(cfg, config_path, run_dir / "logs", msrun)
    head = cmd[: cmd.index("python")]
    cmd = head + list(msrun_flags) + ["python", "-u", *script, str(config_path)]
    t0 = time.monotonic()
    with open(run_dir / "msrun.log", "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(timeout=cfg.timeout_s)
    except subprocess.TimeoutExpired:
        stop_job([proc], job_id)
        raise JobFailed("timeout", f"not finished after {cfg.timeout_s:.0f} s", None,
                        log_tail(run_dir, 0), str(run_dir)) from None
    except BaseException:
        stop_job([proc], job_id)
        raise
    wall = time.monotonic() - t0
    stop_job([proc], job_id, grace_s=1.0)
    res = load_result(run_dir, proc.returncode, wall)
    if len(res.summaries) != cfg.world_size:
        raise JobFailed("crash", f"msrun exited {proc.returncode}; summaries from ranks {res.ranks} only",
                        0, log_tail(run_dir, 0, 40), str(run_dir))
    return res


def best_img_per_s(res, skip: int = SKIP_STEPS) -> float:
    """Global batch / the fastest steady step (slowest rank): less sensitive to other people's jobs."""
    step_s = res.metric("step_s")
    if step_s.shape[1] > skip:
        step_s = step_s[:, skip:]
    return float(res.config.global_batch / step_s.max(axis=0).min())


def run_record(res, skip: int = SKIP_STEPS) -> dict:
    """One run's figures: steady img/s (median step; best step), job wall time, load when it ended."""
    step_s = res.metric("step_s")
    return {"img_per_s": steady_img_per_s(res, skip), "best_img_per_s": best_img_per_s(res, skip),
            "median_step_s": float(np.median(step_s[:, skip:].max(axis=0))) if step_s.shape[1] > skip else None,
            "first_step_s": float(step_s[:, 0].max()), "wall_s": round(res.wall_s, 1),
            "load_avg_1min": round(os.getloadavg()[0], 2), "run_dir": str(res.run_dir)}


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
    vals = [r[key] for r in runs if r.get(key) is not None]
    return float(np.median(vals)) if vals else None


def medians(runs: dict[str, list[dict]], key: str = "img_per_s") -> dict[str, float | None]:
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
