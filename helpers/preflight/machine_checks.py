"""What this machine has for the course: Python, MindSpore, numpy, cores, msrun, the devices MindSpore can use.

Every finding is a ``Check`` (name, what was found, ok, what it means or the fix); ``helpers.preflight.preflight``
adds the GPU host, data and memory checks.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """One line of the pre-flight report (``warn``: passes, but the note says what to watch)."""

    name: str
    value: str
    ok: bool
    note: str
    warn: bool = False


def _devices() -> dict[str, bool]:
    """Which device targets MindSpore can use here (CPU always; GPU/Ascend only with their runtime)."""
    import mindspore as ms

    found = {"CPU": True}
    for target in ("GPU", "Ascend"):
        try:
            found[target] = bool(ms.hal.is_available(target))
        except Exception:  # noqa: BLE001 - an absent backend may raise instead of returning False
            found[target] = False
    return found


def environment_checks() -> list[Check]:
    """Versions, cores, msrun and one check per device target (a missing GPU/Ascend is not a failure here)."""
    import mindspore as ms
    import numpy as np

    from helpers.job.msrun import find_msrun

    checks = [
        Check("python", platform.python_version(), sys.version_info[:2] == (3, 11),
              "MindSpore 2.10 wheels used here are built for Python 3.11"),
        Check("mindspore", ms.__version__, ms.__version__.startswith("2.10"),
              "the course's APIs and measurements are for 2.10"),
        Check("numpy", np.__version__, int(np.__version__.split(".")[0]) < 2,
              "numpy 2 breaks mindspore.dataset (np.array(x, copy=False)); keep numpy<2"),
        Check("cpu cores", str(os.cpu_count()), True,
              "8 CPU ranks share these cores; on few cores each rank gets one thread"),
    ]
    try:
        msrun = find_msrun()
        checks.append(Check("msrun", msrun, True, "starts the 8 worker processes (and a scheduler)"))
    except Exception as exc:  # noqa: BLE001
        checks.append(Check("msrun", "not found", False, str(exc)))
    devices = _devices()
    for target, ok in devices.items():
        checks.append(Check(f"device {target}", "available" if ok else "not available", ok or target != "CPU",
                            "CPU: 8 'cards' are 8 processes" if target == "CPU"
                            else f"use device_target='{target}' with the gpu8 preset" if ok
                            else "not on this machine: the gpu8 preset needs it"))
    checks.append(Check("ip (for 2-node demo)", shutil.which("ip") or "missing", True,
                        "network namespaces let one host play two nodes"))
    return checks
