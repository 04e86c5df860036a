"""``benchmarks/RESULTS.md``: one markdown table of every measured goal, built from ``benchmarks/results/*.json``.

Pure functions (no jobs): the rows come from ``benchmarks.result_rows.goal_rows(results)``;
``render(rows, machine)`` writes the markdown; ``collect(dir)`` reads the JSONs. ``python -m benchmarks table``
rebuilds RESULTS.md from whatever JSONs are there.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

from benchmarks.result_rows import COURSE_GOALS_S, Row, get_in, goal_rows, judge

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RESULTS_MD = Path(__file__).resolve().parent / "RESULTS.md"


def _fmt(row: Row) -> str:
    if row.measured is None:
        return "—"
    v = row.measured
    text = f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return text + (" s" if row.unit == "s" else ("x" if row.unit == "x" else ""))


def render(rows: list[Row], machine: dict) -> str:
    """The markdown page: machine line, then one table row per goal (and informational rows)."""
    def cell(s):
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = ["# Benchmark results", "",
             f"Generated {machine['date_utc']} UTC by `python -m benchmarks table` from `benchmarks/results/*.json`, "
             f"on {machine['cores']} cores ({machine.get('cpu', '?')}), load average "
             f"{' / '.join(f'{x:.2f}' for x in machine['load_avg_1_5_15'])} (1/5/15 min) when the table was built.",
             "The machine is shared: absolute speeds are noise, the ratios come from runs alternated within one "
             "benchmark run. 'load' is the 1-minute load average during the runs (lowest-highest) or when the JSON was written.", "",
             "| what | measured | goal | status | load | source | note |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        status = judge(row.measured, row.goal) or "(info)"
        load = "" if row.load is None else (row.load if isinstance(row.load, str) else f"{row.load:.1f}")
        lines.append("| " + " | ".join(cell(x) for x in (row.what, _fmt(row), row.goal or "—", status, load,
                                                            row.source, row.note)) + " |")
    return "\n".join(lines) + "\n"


def measured_on(results: dict[str, dict]) -> str:
    """Markdown paragraph: which CPU each result file was measured on (the session's machine can change, and
    CPU-bound ratios and kernel choices change with it); files that did not record it are listed as such."""
    by_cpu: dict[str, list[str]] = {}
    for name, d in sorted(results.items()):
        subs = [(name, d)] if "machine" in d or name != "course_time" else \
            [(f"{name} ({p})", v) for p, v in d.items() if isinstance(v, dict)]
        for label, v in subs:
            cpu = get_in(v, "machine", "cpu") or "not recorded"
            by_cpu.setdefault(cpu, []).append(label)
    if not by_cpu:
        return ""
    parts = [f"**{cpu}**: {', '.join(names)}" for cpu, names in sorted(by_cpu.items())]
    return "\nMeasured on: " + "; ".join(parts) + ".\n"


def course_timings(course_time: dict | None) -> str:
    """Markdown section: wall time of each chapter per preset, and how many jobs it launched and how long
    their launches took (from ``course_time.json``); '' when no preset was timed."""
    presets = [p for p in COURSE_GOALS_S if isinstance((course_time or {}).get(p), dict)]
    if not presets:
        return ""
    stems = sorted({stem for p in presets for stem in course_time[p].get("chapters", {})})

    def cell(p, stem):
        ch = course_time[p].get("chapters", {}).get(stem)
        if not ch:
            return "not run"
        jobs = get_in(course_time[p], "jobs", "chapters", stem.split("_")[0])
        n = jobs["jobs"] if jobs else 0
        extra = f" ({n} job{'' if n == 1 else 's'}, launches {jobs['launch_s']:.0f} s)" if jobs else ""
        return f"{ch['seconds'] / 60:.1f} min{extra}" + ("" if ch.get("ok") else " FAILED")

    lines = ["", "## Course wall time per chapter", "",
             "`python -m benchmarks course_time --preset <p>`: each notebook run headless by `python -m helpers.course run`; "
             "in brackets the jobs the chapter launched and their seconds from msrun start to the last rank through `init()`.", "",
             "| chapter | " + " | ".join(f"`{p}` ({get_in(course_time[p], 'machine', 'date_utc') or '?'})" for p in presets) + " |",
             "| --- | " + " | ".join("---" for _ in presets) + " |"]
    lines += [f"| `{stem}` | " + " | ".join(cell(p, stem) for p in presets) + " |" for stem in stems]
    lines.append("| **total** | " + " | ".join(f"**{course_time[p]['total_s'] / 60:.1f} min**" for p in presets) + " |")
    return "\n".join(lines) + "\n"


def course_seconds(course_time: dict | None, preset: str = "ci") -> str:
    """Markdown section: where one preset's course seconds went, per chapter: its jobs' launches, first steps
    (compilation), other steps and evaluation, exits, and the time outside jobs (kernel, cells, plots)."""
    entry = (course_time or {}).get(preset)
    if not isinstance(entry, dict) or not get_in(entry, "jobs", "chapters"):
        return ""
    cols = ("launch_s", "first_step_s", "rest_s", "exit_s")
    lines = ["", f"## Where the `{preset}` course's seconds go", "",
             "Seconds per chapter from the same run (`course_time.json`, `benchmarks.job_phases`): a job's launch is "
             "msrun start to the last rank through `init()`; outside jobs is the chapter's wall time minus its jobs'.",
             "", "| chapter | wall | jobs | launches | first steps | other steps, evaluation | exits | outside jobs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    sums = dict.fromkeys(("wall", "jobs", *cols, "outside"), 0.0)
    for stem, ch in sorted(entry.get("chapters", {}).items()):
        j = get_in(entry, "jobs", "chapters", stem.split("_")[0]) or dict.fromkeys(("jobs", "total_s", *cols), 0)
        row = {"wall": ch["seconds"], "jobs": j["jobs"], **{c: j[c] for c in cols},
               "outside": ch["seconds"] - j["total_s"]}
        sums = {k: sums[k] + row[k] for k in sums}
        lines.append(f"| `{stem}` | " + " | ".join(f"{row[k]:.0f}" for k in sums) + " |")
    lines.append("| **total** | " + " | ".join(f"**{sums[k]:.0f}**" for k in sums) + " |")
    return "\n".join(lines) + "\n"


def collect(results_dir: str | Path = RESULTS_DIR) -> dict[str, dict]:
    """Every readable ``results/*.json`` by name (files that do not parse are skipped)."""
    out = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
    return out


def current_machine() -> dict:
    """Cores, CPU name, load average and UTC time of the machine building the table."""
    from helpers.train.conv_autoselect import cpu_name

    return {"cores": os.cpu_count(), "cpu": cpu_name(), "load_avg_1_5_15": list(os.getloadavg()),
            "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M")}


def write_results_md(results_dir: str | Path = RESULTS_DIR, path: str | Path = RESULTS_MD) -> str:
    """Rebuild RESULTS.md from the result JSONs; returns its text."""
    results = collect(results_dir)
    text = (render(goal_rows(results), current_machine()) + measured_on(results)
            + course_timings(results.get("course_time")) + course_seconds(results.get("course_time")))
    Path(path).write_text(text)
    return text
