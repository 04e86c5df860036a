"""Run the whole course headless: every notebook in order with papermill, then HTML handouts and an index.

    python -m helpers.course run [--preset ci|cpu|gpu8] [--rehearse] [--out runs/course] [--only 00 01]

``--rehearse`` (gpu8 only) runs every chapter's gpu8 code paths on CPU at a small size (``helpers.core.rehearsal``).

Executed notebooks go to ``<out>/<stem>.ipynb``, HTML copies to ``<out>/<stem>.html``, each chapter's
recorded results to ``<out>/results/<stem>.json``, and ``<out>/index.html`` links them all with timings.
A failing chapter is kept (executed up to the error, HTML included) and the run goes on with the next.
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from helpers.core.paths import course_home, resolve

log = logging.getLogger("helpers.course")


@dataclass
class ChapterRun:
    """How one chapter's notebook ran: status, seconds, executed notebook, HTML page, results."""

    stem: str
    ok: bool
    seconds: float
    notebook: str
    html: str
    results: dict
    error: str = ""


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The chapter notebooks in order, or those whose names start with one of ``only``."""
    paths = sorted((course_home() / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if only:
        paths = [p for p in paths if any(p.name.startswith(o) for o in only)]
    return paths


def to_html(ipynb: Path) -> Path:
    """Write an executed notebook as HTML next to it; returns the page's path."""
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(ipynb, as_version=4))
    out = ipynb.with_suffix(".html")
    out.write_text(body, encoding="utf-8")
    return out


def run_chapter(path: Path, preset: str, out: Path, extra: dict | None = None) -> ChapterRun:
    """Execute one notebook with papermill; a failure is recorded in the result, not raised."""
    import papermill as pm

    stem = path.stem
    executed = out / f"{stem}.ipynb"
    results_path = out / "results" / f"{stem}.json"
    results_path.unlink(missing_ok=True)
    t0 = time.monotonic()
    error = ""
    try:
        pm.execute_notebook(str(path), str(executed), cwd=str(path.parent), log_output=True,
                            progress_bar=False, parameters=dict(preset=preset, results_path=str(results_path),
                                                                **(extra or {})))
    except Exception as exc:  # noqa: BLE001 - recorded on the index page, the run goes on
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    seconds = time.monotonic() - t0
    page = to_html(executed) if executed.exists() else None
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    return ChapterRun(stem, not error, seconds, str(executed), str(page or ""), results, error)


def write_index(runs: list[ChapterRun], out: Path, preset: str) -> Path:
    """Write ``index.html`` (per chapter: status, time, results) and ``summary.json``; returns the page."""
    rows = []
    for r in runs:
        status = "✅" if r.ok else f"❌ {html.escape(r.error)}"
        res = html.escape(json.dumps(r.results, indent=1)) if r.results else "(no results recorded)"
        link = f'<a href="{Path(r.html).name}">{r.stem}</a>' if r.html else r.stem
        rows.append(f"<tr><td>{link}</td><td>{status}</td><td>{r.seconds:.0f} s</td><td><pre>{res}</pre></td></tr>")
    page = f"""<!doctype html><meta charset="utf-8"><title>Distributed ResNet with MindSpore: course run</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{border:1px solid #ccc;padding:.4em;vertical-align:top}}
table{{border-collapse:collapse}} pre{{margin:0;font-size:80%}}</style>
<h1>Course run, preset <code>{preset}</code></h1>
<p>{time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} cores; total {sum(r.seconds for r in runs):.0f} s.</p>
<table><tr><th>chapter</th><th>status</th><th>time</th><th>recorded results</th></tr>{''.join(rows)}</table>"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    (out / "summary.json").write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return index


def run_course(preset: str = "cpu", out: str | Path = "runs/course", only: list[str] | None = None,
               rehearse: bool = False) -> list[ChapterRun]:
    """Run the chosen chapters in order under ``<out>/<preset>`` and write the index page."""
    out = resolve(out) / (f"{preset}-rehearsal" if rehearse else preset)
    (out / "results").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("COURSE_PROGRESS", "text")   # no widget front end under papermill
    extra = {}
    if rehearse:
        from helpers.core.rehearsal import ensure_fake_imagenet, rehearsal_overrides

        rehearsal_overrides(preset)                     # refuses a preset without a rehearsal before any work
        ensure_fake_imagenet()
        extra["rehearse"] = True
    chapters = notebooks(only)
    runs = []
    for i, path in enumerate(chapters, 1):
        print(f"[{i}/{len(chapters)}] {path.name} (preset {preset}{', rehearsal' if rehearse else ''}) ...", flush=True)
        run = run_chapter(path, preset, out, extra)
        runs.append(run)
        print(f"[{i}/{len(chapters)}] {path.name}: {'ok' if run.ok else 'FAILED: ' + run.error} "
              f"in {run.seconds:.0f} s -> {run.html}", flush=True)
    index = write_index(runs, out, preset)
    print(f"\nExecuted notebooks, HTML copies and results: {out}\nIndex page: {index}", flush=True)
    return runs


def main(argv=None) -> int:
    """The command line: ``run`` the course; returns 0 only if every chapter ran."""
    ap = argparse.ArgumentParser(prog="python -m helpers.course", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="execute every notebook in order")
    run.add_argument("--preset", default="cpu", choices=["ci", "cpu", "gpu8"])
    run.add_argument("--out", default="runs/course")
    run.add_argument("--only", nargs="*", help="chapter prefixes, e.g. 00 02")
    run.add_argument("--rehearse", action="store_true",
                     help="gpu8 only: run its code paths on CPU, 2 ranks, a generated ImageNet-layout tree")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="    %(message)s", stream=sys.stdout)
    logging.getLogger("papermill").setLevel(logging.INFO)
    runs = run_course(args.preset, args.out, args.only, args.rehearse)
    return 0 if runs and all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
