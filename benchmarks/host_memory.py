"""Host memory per chapter and preset: the course run with every chapter's peak, against the budget (issue 35).

Runs ``python -m helpers.course run --preset <p> [--only ...]``, whose runner samples each notebook's kernel and
everything it starts (msrun, scheduler, ranks, subprocesses) as one footprint (``helpers.job.host_memory``), and
keeps per chapter its peak, the budget (``BUDGET_MB``: 6 GB ci, 10 GB cpu), each job's own peak and what
``run_job`` estimated for it before launch, plus the disk the run used (run folders, compile cache, data).
Writes ``benchmarks/results/host_memory.json`` (one entry per preset; chapters of other runs kept), and prints the
"what your machine needs" table of docs/presets.md from it with ``--table``.

    python -m benchmarks.host_memory --preset ci [--only 02]
    python -m benchmarks.host_memory --table
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._jobs import RESULTS, machine
from helpers.core.config import PRESETS
from helpers.core.paths import resolve
from helpers.job.host_memory import BUDGET_MB

PATH = RESULTS / "host_memory.json"


def jobs_since(runs_root: Path, since: float, preset: str) -> list[dict]:
    """Each job of ``preset``'s model whose run folder was written since ``since`` (another preset's jobs running
    meanwhile, e.g. a test's, are left out): chapter, name, ranks, peak and estimate (MB), disk, config."""
    out, model = [], {k: PRESETS[preset][k] for k in ("arch", "width", "stem")}
    for config in sorted(runs_root.glob("*/*/config.json")):
        if config.stat().st_mtime < since:
            continue
        folder, cfg = config.parent, json.loads(config.read_text())
        if any(cfg.get(k) != v for k, v in model.items()):
            continue
        mem = json.loads((folder / "host_memory.json").read_text()) if (folder / "host_memory.json").exists() else {}
        out.append(dict(chapter=folder.parent.name, name=cfg.get("name"), world_size=cfg.get("world_size"),
                        peak_host_mb=mem.get("peak_host_mb"), need_mb=mem.get("need_mb"),
                        run_dir_mb=round(du_mb(folder), 1), config=cfg))   # config: to re-estimate it later
    return out


def du_mb(folder: Path) -> float:
    """Bytes of every file under ``folder`` (MB)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2 ** 20


def chapter_entry(run: dict, jobs: list[dict], preset: str) -> dict:
    """One chapter: its peak (kernel and all it started), the budget, its jobs' peaks and estimates."""
    mine = [j for j in jobs if j["chapter"] == run["stem"][:2]]
    budget = BUDGET_MB.get(preset)
    return dict(peak_host_mb=run.get("peak_host_mb"), budget_mb=budget,
                within_budget=None if budget is None else run.get("peak_host_mb", 0) <= budget,
                ok=run["ok"], seconds=round(run["seconds"], 1), jobs=mine,
                run_dirs_mb=round(sum(j["run_dir_mb"] for j in mine), 1))


def measure(preset: str, only: list[str] | None, out: str) -> dict:
    """Run the course (or ``only`` its chapters) and return the preset's entry."""
    since = time.time()
    cmd = [sys.executable, "-m", "helpers.course", "run", "--preset", preset, "--out", out]
    proc = subprocess.run(cmd + (["--only", *only] if only else []), cwd=resolve("."))
    summary = resolve(out) / preset / "summary.json"
    return course_entry(preset, json.loads(summary.read_text()) if summary.exists() else [], since, proc.returncode)


def course_entry(preset: str, runs: list[dict], since: float, returncode: int) -> dict:
    """The preset's entry from a course run started at ``since`` (its summary's chapters; also course_time's run)."""
    jobs = jobs_since(resolve("runs"), since, preset)
    cache = resolve("runs/compile_cache")
    return dict(returncode=returncode, chapters={r["stem"]: chapter_entry(r, jobs, preset) for r in runs},
                compile_cache_mb=round(sum(du_mb(p) for p in cache.iterdir() if p.is_dir() and p.stat().st_mtime >= since),
                                       1) if cache.is_dir() else 0.0,   # this run's graphs, not earlier runs' left there
                data_mb=round(du_mb(resolve("data")), 1) if resolve("data").is_dir() else 0.0,
                cores=os.cpu_count(), machine=machine())


def store(preset: str, entry: dict) -> dict:
    """Merge ``entry`` into the stored results (chapters measured in other runs kept)."""
    data = json.loads(PATH.read_text()) if PATH.exists() else {"benchmark": "host_memory"}
    old = data.get(preset, {})
    data[preset] = {**old, **entry, "chapters": {**old.get("chapters", {}), **entry["chapters"]}}
    PATH.parent.mkdir(parents=True, exist_ok=True)
    PATH.write_text(json.dumps(data, indent=2) + "\n")
    return data


def table(data: dict) -> str:
    """docs/presets.md's "what your machine needs" table: per preset, the largest chapter peak, cores, disk."""
    rows = ["| preset | RAM: peak host memory (largest chapter) | budget | chapters measured | cores | disk: data + "
            "compile cache + run folders |", "| --- | --- | --- | --- | --- | --- |"]
    for preset in ("ci", "cpu"):
        e = data.get(preset)
        if not e:
            continue
        peaks = {k: c["peak_host_mb"] for k, c in e["chapters"].items() if c.get("peak_host_mb")}
        worst = max(peaks, key=peaks.get) if peaks else None
        runs = sum(c["run_dirs_mb"] for c in e["chapters"].values())
        disk = e.get("data_mb", 0) + e.get("compile_cache_mb", 0) + runs
        rows.append(f"| {preset} | {peaks[worst] / 1024:.1f} GB ({worst}) | {BUDGET_MB[preset] / 1024:.0f} GB | "
                    f"{', '.join(sorted(k[:2] for k in e['chapters']))} | {e.get('cores')} (all the measurement had) | "
                    f"{disk / 1024:.1f} GB |" if worst else f"| {preset} | — | | | | |")
    return "\n".join(rows)


def main(argv=None) -> dict:
    """Measure ``--preset`` (or only print the docs/presets.md table with ``--table``) and store the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="ci", choices=["ci", "cpu"])
    ap.add_argument("--only", nargs="*", help="chapter prefixes, e.g. 02")
    ap.add_argument("--out", default="runs/host_memory_bench")
    ap.add_argument("--table", action="store_true", help="only print the docs/presets.md table from the stored results")
    args = ap.parse_args(argv)
    if args.table:
        data = json.loads(PATH.read_text()) if PATH.exists() else {}
        print(table(data))
        return data
    data = store(args.preset, measure(args.preset, args.only, args.out))
    print(json.dumps(data[args.preset], indent=2))
    return data


if __name__ == "__main__":
    main()
