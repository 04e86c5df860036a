"""The training recipe: schedule, decay groups, loss, and the worker's step loop fed a loss-scale cell."""

import numpy as np
import pytest

from helpers.core.config import JobConfig, job_config
from helpers.core.metrics import MetricsWriter, read_records, metrics_path
from helpers.train.recipe import is_norm_or_bias, lr_per_step, param_groups, step_loss


def test_gpu8_recipe_scales_lr_with_the_global_batch_and_warms_up_then_decays():
    cfg = job_config("gpu8", steps=100)
    assert cfg.scaled_lr == pytest.approx(0.1 * cfg.global_batch / 256)
    lrs = lr_per_step(cfg)
    assert len(lrs) == 100
    warm = int(round(cfg.warmup_fraction * 100))
    assert lrs[0] == 0.0 and lrs[warm - 1] < lrs[warm] == pytest.approx(cfg.scaled_lr)
    assert all(a >= b for a, b in zip(lrs[warm:], lrs[warm + 1:]))       # cosine: never goes up again
    assert lrs[-1] < 0.01 * cfg.scaled_lr


def test_constant_schedule_is_the_plain_lr():
    cfg = JobConfig(steps=5, lr=0.05)
    assert lr_per_step(cfg) == [0.05] * 5


def test_no_decay_on_batchnorm_and_bias():
    class P:
        def __init__(self, name):
            self.name = name

    params = [P(n) for n in ("stem.0.weight", "stem.1.gamma", "stem.1.beta", "fc.weight", "fc.bias")]
    assert [is_norm_or_bias(p.name) for p in params] == [False, True, True, False, True]
    groups = param_groups(params, 1e-4, decay_norm_and_bias=False)
    assert [p.name for p in groups[0]["params"]] == ["stem.0.weight", "fc.weight"] and groups[0]["weight_decay"] == 1e-4
    assert [p.name for p in groups[1]["params"]] == ["stem.1.gamma", "stem.1.beta", "fc.bias"]
    assert groups[1]["weight_decay"] == 0.0 and groups[2]["order_params"] == params


def test_step_loss_reads_a_tensor_and_a_loss_scale_tuple():
    assert step_loss(np.float32(1.5)) == (1.5, {})
    loss, extra = step_loss((np.float32(2.0), np.bool_(True), np.array([1024.0], np.float32)))
    assert loss == 2.0 and extra == {"overflow": True, "loss_scale": 1024.0}


def test_worker_loop_runs_a_dynamic_loss_scale_step(tmp_path):
    """O2 with a dynamic loss scale returns (loss, overflow, scale); the step loop must record all three."""
    import mindspore as ms
    from mindspore import nn

    from helpers.train.recipe import build_loss, build_optimizer, build_train_step
    from helpers.train.profiler_session import NoProfiler
    from helpers.train.worker import _loop

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    cfg = JobConfig(world_size=1, global_batch=8, steps=3, amp_level="O2", loss_scale="dynamic",
                    label_smoothing=0.1, lr_schedule="cosine", warmup_fraction=0.34, decay_norm_and_bias=False)
    net = nn.Dense(4, 3)
    step = build_train_step(cfg, net, build_loss(cfg), build_optimizer(cfg, net.trainable_params()))
    assert isinstance(step, nn.TrainOneStepWithLossScaleCell)
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.random((8, 4), dtype=np.float32))
    y = ms.Tensor(np.arange(8) % 3, ms.int32)
    batches = iter([(x, y)] * 3)
    out = MetricsWriter(tmp_path, 0)
    times = _loop(cfg, 0, step, batches, out, NoProfiler())
    out.close()
    recs = [r for r in read_records(metrics_path(tmp_path, 0)) if r["event"] == "step"]
    assert len(times) == 3 and all(np.isfinite(r["loss"]) for r in recs)
    assert [r["overflow"] for r in recs] == [False] * 3 and recs[0]["loss_scale"] == 2.0**10
    assert recs[0]["lr"] == 0.0 and recs[1]["lr"] > 0


def test_cpu_overflow_check_skips_the_step_and_halves_the_scale():
    import mindspore as ms
    from mindspore import amp, nn

    from helpers.train.recipe import DYNAMIC_LOSS_SCALE, cpu_loss_scale_cell

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    dense = nn.Dense(4, 3)
    net = amp.auto_mixed_precision(dense, "O2")
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    manager = amp.DynamicLossScaleManager(**DYNAMIC_LOSS_SCALE)
    step = cpu_loss_scale_cell()(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                                 opt, scale_sense=manager.get_update_cell())
    step.set_train()
    before = dense.weight.asnumpy().copy()
    y = ms.Tensor(np.arange(8) % 3, ms.int32)
    loss, extra = step_loss(step(ms.Tensor(np.full((8, 4), 1e30, np.float32)), y))
    assert extra == {"overflow": True, "loss_scale": 2.0**9}       # the scale the update cell left: halved
    np.testing.assert_array_equal(dense.weight.asnumpy(), before)       # the overflowing step was skipped
    _, extra = step_loss(step(ms.Tensor(np.ones((8, 4), np.float32)), y))
    assert extra == {"overflow": False, "loss_scale": 2.0**9}


def test_plain_train_step_is_the_recipe_builder_in_fp32_without_decay():
    import mindspore as ms
    from mindspore import nn

    from helpers.train.recipe import plain_train_step

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    step = plain_train_step(nn.Dense(4, 3), lr=0.02)
    assert type(step) is nn.TrainOneStepCell
    assert isinstance(step.network, nn.WithLossCell) and isinstance(step.optimizer, nn.Momentum)
    assert float(step.optimizer.get_lr().asnumpy()) == pytest.approx(0.02)
    assert not step.optimizer.is_group_lr and float(step.optimizer.momentum.asnumpy()) == pytest.approx(0.9)
    loss = step(ms.Tensor(np.ones((8, 4), np.float32)), ms.Tensor(np.arange(8) % 3, ms.int32))
    assert np.isfinite(loss.asnumpy())


def test_plain_train_step_at_o2_trains_with_the_cpu_fixed_scale():
    import mindspore as ms
    from mindspore import nn

    from helpers.train.recipe import FIXED_LOSS_SCALE, plain_train_step

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    step = plain_train_step(nn.Dense(4, 3), amp_level="O2")
    assert step.optimizer.loss_scale == FIXED_LOSS_SCALE
    loss, extra = step_loss(step(ms.Tensor(np.ones((8, 4), np.float32)), ms.Tensor(np.arange(8) % 3, ms.int32)))
    assert np.isfinite(loss) and not extra.get("overflow", False)
