"""Chapter 00's environment check: what is installed, what this machine can run, and what that means."""

from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Check:
    name: str
    value: str
    ok: bool
    note: str


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
    import mindspore as ms
    import numpy as np

    from helpers.launch import find_msrun

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


def available_devices() -> list[str]:
    return [t for t, ok in _devices().items() if ok]


# ------------------------------------------------------------------ GPU pre-flight (helpers.preflight)
CUDA11_PIP = ("pip install nvidia-cuda-runtime-cu11 nvidia-cublas-cu11 'nvidia-cudnn-cu11<9' nvidia-cufft-cu11 "
              "nvidia-curand-cu11 nvidia-cusolver-cu11 nvidia-cusparse-cu11 nvidia-cuda-nvrtc-cu11, then put their "
              "site-packages/nvidia/*/lib folders on LD_LIBRARY_PATH")
SMI_QUERY = ["nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total,memory.used,utilization.gpu,driver_version",
             "--format=csv,noheader,nounits"]


def _needed_sonames(path) -> list[str]:
    """The CUDA-family libraries an ELF file links (``readelf -d`` NEEDED entries, else its string table)."""
    import re
    import subprocess

    pattern = r"lib(?:cu[a-z]*|cudnn|nvrtc|nccl)\.so(?:\.[0-9]+)*"
    try:
        out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, timeout=30).stdout
        names = re.findall(r"NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    except (OSError, subprocess.SubprocessError):
        names = sorted({m.decode() for m in re.findall(pattern.encode(), open(path, "rb").read())})
    return sorted(n for n in names if re.fullmatch(pattern, n) and n != "libcuda_ops.so.11")


def wheel_gpu_plugins() -> dict[str, list[str]]:
    """``{CUDA version: libraries the host must provide}`` for each GPU plugin the installed wheel ships
    (``mindspore/lib/plugin/libmindspore_gpu.so.<ver>``; NCCL is bundled in ``plugin/gpu<ver>/``)."""
    import mindspore

    plugin = Path(mindspore.__file__).parent / "lib" / "plugin"
    return {p.name.split(".so.", 1)[1]: _needed_sonames(p) for p in sorted(plugin.glob("libmindspore_gpu.so.*"))}


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of ``SMI_QUERY``'s output as dicts (memory in MiB, utilisation in %)."""
    cards = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 7:
            continue
        idx, name, cap, total, used, util, driver = parts[:7]
        cards.append(dict(index=int(idx), name=name, compute_cap=cap, memory_total_mib=float(total),
                          memory_used_mib=float(used), utilization=float(util) if util.replace(".", "").isdigit() else 0.0,
                          driver=driver))
    return cards


def card_checks(cards: list[dict]) -> list[Check]:
    """One check per card: busy (another job's memory or compute on it) or free; its compute capability."""
    out = []
    for c in cards:
        busy = c["memory_used_mib"] > 0.05 * c["memory_total_mib"] or c["utilization"] > 10
        major = int(float(c["compute_cap"] or 0))
        note = ("in use by another process: a job here will share it (nvidia-smi shows who)" if busy else "free")
        if major >= 9:
            note += ("; compute capability >= 9.0 has no native kernels in a CUDA 11 build (the wheel's plugins "
                     "are CUDA 11.1/11.6): kernels must be JIT-compiled from PTX, expect a slow first step")
        out.append(Check(f"GPU {c['index']}", f"{c['name']}, sm {c['compute_cap']}, "
                         f"{c['memory_total_mib'] / 1024:.0f} GiB, {c['memory_used_mib']:.0f} MiB used, "
                         f"{c['utilization']:.0f}% busy", not busy, note))
    return out


def cuda_library_checks(plugins: dict[str, list[str]], find) -> list[Check]:
    """For the wheel's plugins: which of the libraries they link the host lacks (``find(soname)`` -> bool)."""
    out = []
    missing_by = {ver: [lib for lib in libs if not find(lib)] for ver, libs in plugins.items()}
    usable = [v for v, miss in missing_by.items() if not miss]
    if usable:
        out.append(Check("CUDA libraries", f"complete for the CUDA {', '.join(usable)} plugin", True,
                         "MindSpore can load its GPU plugin"))
    else:
        fewest = min(missing_by, key=lambda v: (len(missing_by[v]), -float(v))) if missing_by else "11.6"
        out.append(Check("CUDA libraries", f"missing for every plugin; for CUDA {fewest}: "
                         f"{', '.join(missing_by.get(fewest, []))}", False,
                         "the MindSpore 2.10 wheel's GPU plugins need CUDA 11 runtime libraries and cuDNN 8 "
                         "(a CUDA-12-only host has none of them; libcuda.so.1 comes with the NVIDIA driver): "
                         f"{CUDA11_PIP}"))
    return out


def _find_soname(soname: str) -> bool:
    """Whether the dynamic loader can open ``soname`` (the same search MindSpore's plugin loading does)."""
    import ctypes

    try:
        ctypes.CDLL(soname)
        return True
    except OSError:
        return False


def gpu_checks(run=None, find=_find_soname, plugins=None) -> list[Check]:
    """Driver and cards (nvidia-smi), the CUDA libraries the wheel's GPU plugins need, and whether MindSpore
    reports the GPU available. ``run``/``find``/``plugins`` are injectable for tests."""
    import subprocess

    run = run or (lambda cmd: subprocess.run(cmd, capture_output=True, text=True, timeout=30))
    try:
        proc = run(SMI_QUERY)
        cards = parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else []
        smi_error = "" if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()[:200]
    except (OSError, subprocess.SubprocessError) as exc:
        cards, smi_error = [], f"nvidia-smi not found ({type(exc).__name__})"
    out = []
    if not cards:
        out.append(Check("NVIDIA driver", smi_error or "no card listed", False,
                         "no NVIDIA driver / nvidia-smi: install the driver (one for CUDA >= 11.6) or run on a GPU host"))
    else:
        out.append(Check("NVIDIA driver", cards[0]["driver"], True, f"{len(cards)} card(s) listed by nvidia-smi"))
        out += card_checks(cards)
    out += cuda_library_checks(wheel_gpu_plugins() if plugins is None else plugins, find)
    return out


def card_memory_gib(run=None) -> float | None:
    """The smallest card's memory in GiB (nvidia-smi), or None where there is no card."""
    import subprocess

    run = run or (lambda cmd: subprocess.run(cmd, capture_output=True, text=True, timeout=30))
    try:
        proc = run(SMI_QUERY)
    except (OSError, subprocess.SubprocessError):
        return None
    cards = parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else []
    return min(c["memory_total_mib"] for c in cards) / 1024 if cards else None


if __name__ == "__main__":
    import sys

    from helpers.preflight import main

    sys.exit(main())
