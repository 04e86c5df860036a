"""The jobs a course home has running (``runs/.jobs/<job_id>.json``), so a job left by a dead launcher is found and
ended; each is also listed machine-wide (``MACHINE_REGISTRY``) so a job from any clone sees the others' host memory."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from helpers.core.paths import resolve
from helpers.job.rank_guard import launcher_alive, process_start

REGISTRY = "runs/.jobs"
MACHINE_REGISTRY = Path(tempfile.gettempdir()) / "ms-course-jobs"   # every course home here, like the port locks


def register(job_id: str, run_dir: Path, **launch) -> Path:
    """Record that this process launched ``job_id`` (removed again by ``unregister``); ``launch``: what the
    launcher needs to end it later (e.g. ``slurm_job_id``)."""
    folder = resolve(REGISTRY)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{job_id}.json"
    rec = dict(job_id=job_id, run_dir=str(run_dir), launcher_pid=os.getpid(),
               launcher_start=process_start(os.getpid()), started=time.time(), **launch)
    for where in (path, MACHINE_REGISTRY / path.name):
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = where.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rec))
        os.replace(tmp, where)
    return path


def unregister(job_id: str) -> None:
    """Forget a job (its registry file); no error if it is already gone."""
    for folder in (resolve(REGISTRY), MACHINE_REGISTRY):
        (folder / f"{job_id}.json").unlink(missing_ok=True)


def machine_jobs(exclude: str | None = None) -> list[dict]:
    """The records of every course job on this machine whose launcher is alive (any clone or course home), but
    ``exclude``; a record left by a dead launcher is dropped (its own home's ``reap_orphans`` ends its processes)."""
    found = []
    for path in sorted(MACHINE_REGISTRY.glob("*.json")) if MACHINE_REGISTRY.is_dir() else []:
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue                          # being written, or half-written by a launcher that died: skip it
        if rec.get("job_id") == exclude:
            continue
        if launcher_alive(rec["launcher_pid"], rec["launcher_start"]):
            found.append(rec)
        else:
            path.unlink(missing_ok=True)
    return found


def reap_orphans(kill, cancel=None) -> list[dict]:
    """End every registered job whose launcher is dead; ``kill(job_id)`` returns what it killed, ``cancel(rec)``
    ends what a launcher started elsewhere (a Slurm job: its record has ``slurm_job_id``).

    Returns one dict per job cleaned up: its run folder and how many of its processes were still alive."""
    folder = resolve(REGISTRY)
    cleaned = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)      # a half-written entry of a launcher that died while writing it
            continue
        if launcher_alive(rec["launcher_pid"], rec["launcher_start"]):
            continue
        if cancel and rec.get("slurm_job_id"):
            cancel(rec)
        killed = kill(rec["job_id"])
        path.unlink(missing_ok=True)
        cleaned.append(dict(run_dir=rec["run_dir"], processes=killed))
    return cleaned
