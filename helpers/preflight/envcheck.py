"""The pre-flight check on the command line: every check for running a preset here, PASS/FAIL, exit 1 on a failure.

    python -m helpers.preflight.envcheck --preset gpu8 --data-dir /data/imagenet [--device-target GPU|Ascend]
"""

from __future__ import annotations

import argparse
import sys
import time

from helpers.preflight.preflight import preflight


def report_line(c, width: int) -> str:
    """``PASS``/``WARN``/``FAIL``, name, value; the fix (or the warning) on the next line."""
    status = "FAIL" if not c.ok else "WARN" if c.warn else "PASS"
    extra = f"\n      fix: {c.note}" if not c.ok else f"\n      warning: {c.note}" if c.warn else ""
    return f"{status}  {c.name:<{width}}  {c.value}{extra}"


def main(argv=None) -> int:
    """Print the pre-flight report for the given preset; 1 when any check failed."""
    ap = argparse.ArgumentParser(prog="python -m helpers.preflight.envcheck", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpu8", choices=["ci", "cpu", "gpu8"])
    ap.add_argument("--data-dir", default=None, help="ImageNet layout: train/<wnid>/*.JPEG and val/")
    ap.add_argument("--device-target", default=None, choices=["CPU", "GPU", "Ascend"])
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--rehearse", action="store_true", help="gpu8 only: the CPU rehearsal's settings")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    checks = preflight(args.preset, args.data_dir, args.device_target, args.world_size, args.rehearse)
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(report_line(c, width))
    failed = [c for c in checks if not c.ok]
    warned = sum(c.ok and c.warn for c in checks)
    print(f"\n{len(checks) - len(failed)} passed ({warned} with a warning), {len(failed)} failed in "
          f"{time.monotonic() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
