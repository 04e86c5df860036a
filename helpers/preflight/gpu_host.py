"""The GPU host before a GPU job: the driver and every card (nvidia-smi), ``CUDA_HOME`` and the GPU plugin MindSpore
will pick from it (``helpers.preflight.gpu_plugin_choice``), the CUDA runtime / cuDNN / NCCL / CUPTI files that plugin
loads in the loader's order (``helpers.preflight.cuda_libraries``), and whether MindSpore loaded its GPU plugin. Every
external call is injectable, so the tests run on canned outputs.
"""

from __future__ import annotations

import functools
import os
import re

from helpers.preflight.cuda_libraries import cuda_major, cupti_check, order_fix, plugin_search
from helpers.preflight.gpu_plugin_choice import (GPU_PLUGIN_STEM, cuda_home_checks, plugin_version,
                                                wheel_gpu_plugin_files)
from helpers.preflight.loader_search import Found, SearchOrder
from helpers.preflight.machine_checks import Check
from helpers.preflight.shared_libs import ldconfig_cache, mindspore_plugin_dir, needed_libraries

SMI_QUERY = ["nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total,memory.used,utilization.gpu,driver_version",
             "--format=csv,noheader,nounits"]
NO_DRIVER = "no NVIDIA driver (nvidia-smi not found)"
# https://docs.nvidia.com/cuda/hopper-compatibility-guide (1.2, 1.3.1): a cubin built for 8.x does not run on 9.0;
# an application built with CUDA <= 11.7 runs on Hopper only through the PTX of its kernels, JIT-compiled at load.
HOPPER_NOTE = ("compute capability >= 9.0 has no native kernels in a CUDA 11 build (the wheel's plugins are CUDA "
               "11.1/11.6; sm_90 needs CUDA >= 11.8): it runs only kernels shipped as PTX, JIT-compiled when loaded "
               "(a slow first step; a kernel without PTX fails), see docs.nvidia.com/cuda/hopper-compatibility-guide")
# The fix when the CUDA 11 runtime or cuDNN 8 the plugin links is missing: the same CUDA 11 toolkit CUDA_HOME needs.
CUDA11_TOOLKIT_FIX = ("the wheel's GPU plugins are built for CUDA 11 (11.1 / 11.6) and cuDNN 8, and MindSpore picks one "
                      "only through a CUDA 11 nvcc: install a CUDA 11.x toolkit (11.6 matches the gpu11.6 plugin) from "
                      "NVIDIA's installer or the distribution, beside CUDA 12 if need be, export CUDA_HOME=<that "
                      "toolkit> and LD_LIBRARY_PATH=$CUDA_HOME/lib64:$LD_LIBRARY_PATH, and put cuDNN 8 for CUDA 11 "
                      "(libcudnn.so.8, NVIDIA's cuDNN archive) in $CUDA_HOME/lib64")
_PIPE = dict(capture_output=True, text=True, timeout=30)
_CUDA_SONAME = r"lib(?:cuda|cudart|cublas|cublasLt|cufft|curand|cusolver|cusparse|nvrtc|cudnn[a-z_]*|nccl)\.so(?:\.[0-9]+)*"


def cuda_sonames(names) -> list[str]:
    """The CUDA-family names (driver, runtime, math libraries, cuDNN, NCCL) among ``names``, sorted."""
    return sorted(n for n in names if re.fullmatch(_CUDA_SONAME, n) and n != "libcuda_ops.so.11")


def wheel_gpu_plugins() -> dict[str, list[str]]:
    """``{CUDA version: libraries the host must provide}`` for each GPU plugin the installed wheel ships
    (``mindspore/lib/plugin/libmindspore_gpu.so.<ver>``, its ``DT_NEEDED`` CUDA/cuDNN entries; NCCL is not among
    them: ``plugin/gpu<ver>/libnvidia_collective.so`` links ``libnccl.so.2`` from the same folder, RPATH $ORIGIN)."""
    plugin = mindspore_plugin_dir()
    return {p.name.split(".so.", 1)[1]: cuda_sonames(needed_libraries(p))
            for p in sorted(plugin.glob(f"{GPU_PLUGIN_STEM}.so.*"))}


def wheel_bundled_nccl() -> dict[str, str]:
    """``{CUDA version: path}`` of the ``libnccl.so.2`` the wheel ships next to each GPU plugin."""
    return {d.name[3:]: str(d / "libnccl.so.2") for d in sorted(mindspore_plugin_dir().glob("gpu[0-9]*"))
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


def _family(soname: str) -> str:
    return ("cuDNN" if soname.startswith("libcudnn") else "NCCL" if soname.startswith("libnccl")
            else "CUDA driver" if soname.startswith("libcuda.so") else "CUDA runtime")


def _where(found: list[Found]) -> str:
    """``/usr/local/cuda-11.6/lib64 (LD_LIBRARY_PATH)``: the folders the files load from, with the search step."""
    return "; ".join(sorted({f"{f.folder} ({f.step})" for f in found}))


def cuda_library_checks(plugins: dict[str, list[str]], searches: dict[str, SearchOrder],
                        bundled_nccl: dict[str, str] | None = None, chosen: str | None = None, run=None) -> list[Check]:
    """CUDA runtime / cuDNN / NCCL (and the driver's libcuda.so.1): the file the loader opens for each library a GPU
    plugin links, looked up from that plugin (``searches[version]``: its RPATH first), and its CUDA major. Judged for
    the plugin MindSpore picks (``chosen``, a CUDA version), else for the one the host comes closest to serving
    (ties: the newer CUDA)."""
    if not plugins:
        return [Check("GPU plugin", "the installed wheel ships no GPU plugin", False,
                      "install a MindSpore 2.10 wheel built with GPU support")]
    found_by = {ver: {lib: searches[ver].find(lib) for lib in libs} for ver, libs in plugins.items()}
    missing_by = {ver: [lib for lib, f in found.items() if f.path is None] for ver, found in found_by.items()}
    best = chosen if chosen in plugins else min(missing_by, key=lambda v: (len(missing_by[v]), -float(v)))
    need, found, search, want = plugins[best], found_by[best], searches[best], int(best.split(".")[0])
    visible = search.visible()
    out = []
    for fam in ("CUDA driver", "CUDA runtime", "cuDNN"):
        libs = [lib for lib in need if _family(lib) == fam]
        if not libs:
            continue
        lacking = [lib for lib in libs if found[lib].path is None]
        wrong = []
        for lib in ([] if fam == "CUDA driver" or lacking else libs):
            major, how = cuda_major(found[lib].path, run)
            if major not in (None, want):
                wrong.append((found[lib], major, how))
        have = sorted(n for n in cuda_sonames(visible) if _family(n) == fam)
        if lacking:
            value = f"missing {', '.join(lacking)} (CUDA {best} plugin); host has {', '.join(have) or 'none'}"
            note = ("libcuda.so.1 comes with the NVIDIA driver: install the driver" if fam == "CUDA driver" else
                    CUDA11_TOOLKIT_FIX)
        elif wrong:
            f, major, how = wrong[0]
            value = (f"{f.name} loads from {f.path} (found on the {f.step}): CUDA {major}'s ({how}); the CUDA {best} "
                     f"plugin needs CUDA {want}'s")
            note = order_fix(f, search, want, "$CUDA_HOME/lib64")
        else:
            value = f"{', '.join(libs)} found (CUDA {best} plugin) in {_where([found[lib] for lib in libs])}"
            note = "what the wheel's GPU plugin links is there"
        out.append(Check(fam, value, not lacking and not wrong, note))
    nccl = (bundled_nccl or {}).get(best)
    host_nccl = sorted(n for n in cuda_sonames(visible) if n.startswith("libnccl"))
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


def driver_and_card_checks(run) -> list[Check]:
    """The NVIDIA driver and one check per card (nvidia-smi); one failing check without nvidia-smi."""
    import subprocess

    try:
        proc = run(SMI_QUERY, **_PIPE)
    except (OSError, subprocess.SubprocessError):
        return [Check("NVIDIA driver", NO_DRIVER, False,
                      "install the NVIDIA driver (nvidia-smi comes with it) or run on a GPU host")]
    cards = parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else []
    if not cards:
        err = (proc.stderr or proc.stdout or "").strip()[:200]
        return [Check("NVIDIA driver", f"nvidia-smi lists no card ({err or 'rc ' + str(proc.returncode)})", False,
                      "the driver does not see a card: check `nvidia-smi` by hand")]
    return [Check("NVIDIA driver", cards[0]["driver"], True, f"{len(cards)} card(s) listed by nvidia-smi"),
            *card_checks(cards)]


def gpu_status_check(ok: bool, why: str) -> Check:
    """MindSpore's own verdict on its GPU plugin, quoting its load error when it has one."""
    if ok:
        return Check("MindSpore GPU plugin", "loaded", True, "device_target='GPU' works")
    reason = (f"MindSpore's load error: {why}" if why else
              "MindSpore recorded no load error: its loader skips the GPU plugins when CUDA_HOME is empty or no "
              "plugin matches nvcc's CUDA version (see CUDA_HOME and GPU plugin choice above)")
    return Check("MindSpore GPU plugin", "not loaded", False, reason)


def gpu_checks(run=None, plugins=None, search_for=None, bundled_nccl=None, ms_gpu=None, env=None, load_library=None,
               plugin_files=None) -> list[Check]:
    """Driver and cards (nvidia-smi), CUDA_HOME / nvcc / the plugin MindSpore picks, the CUDA runtime / cuDNN / NCCL
    files that plugin loads (looked up in the loader's order from the plugin file), CUPTI, and whether MindSpore loaded
    its GPU plugin. Every input is injectable (tests): ``run`` is ``subprocess.run``, ``env`` ``os.environ``,
    ``load_library`` ``ctypes.CDLL``, ``plugin_files`` the wheel's GPU plugin file names, ``search_for(version)`` the
    loader's order from that plugin (:func:`helpers.preflight.cuda_libraries.plugin_search`); ``plugins`` /
    ``bundled_nccl`` / ``ms_gpu`` replace :func:`wheel_gpu_plugins` / :func:`wheel_bundled_nccl` /
    :func:`mindspore_gpu_status`."""
    import subprocess

    run = run or subprocess.run
    env = os.environ if env is None else env
    out = driver_and_card_checks(run)
    home, chosen = cuda_home_checks(env, run, plugin_files)
    out += home
    plugins = wheel_gpu_plugins() if plugins is None else plugins
    if search_for is None:
        cache = ldconfig_cache(run)
        search_for = functools.partial(plugin_search, env=env, run=run, cache=cache)
    searches = {ver: search_for(ver) for ver in plugins}
    out += cuda_library_checks(plugins, searches, wheel_bundled_nccl() if bundled_nccl is None else bundled_nccl,
                               chosen, run)
    majors = {v[0] for f in (plugin_files or wheel_gpu_plugin_files()) if (v := plugin_version(f))}
    cuda_major = int(chosen.split(".")[0]) if chosen else (majors.pop() if len(majors) == 1 else None)
    newest = chosen or max(plugins, key=lambda v: tuple(int(x) for x in v.split(".")), default=None)
    if newest is not None:
        out.append(cupti_check(searches.get(newest) or search_for(newest), cuda_major, load_library, run))
    out.append(gpu_status_check(*(mindspore_gpu_status() if ms_gpu is None else ms_gpu)))
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
