"""Which file the dynamic loader opens for a name an ELF file links or ``dlopen``s, in glibc's order, so a check
names the library that really loads rather than the first one on ``LD_LIBRARY_PATH``.

The order, from dlopen(3) and ld.so(8) (man-pages 6.03, glibc 2.36 here): the calling object's DT_RPATH if it has
no DT_RUNPATH; ``LD_LIBRARY_PATH`` (as the program started); its DT_RUNPATH; ``/etc/ld.so.cache``; the default
folders. ``$ORIGIN`` in RPATH/RUNPATH is the calling object's folder. Left out: glibc also tries the RPATH of the
objects that loaded the caller (inside the wheel they are ``$ORIGIN`` folders) and reuses a library already loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from helpers.preflight.shared_libs import elf_dynamic_strings, folder_libraries, ldconfig_cache

DT_RPATH, DT_RUNPATH = 15, 29
# `/lib64/ld-linux-x86-64.so.2 --help` on Debian 12 ("system search path"), then ld.so(8)'s 64-bit defaults.
DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
RPATH, LD_LIBRARY_PATH, RUNPATH, CACHE, DEFAULT = ("RPATH", "LD_LIBRARY_PATH", "RUNPATH", "ld.so.cache",
                                                   "default folders")


@dataclass(frozen=True)
class Found:
    """Where ``name`` loads from: the file and the search step that found it (both None: no step finds it)."""

    name: str
    path: str | None = None
    step: str | None = None

    @property
    def folder(self) -> str | None:
        return str(Path(self.path).parent) if self.path else None


def expand_origin(entry: str, origin: str) -> str:
    """An RPATH/RUNPATH entry with ``$ORIGIN`` / ``${ORIGIN}`` replaced by the ELF file's folder."""
    return entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


def read_search_paths(elf) -> tuple[list[str], list[str]]:
    """An ELF file's DT_RPATH and DT_RUNPATH entries as written in it (``$ORIGIN`` not expanded)."""
    def entries(tag):
        return [e for value in elf_dynamic_strings(elf, tag) for e in value.split(":") if e]
    return entries(DT_RPATH), entries(DT_RUNPATH)


@dataclass(frozen=True)
class SearchOrder:
    """The folders the loader tries, in order, for a name that ``caller`` links or ``dlopen``s."""

    caller: str
    rpath: tuple[str, ...] = ()            # as written in the file (``$ORIGIN`` kept)
    runpath: tuple[str, ...] = ()
    ld_library_path: tuple[str, ...] = ()
    cache: dict = field(default_factory=dict)                   # ``ldconfig -p``: {name: path}
    default_dirs: tuple[str, ...] = DEFAULT_DIRS

    def expanded(self, entries) -> list[str]:
        return [expand_origin(e, str(Path(self.caller).parent)) for e in entries]

    def folders(self) -> list[tuple[str, str]]:
        """``(step, folder)`` in the loader's order, up to the cache (the RPATH counts only without a RUNPATH)."""
        rpath = [] if self.runpath else self.expanded(self.rpath)
        return ([(RPATH, d) for d in rpath] + [(LD_LIBRARY_PATH, d) for d in self.ld_library_path]
                + [(RUNPATH, d) for d in self.expanded(self.runpath)])

    def find(self, name: str) -> Found:
        """The file the loader opens for ``name`` (a name without a slash) and the step that finds it."""
        for step, folder in self.folders():
            if os.path.isfile(os.path.join(folder, name)):
                return Found(name, os.path.join(folder, name), step)
        if name in self.cache:
            return Found(name, self.cache[name], CACHE)
        for folder in self.default_dirs:
            if os.path.isfile(os.path.join(folder, name)):
                return Found(name, os.path.join(folder, name), DEFAULT)
        return Found(name)

    def visible(self) -> dict[str, str]:
        """``{name: path}`` of every library in the searched folders and the cache (the first of a name wins)."""
        out: dict[str, str] = {}
        for _step, folder in self.folders():
            for name, where in folder_libraries(folder).items():
                out.setdefault(name, where)
        for name, where in self.cache.items():
            out.setdefault(name, where)
        return out

    def rpath_without(self, folder: str) -> str:
        """The caller's RPATH as written, without the entry that expands to ``folder`` (for ``patchelf``)."""
        return ":".join(e for e, d in zip(self.rpath, self.expanded(self.rpath)) if d.rstrip("/") != folder)


def search_order(caller, env=None, run=None, cache: dict | None = None,
                 default_dirs: tuple[str, ...] = DEFAULT_DIRS) -> SearchOrder:
    """The loader's order for names ``caller`` links or ``dlopen``s: its RPATH / RUNPATH read from the file,
    ``env``'s ``LD_LIBRARY_PATH`` (``os.environ``), the ``ldconfig -p`` cache (``cache`` replaces it; ``run`` runs
    ldconfig), the default folders."""
    env = os.environ if env is None else env
    rpath, runpath = read_search_paths(caller)
    return SearchOrder(str(caller), tuple(rpath), tuple(runpath),
                       tuple(filter(None, env.get("LD_LIBRARY_PATH", "").split(":"))),
                       ldconfig_cache(run) if cache is None else cache, default_dirs)
