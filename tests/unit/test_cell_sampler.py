"""Chapter 01's stratified split is the class its code cell writes: taken out of the cell for the plan and the
training jobs (``helpers.core.cell_source.definitions``), and what it gives each rank."""

from pathlib import Path

import nbformat
import numpy as np
import pytest

from helpers.cells.program import CELL_FILE, CellError
from helpers.core.cell_source import definitions
from helpers.chapters import load_imbalance as chapter
from helpers.core.config import job_config
from helpers.job.launch import JobResult
from helpers.topics import shard_stats
from helpers.train.image_folder import scan_split
from helpers.train.sampler import sampler_class

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "01_load_imbalance.ipynb"


def code_cell_run(tmp_path) -> JobResult:
    """A finished run of chapter 01's code cell: its file as ``%%ranks`` writes it."""
    cell = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.source.startswith("%%ranks"))
    (tmp_path / CELL_FILE).write_text("# " + cell)
    return JobResult(tmp_path, job_config("ci"), 0, 1.0)


def test_definitions_keep_the_imports_and_the_named_class_only():
    text = "import numpy as np\nx = 1\n\n@staticmethod\ndef f():\n    return np.pi\n\nclass A:\n    pass\ninit()\n"
    assert definitions(text, ["f"]) == "import numpy as np\n\n@staticmethod\ndef f():\n    return np.pi\n"
    with pytest.raises(CellError, match="defines no B"):
        definitions(text, ["B"])


def test_the_cells_sampler_splits_the_class_sorted_stand_in_evenly(standin, tmp_path):
    cfg = job_config("ci")
    labels = scan_split(cfg.data_dir, "train").labels
    cls = chapter.cell_sampler_class(code_cell_run(tmp_path))
    shards = [np.fromiter(iter(cls(labels, 8, r, 3)), dtype=np.int64) for r in range(8)]
    assert len({len(s) for s in shards}) == 1 and len(np.unique(np.concatenate(shards))) == len(labels)
    assert shard_stats.per_class_spread(shards, labels) <= 1
    counts = np.bincount(labels)
    for s in shards:                   # every batch of 8 from a rank: the classes spread over its epoch
        first = np.flatnonzero(np.diff(labels[s][:64]) != 0)
        assert len(np.unique(labels[s[:64]])) == len(counts) and len(first) > 30
    again = [np.fromiter(iter(cls(labels, 8, r, 3)), dtype=np.int64) for r in range(8)]
    assert all(np.array_equal(a, b) for a, b in zip(shards, again)), "the same split on every call"


def test_the_training_jobs_load_the_same_class_from_their_run_folder(standin, tmp_path, monkeypatch):
    changes, files = chapter.cell_sampler(code_cell_run(tmp_path))
    run = tmp_path / "run"
    run.mkdir()
    for name, data in files.items():
        (run / name).write_bytes(data)
    monkeypatch.chdir(run)
    cfg = job_config("ci", **changes)
    labels = scan_split(cfg.data_dir, "train").labels
    in_job = sampler_class(cfg.sampler_code)(labels, 8, 5, cfg.seed)
    in_plan = chapter.cell_sampler_class(code_cell_run(tmp_path))(labels, 8, 5, cfg.seed)
    assert list(in_job) == list(in_plan)


def test_the_plan_of_section_1_splits_with_the_cells_class(standin, tmp_path):
    cfg = job_config("ci")
    labels = scan_split(cfg.data_dir, "train").labels
    cls = chapter.cell_sampler_class(code_cell_run(tmp_path))
    plan = chapter.plan_splits(labels, 8, 1, 64, stratified=cls)
    assert list(plan.shards) == list(chapter.STRATEGIES)
    assert all(np.array_equal(a, np.fromiter(iter(cls(labels, 8, r, 1)), np.int64))
               for r, a in enumerate(plan.shards["stratified"]))
    rows = {r[0]: r for r in plan.rows}
    assert rows["stratified"][2] == len(np.unique(labels)), "every global step holds every class"
    assert rows["stratified"][1] < rows["distributed_shuffle"][1] and rows["distributed"][2] <= 2
