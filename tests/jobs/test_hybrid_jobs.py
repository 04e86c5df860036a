"""Real 8-rank hybrid jobs (CPU path of helpers.train.hybrid_step): equal to a single-process reference, and their
per-rank checkpoints merged with MindSpore's transform_checkpoints, re-split for another layout, resumed.

The reference (``helpers.topics.hybrid_reference.reference_train``) is one process training the full network on
the same global batch with BatchNorm run on each rank's micro-batch separately: that is what data parallel computes (every
rank normalises with its own batch statistics), so the two must agree to float rounding. A reference with BN
over the whole global batch would differ by ~1e-2 for a reason that has nothing to do with the split.

The reference follows the run (each step starts from the hybrid run's own weights, traced by the workers) and
one update is compared at a time: two free-running trajectories of this network part by 1e-5..1e-2 within a
few steps even between two correct single-process implementations (its gradient jumps at ReLU kinks; see
``helpers.topics.hybrid_reference``), so a free-running comparison only holds for the first step.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.job.launch import run_job
from helpers.topics.hybrid import hybrid_config, write_layout_strategy
from helpers.topics.hybrid_reference import run_reference, trainable_diff
from helpers.topics.strategy import checkpoint_arrays, merge_rank_checkpoints, resplit_checkpoint
from helpers.train.strategy_file import read_strategy
from helpers.train.strategy_layout import Layout, merge_shards

# nightly: tests/notebooks/test_ch03.py runs the same mechanisms in the default run (hybrid = one-process reference
# per step, shards merged bit for bit, resumed on another layout)
pytestmark = [pytest.mark.jobs, pytest.mark.nightly]
CLASSES = 12          # the 10 digit classes padded to 12, so 2 and 4 both divide them


@pytest.fixture()
def hybrid_run(ci_config, tmp_path):
    cfg = ci_config.replace(num_classes=CLASSES, steps=4)
    layout = Layout(4, 2)
    sf = write_layout_strategy(cfg, layout, tmp_path / "4x2.ckpt")
    res = run_job(hybrid_config(cfg, layout, sf, trace_dir=tmp_path / "trace"), progress="text",
                  run_root=tmp_path)
    return cfg, sf, res, tmp_path


def test_hybrid_4x2_equals_single_process_reference_and_round_trips(hybrid_run):
    cfg, sf, res, tmp_path = hybrid_run
    assert res.summary("classifier_shape") == [[CLASSES // 2, 64]] * 8
    merged = merge_rank_checkpoints(res.run_dir / "ckpt", sf, tmp_path / "merged")
    full = checkpoint_arrays(merged)
    ref = run_reference(res.run_dir, follow=tmp_path / "trace")
    # same data, and every step from the same weights: each rank's loss and each update agree
    np.testing.assert_allclose(res.metric("loss").T, np.array(ref["losses"]), atol=1e-5)
    assert len(ref["step_param_diff"]) == cfg.steps
    assert max(ref["step_param_diff"]) <= 1e-5, ref["step_param_diff"]
    # the last update, compared with the merged checkpoint of the run
    diff = trainable_diff(full, ref["params"])
    assert max(diff.values()) <= 1e-5, sorted(diff.items(), key=lambda kv: -kv[1])[:3]

    # merged classifier = the rank shards put back together by numpy
    strategy = read_strategy(sf)
    shards = {r: checkpoint_arrays(res.run_dir / "ckpt" / f"rank_{r}" / f"hybrid{r}.ckpt")["fc.weight"]
              for r in range(8)}
    np.testing.assert_array_equal(full["fc.weight"], merge_shards(shards, strategy["fc.weight"], 0.0))

    # re-split for 2x4 and back: every rank gets its quarter of the classes, the backbone whole
    sf24 = write_layout_strategy(cfg, Layout(2, 4), tmp_path / "2x4.ckpt")
    outs = resplit_checkpoint(merged, sf24, tmp_path / "split24", 8)
    for r, path in enumerate(outs):
        part = checkpoint_arrays(path)
        m = r % 4
        np.testing.assert_array_equal(part["fc.weight"], full["fc.weight"][m * 3:(m + 1) * 3])
        np.testing.assert_array_equal(part["stem.0.weight"], full["stem.0.weight"])

    # and training resumes on the other layout from those files
    resumed = run_job(hybrid_config(cfg, Layout(2, 4), sf24, init_checkpoint=str(tmp_path / "split24"),
                                    steps=2, name="resumed"), progress="text", run_root=tmp_path)
    assert resumed.summary("classifier_shape") == [[CLASSES // 4, 64]] * 8
    assert np.all(np.isfinite(resumed.metric("loss")))
