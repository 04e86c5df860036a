"""Chapter 02's accumulation step is the one its code cell writes: ``MicroStep`` and ``ApplyStep`` taken out of
the cell (as committed, or as the cell last ran with the learner's edits) and run by the experiments' jobs."""

from pathlib import Path

import numpy as np
import pytest

from helpers.cells.program import CELL_FILE
from helpers.core.cell_source import ranks_cell_body
from helpers.chapters.oom_accumulation import cell_step
from helpers.core.config import job_config
from helpers.core.errors import ConfigError
from helpers.job.launch import JobResult
from helpers.train import accumulation_check as gc
from helpers.train.grad_accumulation import ACCUMULATION_FILE, CHAPTER_02, step_classes

NOTEBOOK = Path(__file__).resolve().parents[2] / CHAPTER_02


def code_cell_run(tmp_path, edit=lambda text: text) -> JobResult:
    """A finished run of chapter 02's code cell (its file as ``%%ranks`` writes it), optionally edited."""
    (tmp_path / CELL_FILE).write_text(edit(ranks_cell_body(NOTEBOOK)))
    return JobResult(tmp_path, job_config("ci"), 0, 1.0)


def test_the_default_step_is_the_committed_cells_two_classes():
    micro, apply = step_classes()
    assert (micro.__name__, apply.__name__) == ("MicroStep", "ApplyStep")
    assert "class MicroStep(nn.Cell)" in ranks_cell_body(NOTEBOOK)


def test_an_experiment_gets_the_cells_step_as_a_file_in_its_run_folder(tmp_path):
    assert cell_step(None) == ({}, {})
    changes, files = cell_step(code_cell_run(tmp_path))
    assert changes == {"accumulation_code": ACCUMULATION_FILE}
    code = files[ACCUMULATION_FILE].decode()
    assert "class MicroStep" in code and "class ApplyStep" in code and "init()" not in code
    assert job_config("ci").replace(**changes).accumulation_code == ACCUMULATION_FILE
    with pytest.raises(ConfigError, match="accumulation_code"):
        job_config("ci").replace(accumulation_code="step.txt")


def test_the_cells_step_gives_the_full_batch_gradient_and_an_edit_of_it_changes_what_runs(tmp_path):
    rng = np.random.default_rng(0)
    images, labels = rng.standard_normal((8, 3, 16, 16)).astype(np.float32), rng.integers(0, 10, 8)
    committed = gc.check_local(images, labels, 4, arch=None, builtin=False)
    assert committed["no_bn"]["max_rel_diff"] < 1e-5

    halve = lambda text: text.replace("self.sens = 1.0 / K", "self.sens = 0.5 / K")  # noqa: E731
    _, files = cell_step(code_cell_run(tmp_path, halve))
    (tmp_path / ACCUMULATION_FILE).write_bytes(files[ACCUMULATION_FILE])
    import mindspore as ms

    ms.set_seed(1)
    net = gc.small_net()
    x, y = ms.Tensor(images), ms.Tensor(labels.astype(np.int32))
    edited = gc.compare(gc.full_batch_grads(net, x, y),
                        gc.accumulated_grads(net, x, y, 4, step_classes(str(tmp_path / ACCUMULATION_FILE))))
    assert edited["ratio"] == pytest.approx(0.5, rel=1e-4), "the edited cell's step ran, not a library copy"
