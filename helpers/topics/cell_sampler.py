"""Chapter 01's code cell's ``StratifiedSampler``, taken from the cell's last run for the notebook and the jobs: the
split the experiment calls stratified is the class the learner wrote and ran, edits included."""

from __future__ import annotations

from helpers.core.cell_source import definitions
from helpers.core.paths import CELL_FILE

SAMPLER_CLASS, SAMPLER_FILE = "StratifiedSampler", "stratified_sampler.py"   # the code cell's sampler, in the jobs
SAMPLER_CODE = f"{SAMPLER_FILE}:{SAMPLER_CLASS}"     # a job config's ``sampler_code``


def sampler_file(cell_text: str) -> dict[str, bytes]:
    """The run folder's file with the cell's ``StratifiedSampler`` and the cell's imports, from the cell's text."""
    return {SAMPLER_FILE: definitions(cell_text, [SAMPLER_CLASS]).encode()}


def cell_sampler_code(code_cell) -> str:
    """The code cell's ``StratifiedSampler`` with the cell's imports, from its last run (``code_cell``, its job)."""
    return definitions((code_cell.run_dir / CELL_FILE).read_text(), [SAMPLER_CLASS])


def cell_sampler_class(code_cell) -> type:
    """The code cell's ``StratifiedSampler`` class, here in the notebook (for the plan)."""
    names: dict = {}
    exec(compile(cell_sampler_code(code_cell), SAMPLER_FILE, "exec"), names)
    return names[SAMPLER_CLASS]


def cell_sampler(code_cell) -> tuple[dict, dict]:
    """The code cell's ``StratifiedSampler`` for the experiment's jobs: (config changes, files for the run folder),
    so the split called stratified is the class the learner wrote and ran, edits included."""
    return dict(sampler_code=SAMPLER_CODE), sampler_file((code_cell.run_dir / CELL_FILE).read_text())
