"""Small shared-object files shaped like the wheel's plugins and a CUDA toolkit's libraries, for the loader tests:
written byte by byte (a 64-bit little-endian ELF with a dynamic section that ``readelf -d`` reads), or compiled with
gcc where a test needs the real loader to open them."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29


def write_elf(path, soname=None, needed=(), rpath=None, runpath=None) -> Path:
    """An x86-64 shared object with only a dynamic section: its SONAME, DT_NEEDED, DT_RPATH and DT_RUNPATH."""
    strtab, tags = b"\0", []
    for tag, value in [(DT_NEEDED, n) for n in needed] + [(DT_SONAME, soname), (DT_RPATH, rpath),
                                                          (DT_RUNPATH, runpath)]:
        if value is not None:
            tags.append((tag, len(strtab)))
            strtab += value.encode() + b"\0"
    str_off = 64 + 2 * 56
    dyn_off = (str_off + len(strtab) + 7) // 8 * 8
    entries = tags + [(DT_STRTAB, str_off), (DT_STRSZ, len(strtab)), (DT_NULL, 0)]
    dynamic = b"".join(struct.pack("<qQ", t, v) for t, v in entries)
    shstr = b"\0.dynstr\0.dynamic\0.shstrtab\0"
    shstr_off = dyn_off + len(dynamic)
    sh_off = (shstr_off + len(shstr) + 7) // 8 * 8
    size = sh_off + 4 * 64
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 64, sh_off, 0, 64, 56, 2, 64, 4, 3)
    phdrs = (struct.pack("<IIQQQQQQ", 1, 4, 0, 0, 0, size, size, 0x1000)                  # PT_LOAD, all of it
             + struct.pack("<IIQQQQQQ", 2, 6, dyn_off, dyn_off, dyn_off, len(dynamic), len(dynamic), 8))
    shdrs = (bytes(64)
             + struct.pack("<IIQQQQIIQQ", 1, 3, 2, str_off, str_off, len(strtab), 0, 0, 1, 0)          # .dynstr
             + struct.pack("<IIQQQQIIQQ", 9, 6, 3, dyn_off, dyn_off, len(dynamic), 1, 0, 8, 16)        # .dynamic
             + struct.pack("<IIQQQQIIQQ", 18, 3, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0))             # .shstrtab
    data = bytearray(size)
    for off, blob in ((0, header), (64, phdrs), (str_off, strtab), (dyn_off, dynamic), (shstr_off, shstr),
                      (sh_off, shdrs)):
        data[off:off + len(blob)] = blob
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))
    return path


def compile_so(path, source: str, *ld_flags: str) -> Path:
    """A real shared object compiled from C ``source`` with gcc (``ld_flags`` go to the linker: ``-soname,...``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.with_suffix(path.suffix + ".c")
    src.write_text(source)
    flags = [f"-Wl,{f}" for f in ld_flags]
    subprocess.run([shutil.which("gcc") or "gcc", "-shared", "-fPIC", *flags, "-o", str(path), str(src), "-ldl"],
                   check=True, capture_output=True, timeout=120)
    return path
