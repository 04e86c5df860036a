"""Chapter 00's code cell against one process redoing its first update (``helpers.topics.averaging``): the ranks'
weights after update 1 are the mean-gradient update, not the sum's; and with MindSpore 2.10's AllReduce fusion on
CPU they are neither, while every rank still holds the same weights (a fact of the wheel, pinned here)."""

from pathlib import Path

import nbformat
import pytest

from helpers.cells.run import run_cell
from helpers.topics.averaging import AVERAGED_BELOW, first_update_check

pytestmark = pytest.mark.jobs

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "00_environment_setup.ipynb"
FUSE_ALL = {"allreduce": {"mode": "auto", "config": None}}


def chapter00_cell() -> tuple[str, str]:
    cell = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.source.startswith("%%ranks"))
    line, body = cell.split("\n", 1)
    return line, body


@pytest.mark.parametrize("fusion", [{}, FUSE_ALL], ids=["unfused", "fused"])
def test_the_ranks_first_update_is_the_mean_gradients_and_cpu_fusion_breaks_it(ci_config, tmp_path, fusion):
    line, body = chapter00_cell()
    cfg = ci_config.replace(comm_fusion=fusion, conv_impl="im2col", deterministic=True)
    res = run_cell(body, cfg, {}, magic_line=line, progress="none", run_root=tmp_path)
    assert len({v["sha256 of weights"] for v in res.returns.values()}) == 1, "the ranks stay in step either way"
    check = first_update_check(res.run_dir)
    print(fusion, check)
    assert check["same_batches"] and check["first_loss_diff"] < 1e-5
    if not fusion:
        assert check["averaged"] and check["vs_mean"] < AVERAGED_BELOW
        assert check["vs_sum"] == pytest.approx(cfg.world_size - 1, rel=1e-3), "the sum is n x the mean update"
    else:    # MindSpore 2.10 on CPU: the fused AllReduce's update is not the mean gradient's (parameters swapped)
        assert not check["averaged"] and check["vs_mean"] > 0.5
