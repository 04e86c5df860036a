"""Chapter 00's code cell against one process redoing its first update (``helpers.topics.averaging``): at the
``ci`` preset's settings (every gradient in one fused AllReduce, im2col convolutions) each parameter's update is
the mean gradient's, not the sum's. The same check caught im2col weight gradients that reached the fused
AllReduce through a ``Reshape`` and arrived as other convolutions' gradients (``helpers.train.im2col_conv``)."""

from pathlib import Path

import nbformat
import pytest

from helpers.cells.run import run_cell
from helpers.topics.averaging import AVERAGED_BELOW, first_update_check

pytestmark = pytest.mark.jobs

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "00_environment_setup.ipynb"


def chapter00_cell() -> tuple[str, str]:
    cell = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.source.startswith("%%ranks"))
    line, body = cell.split("\n", 1)
    return line, body


def test_every_parameter_of_the_fused_ranks_takes_the_mean_gradient_update(ci_config, tmp_path):
    line, body = chapter00_cell()
    cfg = ci_config.replace(conv_impl="im2col", deterministic=True)
    assert cfg.comm_fusion == {"allreduce": {"mode": "auto", "config": None}}, "the preset's fusion is under test"
    res = run_cell(body, cfg, {}, magic_line=line, progress="none", run_root=tmp_path)
    assert len({v["sha256 of weights"] for v in res.returns.values()}) == 1, "the ranks stay in step"
    check = first_update_check(res.run_dir)
    assert check["same_batches"] and check["first_loss_diff"] < 1e-5
    assert check["worst_parameter_vs_mean"] < 10 * AVERAGED_BELOW, check
    assert check["averaged"] and check["vs_mean"] < AVERAGED_BELOW, check
    assert check["vs_sum"] == pytest.approx(cfg.world_size - 1, rel=1e-3), "the sum is n x the mean update"
