"""Which GPU plugin MindSpore 2.10 loads on this host, decided the way its plugin loader decides (``CUDA_HOME``,
``$CUDA_HOME/bin/nvcc --version``, the wheel's ``libmindspore_gpu.so.<ver>`` files). Every external call is
injectable (environment, command runner).
"""

from __future__ import annotations

import os
import re

from helpers.preflight.machine_checks import Check
from helpers.preflight.shared_libs import mindspore_plugin_dir

# The loader: DeviceContextManager::LoadPlugin / SelectGpuPlugin in lib/libmindspore_hardware_abstract.so
# (runtime/hardware_abstract/device_context/device_context_manager.cc). Its strings, pinned by
# tests/contract/test_card_host.py:
HARDWARE_ABSTRACT = "lib/libmindspore_hardware_abstract.so"
CUDA_HOME_ENV = "CUDA_HOME"
CUDA_HOME_UNSET_LOG = "Please set env CUDA_HOME to path of cuda, if you want to enable gpu backend."
NVCC_REL = "/bin/nvcc"
NO_NVCC_LOG = "], can not find nvcc file ["
NVCC_KEY = "Cuda compilation tools, release "
NVCC_KEY_MISSING_LOG = "Cannot found nvcc version key words ["
NO_PLUGIN_LOG = ", but can not find suitable gpu plugin."
GPU_PLUGIN_STEM = "libmindspore_gpu"          # kGpuPluginName: plugin files are grouped by the name before the first '.'
NVCC_READ_BYTES = 999                         # kBufferSize: one read() of nvcc's stdout

CUDA_HOME_FIX = ("export CUDA_HOME=<a CUDA 11.x toolkit with bin/nvcc> (e.g. /usr/local/cuda-11.6 from NVIDIA's CUDA "
                 "11.6 installer or the distribution's CUDA 11 package; it may sit beside CUDA 12). MindSpore's loader "
                 "needs exactly an executable $CUDA_HOME/bin/nvcc whose `--version` output (its first 999 bytes) says "
                 f"'{NVCC_KEY}11.x,'; pip's nvidia-*-cu11 wheels give it none (nvidia-cuda-nvcc-cu11 ships ptxas only)")
_PIPE = dict(capture_output=True, text=True, timeout=30)


def wheel_gpu_plugin_files() -> list[str]:
    """The GPU plugin file names the installed wheel ships (``lib/plugin/libmindspore_gpu.*``), sorted."""
    return sorted(p.name for p in mindspore_plugin_dir().glob(f"{GPU_PLUGIN_STEM}.*"))


def nvcc_release(stdout: str) -> str | None:
    """The version MindSpore reads from ``nvcc --version``: the text between ``NVCC_KEY`` and the next comma in
    the first ``NVCC_READ_BYTES`` bytes (``GetCudaVersionFromNvcc``), or None where it finds none."""
    buffer = stdout.encode()[:NVCC_READ_BYTES].decode(errors="replace")
    pos = buffer.find(NVCC_KEY)
    if pos < 0:
        return None
    rest = buffer[pos + len(NVCC_KEY):]
    comma = rest.find(",")
    return rest[:comma] if comma >= 0 else None


def version_pair(text: str) -> tuple[int, int] | None:
    """``"11.6"`` -> (11, 6) as ``GetIntVersionFromVersionStr`` reads it (split at the first dot, leading digits
    of each side, like ``std::stoull``); None when it cannot."""
    major, dot, minor = text.partition(".")
    m1, m2 = re.match(r"\s*\+?(\d+)", major), re.match(r"\s*\+?(\d+)", minor)
    return (int(m1.group(1)), int(m2.group(1))) if dot and m1 and m2 else None


def plugin_version(file_name: str) -> tuple[int, int] | None:
    """The CUDA version in a plugin file name (``libmindspore_gpu.so.11.6`` -> (11, 6); ``GetVersionFromFileName``:
    the last two dot-separated parts, each with a digit)."""
    parts = file_name.split(".")
    if len(parts) < 3 or not any(c.isdigit() for c in parts[-1]) or not any(c.isdigit() for c in parts[-2]):
        return None
    return version_pair(f"{parts[-2]}.{parts[-1]}")


def version_float(pair: tuple[int, int]) -> float:
    """``VersionToFloat`` as compiled in the 2.10 wheel: major + minor / (digits of minor + 1), so 11.1 -> 11.5 and
    11.6 -> 14.0 (read from the disassembly: ``to_string(minor).size()`` + 1.0f divides the minor)."""
    major, minor = pair
    return major + minor / (len(str(minor)) + 1)


def plugin_label(file_name: str) -> str:
    """``libmindspore_gpu.so.11.6`` -> ``gpu11.6`` (its folder ``lib/plugin/gpu11.6`` holds its NCCL)."""
    pair = plugin_version(file_name)
    return f"gpu{pair[0]}.{pair[1]}" if pair else file_name


def choose_gpu_plugin(cuda_version: str, files: list[str]) -> tuple[str | None, str]:
    """``(file, why)`` of the plugin ``SelectGpuPlugin`` loads for an nvcc of ``cuda_version``: an exact major.minor
    match; else, scanning the plugins in name order, one of the same major whose ``version_float`` is below the
    target's while the next plugin's is above it (or it is the last). None when nothing qualifies."""
    files = sorted(files)                                      # a std::set<std::string> of the plugin paths
    if len(files) == 1:
        return files[0], "the wheel ships one GPU plugin: the loader takes it without comparing versions"
    target = version_pair(cuda_version)
    if target is None:
        return None, (f"MindSpore cannot read a version from {cuda_version!r} and raises "
                      "'Get version num from version string ... failed'")
    versions = [(f, v) for f in files if (v := plugin_version(f))]
    exact = [f for f, v in versions if v == target]
    if exact:
        return exact[-1], f"exact match for CUDA {target[0]}.{target[1]}"
    chosen = None
    for i, (f, v) in enumerate(versions):
        if v[0] != target[0]:
            continue
        after_next = i + 1 >= len(versions) or version_float(target) < version_float(versions[i + 1][1])
        if version_float(target) > version_float(v) and after_next:
            chosen = f
    shipped = ", ".join(plugin_label(f) for f in files) or "none"
    if chosen is None:
        return None, (f"no plugin matches CUDA {target[0]}.{target[1]}: the wheel ships {shipped}, and the loader "
                      f"takes only a plugin of the same CUDA major version not newer than nvcc's")
    return chosen, (f"no exact plugin for CUDA {target[0]}.{target[1]}: the loader takes the newest plugin of the "
                    f"same major version below it (the wheel ships {shipped})")


def cuda_home_checks(env=None, run=None, files=None) -> tuple[list[Check], str | None]:
    """``CUDA_HOME``, its ``bin/nvcc --version`` and the plugin MindSpore will pick from them; also returns the picked
    plugin's CUDA version (``"11.6"``) or None."""
    import subprocess

    env = os.environ if env is None else env
    run = run or subprocess.run
    files = wheel_gpu_plugin_files() if files is None else files
    shipped = ", ".join(plugin_label(f) for f in files) or "none"
    home = env.get(CUDA_HOME_ENV, "")
    if not home:
        return [Check(CUDA_HOME_ENV, f"not set: MindSpore skips its GPU plugins ({shipped}) and records no reason",
                      False, CUDA_HOME_FIX)], None
    nvcc = home + NVCC_REL
    if len(files) != 1 and not os.path.exists(nvcc):
        return [Check(CUDA_HOME_ENV, f"{home}: no {nvcc}", False, "MindSpore logs 'Invalid environment variable "
                      f"CUDA_HOME [{home}], can not find nvcc file' and loads no GPU plugin; {CUDA_HOME_FIX}")], None
    out = [Check(CUDA_HOME_ENV, home, True, f"MindSpore runs {nvcc} --version to choose its GPU plugin")]
    version = None
    if len(files) != 1:
        try:
            proc = run([nvcc, "--version"], **_PIPE)
            version = nvcc_release(proc.stdout)
            found = f"CUDA {version}" if version else f"no '{NVCC_KEY.strip()}' in its output (rc {proc.returncode})"
        except (OSError, subprocess.SubprocessError) as exc:
            found = f"cannot run: {exc}"
        out.append(Check("nvcc", f"{found} ({nvcc} --version)", version is not None,
                         "the version MindSpore reads" if version else
                         f"MindSpore logs '{NVCC_KEY_MISSING_LOG}...' and loads no GPU plugin; {CUDA_HOME_FIX}"))
        if version is None:
            return out, None
    chosen, why = choose_gpu_plugin(version or "", files)
    out.append(Check("GPU plugin choice", f"{plugin_label(chosen)} (lib/plugin/{chosen})" if chosen else "none",
                     chosen is not None, why if chosen else f"{why}. MindSpore logs 'Env CUDA_HOME is {home}"
                     f"{NO_PLUGIN_LOG}' and has no GPU; {CUDA_HOME_FIX}"))
    pair = plugin_version(chosen) if chosen else None
    return out, (f"{pair[0]}.{pair[1]}" if pair else None)
