"""The always-on time split in a rank (helpers.train.time_split): which steps are sampled, and that a sampled step
(three graphs: gradients, reduction, optimizer) trains exactly like the fused step."""

import numpy as np
import pytest

from helpers.core.config import JobConfig
from helpers.core.metrics import MetricsWriter, metrics_path, read_records
from helpers.train.time_split import SPLIT_EVERY_ENV, SPLIT_KEYS, is_split_step, split_every


def test_the_period_follows_the_job_length_within_15_and_20_and_short_jobs_are_not_split():
    assert split_every(300, env={}) == 20 and split_every(45, env={}) == 15 and split_every(90, env={}) == 18
    assert split_every(44, env={}) == 0 and split_every(30, env={}) == 0 and split_every(4, env={}) == 0
    assert split_every(4, env={SPLIT_EVERY_ENV: "1"}) == 1 and split_every(300, env={SPLIT_EVERY_ENV: "0"}) == 0


def test_sampled_steps_are_the_last_of_each_period():
    assert [i for i in range(8) if is_split_step(i, 2)] == [1, 3, 5, 7]
    assert [i for i in range(10) if is_split_step(i, 4)] == [3, 7]
    assert not any(is_split_step(i, 0) for i in range(10))


def _run(tmp_path, every: str, monkeypatch, name: str, **changes):
    import mindspore as ms
    from mindspore import nn

    from helpers.train.profiler_session import NoProfiler
    from helpers.train.recipe import build_loss, build_optimizer, build_train_step
    from helpers.train.worker import _loop

    monkeypatch.setenv(SPLIT_EVERY_ENV, every)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    cfg = JobConfig(world_size=1, global_batch=8, steps=5, momentum=0.9, weight_decay=1e-4).replace(**changes)
    net = nn.SequentialCell(nn.Dense(4, 6), nn.ReLU(), nn.Dense(6, 3))
    step = build_train_step(cfg, net, build_loss(cfg), build_optimizer(cfg, net.trainable_params()))
    rng = np.random.default_rng(0)
    batches = iter([(ms.Tensor(rng.random((8, 4), dtype=np.float32)), ms.Tensor(np.arange(8) % 3, ms.int32))
                    for _ in range(5)])
    folder = tmp_path / name
    out = MetricsWriter(folder, 0)
    _loop(cfg, 0, step, batches, out, NoProfiler())
    out.close()
    recs = [r for r in read_records(metrics_path(folder, 0)) if r["event"] == "step"]
    return recs, [p.asnumpy().copy() for p in net.trainable_params()]


def test_a_sampled_step_trains_like_the_fused_step_and_records_its_three_parts(tmp_path, monkeypatch):
    fused, w_fused = _run(tmp_path, "0", monkeypatch, "fused")
    split, w_split = _run(tmp_path, "2", monkeypatch, "split")
    assert [sorted(k for k in SPLIT_KEYS if k in r) for r in split] == [[], list(sorted(SPLIT_KEYS)), [],
                                                                        list(sorted(SPLIT_KEYS)), []]
    assert not any(k in r for r in fused for k in SPLIT_KEYS)
    assert [r["loss"] for r in split] == pytest.approx([r["loss"] for r in fused], rel=1e-6)
    for a, b in zip(w_fused, w_split):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for r in split[1::2]:
        assert all(r[k] >= 0 for k in SPLIT_KEYS) and r["grad_s"] + r["reduce_s"] + r["update_s"] <= r["compute_s"]


def test_profiled_steps_stay_fused_so_the_profile_reads_the_jobs_own_graph(tmp_path, monkeypatch):
    recs, _ = _run(tmp_path, "1", monkeypatch, "profiled", profile=True, profile_skip_steps=3)
    assert ["reduce_s" in r for r in recs] == [False, True, True, False, False]


def test_a_job_that_splits_steps_caches_its_graphs_apart():
    """MindSpore numbers cached graphs by compile order; the split's three extra graphs would shift the rest."""
    from helpers.train.worker import CACHE_PATH_ENV, split_cache_folder

    env = {CACHE_PATH_ENV: "/c/abc", SPLIT_EVERY_ENV: "2"}
    split_cache_folder(JobConfig(steps=5), env)
    assert env[CACHE_PATH_ENV] == "/c/abc/time_split"
    for cfg, e in ((JobConfig(steps=5), {SPLIT_EVERY_ENV: "0"}), (JobConfig(steps=5), {}),
                   (JobConfig(steps=5, accumulation_steps=2, global_batch=16), {SPLIT_EVERY_ENV: "2"})):
        env = {CACHE_PATH_ENV: "/c/abc", **e}
        split_cache_folder(cfg, env)
        assert env[CACHE_PATH_ENV] == "/c/abc"
    env = {SPLIT_EVERY_ENV: "2"}
    split_cache_folder(JobConfig(steps=5), env)                 # no cache: nothing to move
    assert CACHE_PATH_ENV not in env


@pytest.mark.parametrize("amp_level", ["O2", "O3"])
def test_a_loss_scale_step_splits_and_trains_like_its_fused_step(tmp_path, monkeypatch, amp_level):
    """The gpu8 recipe's step (a dynamic loss scale; on CPU the course's own overflow check): same losses, scale and
    weights split or fused, and the sampled steps carry the three parts and the overflow flag."""
    changes = dict(amp_level=amp_level, loss_scale="dynamic")
    fused, w_fused = _run(tmp_path, "0", monkeypatch, "ls_fused", **changes)
    split, w_split = _run(tmp_path, "2", monkeypatch, "ls_split", **changes)
    assert ["reduce_s" in r for r in split] == [False, True, False, True, False]
    assert [r["loss"] for r in split] == pytest.approx([r["loss"] for r in fused], rel=1e-3)
    assert [(r["overflow"], r["loss_scale"]) for r in split] == [(r["overflow"], r["loss_scale"]) for r in fused]
    for a, b in zip(w_fused, w_split):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_an_overflowing_split_step_halves_the_scale_and_leaves_the_weights():
    import mindspore as ms
    from mindspore import nn, ops

    from helpers.train.recipe import DYNAMIC_LOSS_SCALE, cpu_loss_scale_cell
    from helpers.train.time_split import SplitStep, splittable

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    net = nn.Dense(4, 3)
    manager = ms.amp.DynamicLossScaleManager(**DYNAMIC_LOSS_SCALE)
    step = cpu_loss_scale_cell()(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                                 nn.Momentum(net.trainable_params(), 0.1, 0.9), scale_sense=manager.get_update_cell())
    assert splittable(step)
    part = SplitStep(step)
    before = net.weight.asnumpy().copy()
    infinite = tuple(ops.fill(p.dtype, p.shape, float("inf")) for p in part.weights)
    overflow, scale = part.update(part.reduce(infinite))
    assert bool(overflow.asnumpy()) and float(scale.asnumpy()) == DYNAMIC_LOSS_SCALE["init_loss_scale"] / 2
    np.testing.assert_array_equal(net.weight.asnumpy(), before)
