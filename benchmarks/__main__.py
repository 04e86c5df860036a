"""Run the benchmarks and rebuild ``benchmarks/RESULTS.md``.

    python -m benchmarks all --preset cpu        # every benchmark below (one 8-rank job at a time), then the table
    python -m benchmarks vs_model_train --preset ci --steps 10   # one benchmark; extra arguments pass through
    python -m benchmarks table                   # only rebuild RESULTS.md from benchmarks/results/*.json
    python -m benchmarks all --collect-only      # the same as `table`

Each benchmark prints its JSON and saves ``benchmarks/results/<name>.json``. ``--preset`` goes to the
benchmarks that take one; ``all`` leaves out ``course_time`` (it runs every notebook) unless ``--with-course`` and
``ci_time`` (``.ci/run`` on a clean clone) unless ``--with-ci``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import sys
import time

from benchmarks.table import RESULTS_DIR, write_results_md

# name -> takes --preset; in the order `all` runs them (cheap, single-process ones first)
BENCHMARKS = {
    "sampler": False, "conv_cpu": False, "launch_overhead": False, "startup": True, "sampler_phases": True,
    "shared_compile": True,
    "vs_pytorch": False, "conv_breakdown": False,
    "vs_model_train": True,
    "vs_mindcv": True,
    "scaling": True, "knobs": True, "comm_fusion": True, "time_split": True, "accumulation": False,
    "memory_levers": False, "bn_groups": False, "hybrid": True,
    "course_time": True, "ci_time": False,
}
SAVES_ITSELF = {"conv_breakdown", "vs_model_train", "vs_mindcv", "scaling", "knobs", "hybrid", "course_time", "startup", "vs_pytorch",
                "sampler_phases", "ci_time", "time_split", "shared_compile", "memory_levers", "bn_groups"}


def _json_from(text: str) -> dict:
    start = text.find("{")
    return json.loads(text[start:]) if start >= 0 else {}


def run_one(name: str, preset: str | None, extra: list[str]) -> dict:
    """Run one benchmark's ``main`` with ``extra`` arguments; save its JSON when it does not save itself."""
    mod = importlib.import_module(f"benchmarks.{name}")
    argv = list(extra)
    if preset and BENCHMARKS[name] and "--preset" not in argv:
        argv = ["--preset", preset, *argv]
    if name == "accumulation" and "--out" not in argv:
        argv += ["--out", str(RESULTS_DIR / "accumulation.json")]
    print(f"== {name} {' '.join(argv)}", file=sys.stderr, flush=True)
    if name == "sampler":   # its main() reads sys.argv and returns the dict
        saved, sys.argv = sys.argv, ["benchmarks.sampler", *argv]
        try:
            out = mod.main()
        finally:
            sys.argv = saved
        print(json.dumps(out, indent=2))
    elif name in SAVES_ITSELF or name == "accumulation":
        return mod.main(argv) or {}
    else:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            mod.main(argv)
        sys.stdout.write(buf.getvalue())
        out = _json_from(buf.getvalue())
    if out:   # which CPU and load it was measured under (RESULTS.md's "Measured on"), as save() records it
        from benchmarks._jobs import machine

        out.setdefault("machine", machine())
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def main(argv=None) -> int:
    """Run one benchmark or all, save each JSON, rebuild RESULTS.md; returns 1 if any benchmark failed."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=["all", "table", *BENCHMARKS])
    ap.add_argument("--preset", default=None, choices=["ci", "cpu"])
    ap.add_argument("--collect-only", action="store_true", help="only rebuild RESULTS.md from the JSONs")
    ap.add_argument("--with-course", action="store_true", help="`all` also times the whole course")
    ap.add_argument("--with-ci", action="store_true", help="`all` also times .ci/run on a clean clone")
    ap.add_argument("--skip", nargs="*", default=[], help="with `all`: benchmarks to leave out")
    args, extra = ap.parse_known_args(argv)
    failed = []
    if args.name != "table" and not args.collect_only:
        optional = {"course_time": args.with_course, "ci_time": args.with_ci}
        names = [n for n in BENCHMARKS if n not in args.skip and optional.get(n, True)] \
            if args.name == "all" else [args.name]
        for name in names:
            t0 = time.monotonic()
            try:
                run_one(name, args.preset, extra if args.name != "all" else [])
            except Exception as exc:  # noqa: BLE001 - `all` goes on; the failure is reported at the end
                failed.append(f"{name}: {type(exc).__name__}: {str(exc)[:500]}")
                print(f"== {name} FAILED: {exc}", file=sys.stderr, flush=True)
            print(f"== {name} took {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print(write_results_md(), end="")
    for f in failed:
        print(f"FAILED {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
