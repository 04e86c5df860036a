"""The GPU host before a GPU job: the driver and every card (nvidia-smi), the CUDA runtime / cuDNN / NCCL libraries
the installed wheel's GPU plugins link against what the host's loader can find, and whether MindSpore loaded its
GPU plugin. Every external call is injectable, so the tests run on canned outputs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from helpers.job.machine_checks import Check

# The pip packages exist (checked in the package index list); cuDNN is pinned below 9: the plugins link libcudnn.so.8.
CUDA11_PIP = ("pip install nvidia-cuda-runtime-cu11 nvidia-cublas-cu11 'nvidia-cudnn-cu11<9' nvidia-cufft-cu11 "
              "nvidia-curand-cu11 nvidia-cusolver-cu11 nvidia-cusparse-cu11 nvidia-cuda-nvrtc-cu11, then put their "
              "site-packages/nvidia/*/lib folders on LD_LIBRARY_PATH")
SMI_QUERY = ["nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total,memory.used,utilization.gpu,driver_version",
             "--format=csv,noheader,nounits"]
NO_DRIVER = "no NVIDIA driver (nvidia-smi not found)"
# https://docs.nvidia.com/cuda/hopper-compatibility-guide (1.2, 1.3.1): a cubin built for 8.x does not run on 9.0;
# an application built with CUDA <= 11.7 runs on Hopper only through the PTX of its kernels, JIT-compiled at load.
HOPPER_NOTE = ("compute capability >= 9.0 has no native kernels in a CUDA 11 build (the wheel's plugins are CUDA "
               "11.1/11.6; sm_90 needs CUDA >= 11.8): it runs only kernels shipped as PTX, JIT-compiled when loaded "
               "(a slow first step; a kernel without PTX fails), see docs.nvidia.com/cuda/hopper-compatibility-guide")
_PIPE = dict(capture_output=True, text=True, timeout=30)
_CUDA_SONAME = r"lib(?:cuda|cudart|cublas|cublasLt|cufft|curand|cusolver|cusparse|nvrtc|cudnn[a-z_]*|nccl)\.so(?:\.[0-9]+)*"


def parse_needed(readelf_text: str) -> list[str]:
    """``NEEDED`` entries of ``readelf -d`` output."""
    import re

    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf_text)


def _elf_needed(path) -> list[str]:
    """DT_NEEDED of a 64-bit little-endian ELF file, pure Python (when ``readelf`` is missing)."""
    import struct

    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _f, p_off, p_vaddr, _pa, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_off, p_filesz))
        elif p_type == 2:
            dynamic = (p_off, p_filesz)
    if dynamic is None:
        return []
    entries = [struct.unpack_from("<qQ", data, dynamic[0] + k) for k in range(0, dynamic[1], 16)]
    strtab = next(v for t, v in entries if t == 5)                  # DT_STRTAB (a virtual address)
    base = next(off + strtab - va for va, off, size in loads if va <= strtab < va + size)
    out = []
    for tag, val in entries:
        if tag == 0:
            break
        if tag == 1:                                                  # DT_NEEDED: offset into the string table
            out.append(data[base + val:data.index(b"\0", base + val)].decode())
    return out


def _needed_sonames(path) -> list[str]:
    """The CUDA-family libraries an ELF file links (``readelf -d``, else the pure-Python reader)."""
    import re
    import subprocess

    try:
        names = parse_needed(subprocess.run(["readelf", "-d", str(path)], **_PIPE).stdout)
    except (OSError, subprocess.SubprocessError):
        names = _elf_needed(path)
    return sorted(n for n in names if re.fullmatch(_CUDA_SONAME, n) and n != "libcuda_ops.so.11")


def _plugin_dir() -> Path:
    import importlib.util

    return Path(importlib.util.find_spec("mindspore").origin).parent / "lib" / "plugin"


def wheel_gpu_plugins() -> dict[str, list[str]]:
    """``{CUDA version: libraries the host must provide}`` for each GPU plugin the installed wheel ships
    (``mindspore/lib/plugin/libmindspore_gpu.so.<ver>``, its ``DT_NEEDED`` CUDA/cuDNN entries; NCCL is not among
    them: ``plugin/gpu<ver>/libnvidia_collective.so`` links ``libnccl.so.2`` from the same folder, RPATH $ORIGIN)."""
    plugin = _plugin_dir()
    return {p.name.split(".so.", 1)[1]: _needed_sonames(p) for p in sorted(plugin.glob("libmindspore_gpu.so.*"))}


def wheel_bundled_nccl() -> dict[str, str]:
    """``{CUDA version: path}`` of the ``libnccl.so.2`` the wheel ships next to each GPU plugin."""
    return {d.name[3:]: str(d / "libnccl.so.2") for d in sorted(_plugin_dir().glob("gpu[0-9]*"))
            if (d / "libnccl.so.2").exists()}


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of ``SMI_QUERY``'s output as dicts (memory in MiB, utilisation in %)."""
    def num(x):
        try:
            return float(x)
        except ValueError:                 # "[N/A]", "[Not Supported]"
            return 0.0

    cards = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 7 or not parts[0].isdigit():
            continue
        idx, name, cap, total, used, util, driver = parts[:7]
        cards.append(dict(index=int(idx), name=name, compute_cap=cap, memory_total_mib=num(total),
                          memory_used_mib=num(used), utilization=num(util), driver=driver))
    return cards


def card_checks(cards: list[dict]) -> list[Check]:
    """One check per card: busy (another job's memory or compute on it) or free; its compute capability."""
    out = []
    for c in cards:
        busy = c["memory_used_mib"] > 0.05 * c["memory_total_mib"] or c["utilization"] > 10
        try:
            major = int(float(c["compute_cap"] or 0))
        except ValueError:
            major = 0
        note = ("in use by another process: a job here will share it (nvidia-smi shows who)" if busy else "free")
        if major >= 9:
            note += "; warning: " + HOPPER_NOTE
        out.append(Check(f"GPU {c['index']}", f"{c['name']}, sm {c['compute_cap']}, "
                         f"{c['memory_total_mib'] / 1024:.0f} GiB, {c['memory_used_mib']:.0f} MiB used, "
                         f"{c['utilization']:.0f}% busy", not busy, note))
    return out


def parse_ldconfig(text: str) -> set[str]:
    """Library names in ``ldconfig -p`` output (``\tlibcudart.so.11.0 (libc6,x86-64) => /usr/...``)."""
    import re

    return set(re.findall(r"^\s*(\S+\.so[.0-9]*)\s+\(", text, flags=re.M))


_FIND_STEMS = ("cuda", "cudart", "cublas", "cufft", "curand", "cusolver", "cusparse", "nvrtc", "cudnn", "nccl")


def host_libraries(run=None, find_library=None, ld_library_path: str | None = None) -> set[str]:
    """CUDA-family library names the dynamic loader can see: ``ldconfig -p``, the ``LD_LIBRARY_PATH`` folders and
    ``find_library`` (which returns one version per name, e.g. ``libcudart.so.12``)."""
    import ctypes.util
    import re
    import subprocess

    run = run or subprocess.run
    find_library = find_library or ctypes.util.find_library
    found: set[str] = set()
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        found |= parse_ldconfig(run([ldconfig, "-p"], **_PIPE).stdout)
    except (OSError, subprocess.SubprocessError):
        pass
    path = os.environ.get("LD_LIBRARY_PATH", "") if ld_library_path is None else ld_library_path
    for folder in filter(None, path.split(":")):
        try:
            found |= {f.name for f in Path(folder).iterdir() if ".so" in f.name}
        except OSError:
            pass
    for stem in _FIND_STEMS:
        try:
            name = find_library(stem)
        except Exception:  # noqa: BLE001 - find_library may shell out and fail
            name = None
        if name:
            found.add(name)
    return {n for n in found if re.fullmatch(_CUDA_SONAME, n)}


def _family(soname: str) -> str:
    return ("cuDNN" if soname.startswith("libcudnn") else "NCCL" if soname.startswith("libnccl")
            else "CUDA driver" if soname.startswith("libcuda.so") else "CUDA runtime")


def cuda_library_checks(plugins: dict[str, list[str]], host: set[str], bundled_nccl: dict[str, str] | None = None
                        ) -> list[Check]:
    """CUDA runtime / cuDNN / NCCL (and the driver's libcuda.so.1): what the host has against what the wheel's GPU
    plugins link. Judged for the plugin the host comes closest to serving (ties: the newer CUDA)."""
    if not plugins:
        return [Check("GPU plugin", "the installed wheel ships no GPU plugin", False,
                      "install a MindSpore 2.10 wheel built with GPU support")]
    missing_by = {ver: [lib for lib in libs if lib not in host] for ver, libs in plugins.items()}
    best = min(missing_by, key=lambda v: (len(missing_by[v]), -float(v)))
    need, miss = plugins[best], missing_by[best]
    out = []
    for fam in ("CUDA driver", "CUDA runtime", "cuDNN"):
        want = [lib for lib in need if _family(lib) == fam]
        if not want:
            continue
        lacking = [lib for lib in want if lib in miss]
        have = sorted(lib for lib in host if _family(lib) == fam)
        value = (f"{', '.join(want)} found (CUDA {best} plugin)" if not lacking else
                 f"missing {', '.join(lacking)}; host has {', '.join(have) or 'none'}")
        if not lacking:
            note = "what the wheel's GPU plugin links is there"
        elif fam == "CUDA driver":
            note = "libcuda.so.1 comes with the NVIDIA driver: install the driver"
        else:
            note = ("the MindSpore 2.10 wheel's GPU plugins are built for CUDA 11 (11.1 / 11.6) and cuDNN 8: a "
                    "CUDA-12-only host cannot load them. Install the CUDA 11.6 runtime and cuDNN 8 for CUDA 11 "
                    f"next to CUDA 12, e.g. {CUDA11_PIP}")
        out.append(Check(fam, value, not lacking, note))
    nccl = (bundled_nccl or {}).get(best)
    host_nccl = sorted(lib for lib in host if lib.startswith("libnccl"))
    out.append(Check("NCCL", f"bundled with the wheel ({nccl})" if nccl else
                     f"host: {', '.join(host_nccl) or 'none'}", bool(nccl or host_nccl),
                     "the wheel's collective library loads its own libnccl.so.2 (RPATH $ORIGIN); no host NCCL needed"
                     if nccl else "no libnccl.so.2 for the GPU plugin: 8-card jobs need NCCL 2 (pip nvidia-nccl-cu11)"))
    return out


def mindspore_gpu_status() -> tuple[bool, str]:
    """Whether MindSpore loaded its GPU plugin at import, and the loader's message when not (the same calls as
    ``mindspore.device_context.gpu.is_available``, without its warnings)."""
    import mindspore  # noqa: F401 - the plugins are loaded at import
    from mindspore._c_expression import MSContext

    ctx = MSContext.get_instance()
    if ctx.is_pkg_support_device("GPU"):
        return True, ""
    lines = [ln for ln in ctx.load_plugin_error().splitlines() if "gpu" in ln.lower()]
    return False, "; ".join(lines)


def gpu_checks(run=None, find_library=None, plugins=None, host=None, bundled_nccl=None, ms_gpu=None) -> list[Check]:
    """Driver and cards (nvidia-smi), the CUDA runtime / cuDNN / NCCL the wheel's GPU plugins need against what the
    host has, and whether MindSpore loaded its GPU plugin. Every input is injectable (tests): ``run`` is
    ``subprocess.run``, ``find_library`` is ``ctypes.util.find_library``, ``plugins`` / ``host`` / ``bundled_nccl`` /
    ``ms_gpu`` replace :func:`wheel_gpu_plugins` / :func:`host_libraries` / :func:`wheel_bundled_nccl` /
    :func:`mindspore_gpu_status`. Without nvidia-smi the answer is one failing check."""
    import subprocess

    run = run or subprocess.run
    try:
        proc = run(SMI_QUERY, **_PIPE)
    except (OSError, subprocess.SubprocessError):
        return [Check("NVIDIA driver", NO_DRIVER, False,
                      "install the NVIDIA driver (nvidia-smi comes with it) or run on a GPU host")]
    cards = parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else []
    out = []
    if not cards:
        err = (proc.stderr or proc.stdout or "").strip()[:200]
        out.append(Check("NVIDIA driver", f"nvidia-smi lists no card ({err or 'rc ' + str(proc.returncode)})", False,
                         "the driver does not see a card: check `nvidia-smi` by hand"))
    else:
        out.append(Check("NVIDIA driver", cards[0]["driver"], True, f"{len(cards)} card(s) listed by nvidia-smi"))
        out += card_checks(cards)
    if host is None:
        host = host_libraries(run, find_library)
    out += cuda_library_checks(wheel_gpu_plugins() if plugins is None else plugins, host,
                               wheel_bundled_nccl() if bundled_nccl is None else bundled_nccl)
    ok, why = mindspore_gpu_status() if ms_gpu is None else ms_gpu
    out.append(Check("MindSpore GPU plugin", "loaded" if ok else "not loaded", ok,
                     "device_target='GPU' works" if ok else
                     f"MindSpore could not load libmindspore_gpu.so ({why or 'see the CUDA checks above'})"))
    return out


def card_memory_gib(run=None) -> float | None:
    """The smallest card's memory in GiB (nvidia-smi), or None where there is no card."""
    import subprocess

    run = run or subprocess.run
    try:
        proc = run(SMI_QUERY, **_PIPE)
    except (OSError, subprocess.SubprocessError):
        return None
    cards = parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else []
    return min(c["memory_total_mib"] for c in cards) / 1024 if cards else None
