"""Why ``benchmarks/bn_groups.py`` may train in one process: n ranks accumulating m micro-batches each, with
BatchNorm per rank and the mean gradient, make the update of one process that runs the n x m groups as its
micro-batches (``helpers.topics.bn_groups.one_update``; chapter 02's ``MicroStep``/``ApplyStep`` on both sides).
The running statistics are the exception: a rank's are updated by its own groups only."""

import numpy as np
import pytest

from helpers.cells.run import run_cell
from helpers.core.fresh_python import call_fresh
from helpers.topics.bn_groups import update_distance

pytestmark = pytest.mark.jobs

RANKS, MICRO, BATCH = 2, 2, 16          # 2 ranks x 2 micro-batches = 4 BatchNorm groups of 4 images

CELL = f"""\
import numpy as np
import mindspore as ms
from mindspore.communication import get_group_size, get_rank, init
from helpers.cells import finish, report
from helpers.topics.bn_groups import one_update

ms.set_context(mode=ms.GRAPH_MODE)
init()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                             comm_fusion=cfg.comm_fusion)
out = one_update({RANKS * MICRO}, get_group_size(), get_rank(), {BATCH})
report(step=0, loss=0.0)
np.savez(f"rank_{{get_rank()}}.npz", **out)
finish(get_rank())
"""


def test_two_ranks_of_two_micro_batches_update_like_one_process_of_four_groups(ci_config, tmp_path):
    cfg = ci_config.replace(world_size=RANKS, conv_impl="im2col", steps=1)
    res = run_cell(CELL, cfg, {}, magic_line="%%ranks cfg", progress="none", run_root=tmp_path)
    ranks = [dict(np.load(res.run_dir / f"rank_{r}.npz")) for r in range(RANKS)]
    assert np.array_equal(ranks[0]["w1"], ranks[1]["w1"]), "the ranks stay in step"
    one = {g: dict(np.load(call_fresh("helpers.topics.bn_groups:one_update_here", g, BATCH, 1,
                                      str(tmp_path / f"one_{g}.npz"))))
           for g in (RANKS * MICRO, 1, RANKS)}
    assert np.array_equal(ranks[0]["w0"], one[1]["w0"]), "the same initial weights"
    assert update_distance(ranks[0], one[RANKS * MICRO]) < 1e-5          # float32 rounding of the AllReduce
    # other groupings of the same images give another update: the grouping is what the ranks reproduce
    assert update_distance(ranks[0], one[1]) > 1e-2 and update_distance(ranks[0], one[RANKS]) > 1e-2
    # the exception: rank 0's running means saw its 2 groups, the one process's all 4
    assert not np.allclose(ranks[0]["running_mean"], one[RANKS * MICRO]["running_mean"])
