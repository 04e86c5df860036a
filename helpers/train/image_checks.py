"""Corrupt or truncated images found before launch by their bytes (head and tail only), and set aside."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from helpers.train.image_folder import is_image_file
from helpers.core.errors import DataError
from helpers.core.paths import resolve

CHECK_VERSION = 1                    # bump when the rules change: every cached verdict is redone
CACHE_DIR = "runs/.cache/image_checks"   # used when the data folder is not writable
SET_ASIDE = "_set_aside"             # <data_dir>/_set_aside/<split>/<class>/<file>: outside every split
RACY_S = 2.0                         # folders changed this recently are checked but not cached
HEAD, TAIL = 16, 32
CHUNK = 512                          # files per task
PROBE, SLOW_S = 2048, 50e-6          # files timed first; slower than this per file: read on a thread pool
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"   # a PNG's last chunk: no data, so always the same CRC


@dataclass(frozen=True)
class BadImage:
    """One file the reader would fail on, and why."""

    path: Path
    reason: str


def verdict(head: bytes, tail: bytes, size: int) -> str | None:
    """Why these bytes are not a complete image (None: they look complete). The format is judged by the
    magic bytes, not the file name: ImageNet has a PNG named .JPEG, which the decoder reads fine."""
    if size == 0:
        return "empty file (0 bytes)"
    if head.startswith(b"\xff\xd8"):
        return None if b"\xff\xd9" in tail else "truncated JPEG (no end-of-image marker FF D9 at the end)"
    if head.startswith(PNG_SIGNATURE):
        return None if PNG_IEND in tail else "truncated PNG (no IEND chunk at the end)"
    if head.startswith(b"BM") and len(head) >= 6:
        declared = int.from_bytes(head[2:6], "little")
        return None if size >= declared else f"truncated BMP ({size} of the {declared} bytes its header declares)"
    return f"not a JPEG, PNG or BMP (starts with {head[:4].hex(' ')}, {size} bytes)"


def check_file(path: str, dir_fd: int | None = None) -> str | None:
    """``verdict`` for one file, reading only its first and last bytes (``path`` relative to ``dir_fd``)."""
    try:
        fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    try:
        head = os.read(fd, HEAD)
        size = os.lseek(fd, 0, os.SEEK_END)
        tail = os.pread(fd, TAIL, max(0, size - TAIL)) if size > HEAD else head
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    finally:
        os.close(fd)
    return verdict(head, tail, size)


def _list_folder(folder: str) -> tuple[dict, list[str]]:
    """(cache key: the folder's mtime and image count, the image names) of one class folder."""
    st = os.stat(folder)                   # before listing: a change during the pass makes the mtime newer
    with os.scandir(folder) as it:
        names = sorted(e.name for e in it if is_image_file(e.name) and e.is_file())
    return {"mtime_ns": st.st_mtime_ns, "count": len(names)}, names


def _check_names(folder: str, names: list[str]) -> list[list[str]]:
    """[name, reason] for each bad file of one folder (opened relative to the folder: a short path walk)."""
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return [[n, r] for n in names if (r := check_file(n, dir_fd=dfd))]
    finally:
        os.close(dfd)


def _check_all(chunks: list[tuple[str, str, list[str]]], threads: int | None) -> list[tuple[str, list]]:
    """(class, its bad [name, reason]s) per chunk (class, folder, names). Serial while files come fast (a
    warm page cache: the work is Python's, and threads only fight over the GIL); once the first PROBE files
    took more than SLOW_S each (a cold disk, a network file system), the rest go to a thread pool, whose
    reads overlap."""
    out, done, t0 = [], 0, time.perf_counter()
    for i, (c, folder, names) in enumerate(chunks):
        out.append((c, _check_names(folder, names)))
        done += len(names)
        rest = chunks[i + 1:]
        if rest and done >= PROBE and (time.perf_counter() - t0) / done > SLOW_S:
            workers = threads or min(64, (os.cpu_count() or 1) * 4)
            with ThreadPoolExecutor(max_workers=workers) as pool:
                out += zip([c for c, _, _ in rest], pool.map(lambda ch: _check_names(ch[1], ch[2]), rest))
            break
    return out


def cache_path(split_root: Path) -> Path:
    """Next to the data when that folder is writable (``<data_dir>/.image_checks.<split>.json``), else
    under the course's runs/ (one file per split, named by its absolute path)."""
    if os.access(split_root.parent, os.W_OK):
        return split_root.parent / f".image_checks.{split_root.name}.json"
    digest = hashlib.sha1(str(split_root).encode()).hexdigest()[:16]
    return resolve(CACHE_DIR) / f"{split_root.name}-{digest}.json"


def _load_cache(path: Path) -> dict:
    """The cached folders, or {} when the cache is missing, unreadable, corrupt or of another version."""
    try:
        data = json.loads(path.read_text())
        if data.get("version") == CHECK_VERSION and isinstance(data.get("folders"), dict):
            return data["folders"]
    except (OSError, ValueError, AttributeError):
        pass
    return {}


def _save_cache(path: Path, folders: dict) -> None:
    """Write atomically (temp file + os.replace): a reader sees the old cache or the new one, never half."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        os.fchmod(fd, 0o644)               # readable by everyone who reads the data
        with os.fdopen(fd, "w") as f:
            json.dump({"version": CHECK_VERSION, "folders": folders}, f)
        os.replace(tmp, path)
    except OSError:
        pass                               # a cache is an optimisation: never fail the check for it


def find_bad_images(split_root, cache: bool = True, threads: int | None = None) -> list[BadImage]:
    """Every image file of ``split_root/<class>/`` (the reader's filter) that is empty, truncated or not an
    image, in class then file order. Only head and tail bytes are read; a class folder whose mtime and image
    count match the cache is not read again."""
    root = Path(resolve(split_root))
    with os.scandir(root) as it:
        classes = sorted(e.name for e in it if e.is_dir())
    where = cache_path(root) if cache else None
    old = _load_cache(where) if where else {}
    entries, todo, now = {}, {}, time.time()
    for c in classes:
        key, names = _list_folder(str(root / c))
        hit = old.get(c)
        if isinstance(hit, dict) and isinstance(hit.get("bad"), list) and all(hit.get(k) == v for k, v in key.items()):
            entries[c] = hit
        else:
            entries[c], todo[c] = {**key, "bad": []}, names
    chunks = [(c, str(root / c), names[i:i + CHUNK]) for c, names in todo.items()
              for i in range(0, len(names), CHUNK)]
    for c, bad in _check_all(chunks, threads):
        entries[c]["bad"] += bad
    if where:   # folders changed in the last RACY_S seconds may change again unseen in the same mtime tick
        new = {c: e for c, e in entries.items() if c not in todo or now - e["mtime_ns"] / 1e9 > RACY_S}
        if new != old:
            _save_cache(where, new)
    return [BadImage(root / c / name, reason) for c in classes for name, reason in entries[c]["bad"]]


def fix_text(data_dir) -> str:
    """The one fix every report gives (prepare_data's error and the pre-flight line)."""
    return (f"set bad_images='set_aside' to move them to {resolve(data_dir) / SET_ASIDE}/<split>/<class>/ "
            f"and train without them (nothing is deleted), or replace them with good copies")


def describe(bad: list[BadImage], limit: int = 10) -> str:
    """``n corrupt or truncated images:`` then up to ``limit`` lines ``path: reason``."""
    lines = [f"  {b.path}: {b.reason}" for b in bad[:limit]]
    more = [f"  ... and {len(bad) - limit} more"] if len(bad) > limit else []
    return "\n".join([f"{len(bad)} corrupt or truncated image{'s' * (len(bad) != 1)}:"] + lines + more)


def set_aside(bad: list[BadImage], data_root) -> list[Path]:
    """Move (never delete) each bad file to ``<data_root>/_set_aside/<split>/<class>/<file>``, outside the
    split so the reader no longer sees it; a name already there gets a ``.1``, ``.2``... suffix."""
    root = Path(resolve(data_root))
    moved = []
    for b in bad:
        if not os.path.lexists(b.path):
            continue                                       # another job set it aside first
        rel = Path(b.path).relative_to(root)              # <split>/<class>/<file>
        dest = root / SET_ASIDE / rel
        for i in range(1, 10_000):
            if not dest.exists():
                break
            dest = root / SET_ASIDE / rel.parent / f"{rel.name}.{i}"
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(b.path), str(dest))
        except OSError as e:
            raise DataError(f"could not move {b.path} to {dest} ({e.strerror or e}): the data folder must be "
                            f"writable to set files aside; copy the data somewhere writable or fix the "
                            f"file by hand ({len(moved)} moved so far: {root / SET_ASIDE})") from e
        moved.append(dest)
    return moved
