"""Run the whole course headless: every notebook in order with papermill, then HTML handouts, an index and a website.

    python -m helpers.course run [--preset ci|cpu|gpu8] [--rehearse] [--out runs/course] [--only 00 01]
        [--device-target CPU|GPU|Ascend] [--data-dir DIR] [--world-size N] [--global-batch N] [--arch A] [--steps N]
        [--launcher local|slurm] [--slurm JSON]
    python -m helpers.course site [--preset ci|cpu|gpu8] [--out runs/course] [--run DIR]     (the website, again)

``--rehearse`` (gpu8 only) runs every chapter's gpu8 code paths on CPU at a small size (``helpers.core.rehearsal``)
for the card ``--device-target`` names; ``--launcher``/``--slurm`` (``COURSE_LAUNCHER``, ``COURSE_SLURM``) reach every
job; each other option goes to every notebook that declares it. The notebooks are the code checkout's, whatever
``$COURSE_HOME`` says. Under ``<out>/<preset>[-<target>][-rehearsal]``: executed ``<stem>.ipynb``, ``<stem>.html``,
``results/<stem>.json``, ``index.html``, ``summary.json``, ``site/`` (the website). A failed chapter stops no other.
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from helpers.core.config import ARCH_NAMES, DEVICE_TARGETS
from helpers.core.errors import CourseError, DataError
from helpers.core.paths import notebooks_dir, resolve
from helpers.core.slurm_settings import LAUNCHER_ENV, LAUNCHERS, SLURM_ENV, launcher_defaults
from helpers.output.site import build_site, claims_line, handout_links

log = logging.getLogger("helpers.course")
CHAPTER_PATTERN = "[0-9][0-9]_*.ipynb"
# parameters-cell overrides the command line passes on: (name, type); each goes to the notebooks that declare it
OVERRIDES = (("device_target", str), ("data_dir", str), ("world_size", int), ("global_batch", int), ("arch", str),
             ("steps", int))


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
    parameters: dict = field(default_factory=dict)     # what papermill passed the notebook
    peak_host_mb: float = 0.0     # the kernel and everything it started, at their largest (helpers.core.footprint)


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The chapter notebooks in order, or those whose names start with one of ``only``; a DataError naming the
    folder and the pattern when there is none."""
    folder = notebooks_dir()
    paths = sorted(folder.glob(CHAPTER_PATTERN))
    if only:
        paths = [p for p in paths if any(p.name.startswith(o) for o in only)]
    if not paths:
        there = ", ".join(p.stem for p in sorted(folder.glob(CHAPTER_PATTERN))) or "none"
        asked = f" starting with {' or '.join(only)}" if only else ""
        raise DataError(f"no chapter notebook{asked} in {folder} (pattern {CHAPTER_PATTERN}; chapters there: {there})")
    return paths


def chapter_parameters(path: Path, preset: str, results_path: Path, extra: dict | None = None) -> dict:
    """What papermill passes one notebook: ``preset``, ``results_path`` and each of ``extra`` (not None) that its
    parameters cell declares; the others are left out with a note (papermill would only warn about them)."""
    import papermill as pm

    declared = pm.inspect_notebook(str(path))
    params = dict(preset=preset, results_path=str(results_path))
    for name, value in (extra or {}).items():
        if value is None:
            continue
        if name in declared:
            params[name] = value
        else:
            log.warning("%s: its parameters cell has no %s, not passed (%s=%r)", path.stem, name, name, value)
    return params


def to_html(ipynb: Path) -> Path:
    """Write an executed notebook as HTML next to it; returns the page's path."""
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(ipynb, as_version=4))
    out = ipynb.with_suffix(".html")
    out.write_text(handout_links(body), encoding="utf-8")     # links to docs/ lead to the run's website
    return out


WARNING_LINE = re.compile(r"\b\w*Warning: |^\s*\[?WARNING\]?[\s:]")   # Python's warnings, logging's and MindSpore's


def warning_lines(ipynb) -> list[str]:
    """The lines of an executed notebook's stderr outputs that are warnings: a reader should see none."""
    nb = json.loads(Path(ipynb).read_text(encoding="utf-8"))
    return [line for cell in nb["cells"] for out in cell.get("outputs", [])
            if out.get("output_type") == "stream" and out.get("name") == "stderr"
            for line in "".join(out.get("text", "")).splitlines() if WARNING_LINE.search(line)]


def failure_line(exc: BaseException) -> str:
    """One line for the index page: the cell's own error (papermill's ``ename: evalue``, first line) rather than the
    exception text's last line, which for a failed job is the tail of a rank's log."""
    name, value = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if name and value is not None:
        return f"{name}: {str(value).strip().splitlines()[0] if str(value).strip() else ''}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[-1] if text else ''}"


def run_chapter(path: Path, preset: str, out: Path, extra: dict | None = None) -> ChapterRun:
    """Execute one notebook with papermill; a failure is recorded in the result, not raised."""
    import papermill as pm
    import psutil

    from helpers.core.footprint import sampling

    stem = path.stem
    executed = out / f"{stem}.ipynb"
    results_path = out / "results" / f"{stem}.json"
    results_path.unlink(missing_ok=True)
    params = chapter_parameters(path, preset, results_path, extra)
    t0 = time.monotonic()
    error = ""
    try:
        with sampling(lambda: [c.pid for c in psutil.Process().children()]) as host:   # the kernel's tree
            pm.execute_notebook(str(path), str(executed), cwd=str(path.parent), log_output=True,
                                progress_bar=False, parameters=params)
    except Exception as exc:  # noqa: BLE001 - recorded on the index page, the run goes on
        error = failure_line(exc)
    seconds = time.monotonic() - t0
    page = to_html(executed) if executed.exists() else None
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    return ChapterRun(stem, not error, seconds, str(executed), str(page or ""), results, error, params,
                      round(host.peak_mb, 1))


def write_index(runs: list[ChapterRun], out: Path, preset: str, extra: dict | None = None,
                site: Path | None = None) -> Path:
    """Write ``index.html`` (the options; per chapter: status, time, memory, a link to its results JSON; the
    website when built) and ``summary.json``; returns the page."""
    rows = []
    for r in runs:
        status = '<b class="ok">✓ ok</b>' if r.ok else f'<b class="failed">✗ failed</b>: {html.escape(r.error)}'
        res = (f'<a href="results/{r.stem}.json">results/{r.stem}.json</a>{html.escape(claims_line(r.results))}'
               if r.results else "(no results recorded)")
        link = f'<a href="{Path(r.html).name}">{r.stem}</a>' if r.html else r.stem
        rows.append(f"<tr><td>{link}</td><td>{status}</td><td>{r.seconds:.0f} s</td><td>{r.peak_host_mb:.0f} MB</td>"
                    f"<td>{res}</td></tr>")
    website = (f'<p>The course as a website: <a href="{site.relative_to(out).as_posix()}">'
               f'{site.relative_to(out).as_posix()}</a></p>' if site else "")
    page = f"""<!doctype html><meta charset="utf-8"><title>Distributed ResNet with MindSpore: course run</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{border:1px solid #ccc;padding:.4em;vertical-align:top}}
table{{border-collapse:collapse}} .ok{{color:#1a7f37}} .failed{{color:#cf222e}}</style>
<h1>Course run, preset <code>{preset}</code></h1>
<p>{html.escape(run_label(preset, extra))}</p>
<p>{time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} cores; total {sum(r.seconds for r in runs):.0f} s.</p>
{website}
<table><tr><th>chapter</th><th>status</th><th>time</th><th>peak host memory</th><th>recorded results</th></tr>
{''.join(rows)}</table>"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    (out / "summary.json").write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return index


def write_site(run_dir: Path) -> Path | None:
    """Build the course website of a run (``helpers.output.site``); None, with the reason logged, when it cannot."""
    try:
        built = build_site(run_dir)
    except Exception as exc:  # noqa: BLE001 - the executed notebooks and the index page stand without it
        log.warning("the course website was not built: %s: %s", type(exc).__name__, exc)
        return None
    for line in built.warnings + [f"link dropped: {d}" for d in built.dropped]:
        log.warning("site: %s", line)
    return built.index


def run_label(preset: str, extra: dict | None) -> str:
    """One line for the index page: the options passed to every chapter and, when rehearsed, the card it stands for."""
    extra = {k: v for k, v in (extra or {}).items() if v is not None}
    text = "options: " + (", ".join(f"{k}={v}" for k, v in extra.items()) or "the preset's")
    if extra.get("rehearse"):
        from helpers.core.config import PRESETS

        card = extra.get("device_target") or PRESETS[preset]["device_target"]
        text += f"; rehearsed on CPU, standing for {card}"
    return text


def run_course(preset: str = "cpu", out: str | Path = "runs/course", only: list[str] | None = None,
               rehearse: bool = False, overrides: dict | None = None) -> list[ChapterRun]:
    """Run the chosen chapters in order under ``<out>/<preset>[-<device_target>][-rehearsal]`` and write the index
    page; ``overrides`` (``OVERRIDES``: device_target, data_dir, ...) go to every notebook that declares them."""
    chapters = notebooks(only)                          # no chapter: a DataError naming the folder, before any work
    extra = {k: v for k, v in (overrides or {}).items() if v is not None}
    if rehearse:
        from helpers.core.rehearsal import rehearsal_overrides, rehearsal_target

        rehearsal_overrides(preset)                     # refuses a preset without a rehearsal before any work
        if extra.get("device_target"):
            rehearsal_target(extra["device_target"])    # the card it stands for: GPU or Ascend
        extra["rehearse"] = True
    target = f"-{extra['device_target']}" if extra.get("device_target") else ""
    out = resolve(out) / f"{preset}{target}{'-rehearsal' if rehearse else ''}"
    (out / "results").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("COURSE_PROGRESS", "text")   # no widget front end under papermill
    runs = []
    for i, path in enumerate(chapters, 1):
        print(f"[{i}/{len(chapters)}] {path.name} (preset {preset}, {run_label(preset, extra)}) ...", flush=True)
        run = run_chapter(path, preset, out, extra)
        runs.append(run)
        print(f"[{i}/{len(chapters)}] {path.name}: {'ok' if run.ok else 'FAILED: ' + run.error} "
              f"in {run.seconds:.0f} s, peak host memory {run.peak_host_mb:.0f} MB -> {run.html}", flush=True)
    write_index(runs, out, preset, extra)           # summary.json first: the website's run page reads it
    site = write_site(out) if any(Path(r.notebook).is_file() for r in runs) else None
    index = write_index(runs, out, preset, extra, site)
    print(f"\nExecuted notebooks, HTML copies and results: {out}\nIndex page: {index}"
          + (f"\nThe course as a website: {site}" if site else ""), flush=True)
    return runs


def _absolute(path: str) -> str:
    """A folder typed on the command line, from the shell's working directory (a notebook would take a relative
    path from the course home)."""
    return str(Path(path).expanduser().absolute())


def parser() -> argparse.ArgumentParser:
    """The command line's options (``OVERRIDES`` spelled with dashes)."""
    ap = argparse.ArgumentParser(prog="python -m helpers.course", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="execute every notebook in order")
    run.add_argument("--preset", default="cpu", choices=["ci", "cpu", "gpu8"])
    run.add_argument("--out", default="runs/course")
    run.add_argument("--only", nargs="*", help="chapter prefixes, e.g. 00 02")
    run.add_argument("--rehearse", action="store_true",
                     help="gpu8 only: run its code paths on CPU, 2 ranks, a generated ImageNet-layout tree")
    helps = {"device_target": "the cards to run on (with --rehearse: the card the CPU rehearsal stands for)",
             "data_dir": "ImageNet layout: <dir>/train/<wnid>/*.JPEG and val/",
             "world_size": "ranks (cards)", "global_batch": "images per step over all ranks (not chapter 02)",
             "steps": "steps of each job (each chapter has its own default)"}
    for name, kind in OVERRIDES:
        choices = {"device_target": DEVICE_TARGETS, "arch": ARCH_NAMES}.get(name)
        run.add_argument("--" + name.replace("_", "-"), type=_absolute if name == "data_dir" else kind, default=None,
                         choices=choices, help=helps.get(name, "as the notebooks' parameter of that name"))
    run.add_argument("--launcher", choices=LAUNCHERS, default=None,
                     help="what starts each job's ranks: local msrun (default) or a Slurm cluster (sbatch)")
    run.add_argument("--slurm", default=None, metavar="JSON",
                     help='Slurm settings, e.g. \'{"nodes": 2, "partition": "gpu", "gres": "gpu:4"}\'')
    site = sub.add_parser("site", help="build the course website from a course run's executed notebooks")
    site.add_argument("--preset", default="cpu", choices=["ci", "cpu", "gpu8"], help="the run under <out>/<preset>")
    site.add_argument("--out", default="runs/course")
    site.add_argument("--run", default=None, metavar="DIR", type=_absolute,
                      help="the course run's folder itself (e.g. runs/course/gpu8-Ascend-rehearsal)")
    return ap


def site_main(args) -> int:
    """``site``: build the website of one course run, print where it is and what Sphinx warned about."""
    run_dir = Path(args.run) if args.run else resolve(args.out) / args.preset
    built = build_site(run_dir)
    for line in built.warnings + [f"link dropped: {d}" for d in built.dropped]:
        print(f"    {line}")
    print(f"The course as a website ({len(built.chapters)} chapters, {built.seconds:.0f} s): {built.index}")
    return 0


def use_launcher(launcher: str | None, slurm: str | None) -> None:
    """Every notebook's jobs use this launcher: set for the kernels papermill starts (they inherit the environment)."""
    if launcher:
        os.environ[LAUNCHER_ENV] = launcher
    if slurm:
        os.environ[SLURM_ENV] = slurm
        launcher_defaults()                      # a ConfigError now rather than in the first chapter


def main(argv=None) -> int:
    """The command line: ``run`` the course (0 only if every chapter ran; 2: nothing could start) or build its
    ``site`` (2: no executed notebook there)."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="    %(message)s", stream=sys.stdout)
    logging.getLogger("papermill").setLevel(logging.INFO)
    try:
        if args.cmd == "site":
            return site_main(args)
        use_launcher(args.launcher, args.slurm)
        runs = run_course(args.preset, args.out, args.only, args.rehearse,
                          {name: getattr(args, name) for name, _ in OVERRIDES})
    except CourseError as e:
        print(f"python -m helpers.course {args.cmd}: {e}", file=sys.stderr)
        return 2
    return 0 if runs and all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
