"""What a shared library links (its ELF ``DT_NEEDED`` entries) and what the host's dynamic loader can find.

Used by the GPU and Ascend host checks to set the libraries the wheel's plugins link against the host.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import struct
from pathlib import Path

_PIPE = dict(capture_output=True, text=True, timeout=30)


def parse_needed(readelf_text: str) -> list[str]:
    """``NEEDED`` entries of ``readelf -d`` output."""
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf_text)


def elf_needed(path) -> list[str]:
    """DT_NEEDED of a 64-bit little-endian ELF file, pure Python (when ``readelf`` is missing)."""
    return elf_dynamic_strings(path, 1)


def elf_dynamic_strings(path, wanted_tag: int) -> list[str]:
    """The string values of one tag of an ELF file's dynamic section (1: DT_NEEDED, 14: DT_SONAME, 15: DT_RPATH,
    29: DT_RUNPATH)."""
    with open(path, "rb") as f:
        if f.read(6) != b"\x7fELF\x02\x01":
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:     # a plugin is ~80 MB: read what is used
            return _dynamic_strings(data, wanted_tag)


def _dynamic_strings(data, wanted_tag: int) -> list[str]:
    """:func:`elf_dynamic_strings` of a 64-bit little-endian ELF image (bytes or a memory map)."""
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
        if tag == wanted_tag:                                         # an offset into the string table
            out.append(data[base + val:data.find(b"\0", base + val)].decode())
    return out


def needed_libraries(path, run=None) -> list[str]:
    """Every library an ELF file links (``readelf -d``, else the pure-Python reader)."""
    import subprocess

    run = run or subprocess.run
    try:
        proc = run(["readelf", "-d", str(path)], **_PIPE)
        if proc.returncode == 0:
            return parse_needed(proc.stdout)
    except (OSError, subprocess.SubprocessError):
        pass
    return elf_needed(path)


def soname(path, run=None) -> str | None:
    """An ELF file's DT_SONAME (``readelf -d``, else the pure-Python reader), or None."""
    import subprocess

    run = run or subprocess.run
    try:
        proc = run(["readelf", "-d", str(path)], **_PIPE)
        if proc.returncode == 0:
            found = re.findall(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", proc.stdout)
            return found[0] if found else None
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        names = elf_dynamic_strings(path, 14)
    except (OSError, ValueError):
        return None
    return names[0] if names else None


def parse_ldconfig(text: str) -> set[str]:
    """Library names in ``ldconfig -p`` output (``\tlibcudart.so.11.0 (libc6,x86-64) => /usr/...``)."""
    return set(parse_ldconfig_paths(text))


def parse_ldconfig_paths(text: str) -> dict[str, str]:
    """``{library name: path}`` of ``ldconfig -p`` output (the first entry of a name wins, as for the loader)."""
    out: dict[str, str] = {}
    for name, path in re.findall(r"^\s*(\S+\.so[.0-9]*)\s+\([^)]*\)\s*=>\s*(\S+)", text, flags=re.M):
        out.setdefault(name, path)
    return out


def loader_visible(run=None, ld_library_path: str | None = None) -> dict[str, str]:
    """``{library name: path}`` the dynamic loader can find: the ``LD_LIBRARY_PATH`` folders (searched first),
    then the ``ldconfig -p`` cache (a library's own RPATH/RUNPATH: ``helpers.preflight.loader_search``)."""
    found: dict[str, str] = {}
    path = os.environ.get("LD_LIBRARY_PATH", "") if ld_library_path is None else ld_library_path
    for folder in filter(None, path.split(":")):
        for name, where in folder_libraries(folder).items():
            found.setdefault(name, where)
    for name, where in ldconfig_cache(run).items():
        found.setdefault(name, where)
    return found


def folder_libraries(folder) -> dict[str, str]:
    """``{file name: path}`` of the shared libraries (``*.so*``) in one folder, sorted; empty when unreadable."""
    try:
        return {f.name: str(f) for f in sorted(Path(folder).iterdir()) if ".so" in f.name}
    except OSError:
        return {}


def ldconfig_cache(run=None) -> dict[str, str]:
    """``{library name: path}`` of the loader's cache (``ldconfig -p``); empty when ldconfig cannot run."""
    import subprocess

    run = run or subprocess.run
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        return parse_ldconfig_paths(run([ldconfig, "-p"], **_PIPE).stdout)
    except (OSError, subprocess.SubprocessError):
        return {}


def mindspore_plugin_dir() -> Path:
    """The installed wheel's ``mindspore/lib/plugin`` folder (found without importing MindSpore)."""
    import importlib.util

    return Path(importlib.util.find_spec("mindspore").origin).parent / "lib" / "plugin"
