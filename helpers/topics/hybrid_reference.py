"""The proof of chapter 03: every update of a hybrid run equals the single-process update from the same weights.

The reference (``reference_train``) is one process training the full network on the same global batch, with
BatchNorm fed each rank's micro-batch separately (as every data-parallel rank does). It follows the hybrid run
step by step (``follow=``): each step starts from the hybrid run's own weights (``trace_dir``, written by the
workers) and one update is compared at a time, which is exact to float rounding. Two free-running trajectories
are not compared: this network's gradient jumps where a ReLU input crosses zero, and float32 rounding that
differs between two correct implementations (the order of a sum) now and then tips a rank over such a kink.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers.core.errors import ConfigError, DataError
from helpers.core.fresh_python import call_fresh
from helpers.train.hybrid_classifier import CLASSIFIER, build_full_net, num_classes_of, ordered_params
from helpers.train.strategy_file import read_strategy
from helpers.train.strategy_layout import merge_shards


def read_trace(trace_dir, strategy_file, world_size: int, step: int) -> dict:
    """The full network's trainable parameters after ``step`` updates of a traced hybrid run: the backbone
    from rank 0, ``fc.weight``/``fc.bias`` put back together from the ranks' shards (``merge_shards``)."""
    ranks = {}
    for r in range(world_size):
        path = Path(trace_dir) / f"rank_{r}" / f"step_{step}.npz"
        if not path.exists():
            raise DataError(f"trace: no {path} (run the job with hybrid_config(..., trace_dir=...))")
        with np.load(path) as z:
            ranks[r] = {k: z[k] for k in z.files}
    strategy = read_strategy(strategy_file)
    full = dict(ranks[0])
    for name in CLASSIFIER:
        full[name] = merge_shards({r: a[name] for r, a in ranks.items()}, strategy[name])
    return full


def traced_updates(trace_dir, world_size: int) -> int:
    """Updates a traced run recorded on every rank: ``n`` if each ``rank_<r>`` holds ``step_0..step_<n>``."""
    counts = []
    for r in range(world_size):
        d, k = Path(trace_dir) / f"rank_{r}", 0
        while (d / f"step_{k}.npz").exists():
            k += 1
        counts.append(k)
    return max(min(counts, default=0) - 1, 0)


def reference_steps(cfg, steps: int | None = None, follow=None) -> int:
    """How many updates ``reference_train`` computes: ``steps`` (a cap: the gpu8 preset's hundreds of
    ResNet-50 steps at 224 px do not fit a job timeout on a host) or else the job's ``cfg.steps``; never more
    than the job ran, nor, with ``follow``, more than its trace recorded on every rank."""
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigError(f"steps: the reference needs a positive int or None, got {steps!r}")
    n = cfg.steps if steps is None else min(steps, cfg.steps)
    if follow:
        done = traced_updates(follow, cfg.world_size)
        if done == 0:
            raise DataError(f"trace {follow}: no update recorded on all {cfg.world_size} ranks (run the job "
                            "with hybrid_config(..., trace_dir=...))")
        n = min(n, done)
    return n


def _reference_setup(cfg):
    """``(trainable weights, optimizer, gradient cell, one iterator per rank)`` of the single-process reference:
    the full network from the seed, the job's momentum SGD, and every rank's micro-batches as that rank reads them."""
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore import nn, ops

    from helpers.train.data import build_dataset

    if cfg.init_checkpoint:
        raise ConfigError("reference_train starts from the seed's weights; run it for a job without "
                          "init_checkpoint")
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    net = build_full_net(cfg, num_classes_of(cfg))
    back, fc = ordered_params(net)
    weights = back + fc
    opt = nn.Momentum(weights, cfg.lr, cfg.momentum, weight_decay=cfg.weight_decay)
    loss_net = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    loss_net.set_train()

    class GradOf(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.net = loss_net
            self.grad = ops.GradOperation(get_by_list=True)
            self.weights = ms.ParameterTuple(weights)

        def construct(self, x, y):
            return self.net(x, y), self.grad(self.net, self.weights)(x, y)

    ds.config.set_seed(cfg.seed)
    its = [build_dataset(cfg, "train", r, cfg.world_size, batch_size=cfg.micro_batch_size).repeat()
           .create_tuple_iterator(num_epochs=-1) for r in range(cfg.world_size)]
    return weights, opt, GradOf(), its


def _reference_update(grad_of, opt, its, world: int) -> list[float]:
    """One update: ``1/world x`` the sum (float64 on the host) of every rank's micro-batch gradient; returns
    the ranks' losses."""
    import mindspore as ms

    total, per_rank = None, []
    for r in range(world):
        x, y = next(its[r])
        loss, grads = grad_of(x, y)
        per_rank.append(float(loss.asnumpy()))
        grads = [g.asnumpy().astype(np.float64) for g in grads]
        total = grads if total is None else [a + g for a, g in zip(total, grads)]
    opt(tuple(ms.Tensor((g / world).astype(np.float32)) for g in total))
    return per_rank


def reference_train(run_dir, out_path=None, steps: int | None = None, follow=None) -> dict:
    """One process, the full network, the hybrid run's global batch: for each step, the gradient of
    ``1/world * sum_r loss_r`` where ``loss_r`` is the mean loss of rank r's micro-batch (read exactly as
    rank r reads it), BatchNorm run on each micro-batch separately - what every data-parallel rank does.
    Writes ``{name: array}`` of the trainable parameters to ``out_path`` (npz) and returns the losses and
    ``steps`` (``reference_steps(cfg, steps, follow)`` updates).

    ``follow``: the hybrid run's ``trace_dir``. Then every step starts from the hybrid run's weights at that
    step (the optimizer's momentum stays the reference's own) and the result also has ``step_param_diff``:
    per step, the max |reference update - hybrid update| over all trainable parameters."""
    import mindspore as ms

    from helpers.core.config import JobConfig

    cfg = JobConfig.load(Path(run_dir) / "config.json")
    steps = reference_steps(cfg, steps, follow)
    weights, opt, grad_of, its = _reference_setup(cfg)
    losses, step_diff = [], []
    for s in range(steps):
        if follow:
            state = read_trace(follow, cfg.strategy_file, cfg.world_size, s)
            for p in weights:
                p.set_data(ms.Tensor(state[p.name]))
        losses.append(_reference_update(grad_of, opt, its, cfg.world_size))
        if follow:
            after = read_trace(follow, cfg.strategy_file, cfg.world_size, s + 1)
            step_diff.append(max(float(np.max(np.abs(p.asnumpy() - after[p.name]))) for p in weights))
    params = {p.name: p.asnumpy() for p in weights}
    if out_path:
        np.savez(out_path, **params)
    return {"losses": losses, "params": params, "steps": steps,
            **({"step_param_diff": step_diff} if follow else {})}


def reference_to_npz(run_dir: str, out_path: str, steps: int | None = None, follow: str | None = None) -> dict:
    """``reference_train`` as ``run_reference`` calls it in a fresh interpreter: the parameters go to
    ``out_path``, the JSON-able rest is returned."""
    res = reference_train(run_dir, out_path, steps=steps, follow=follow)
    res.pop("params")
    return res


def run_reference(run_dir, timeout_s: float = 600.0, follow=None, steps: int | None = None) -> dict:
    """``reference_train`` in a fresh Python interpreter (the notebook kernel stays light); returns
    ``{"losses": per step per rank, "params": {name: array}, "steps": n}`` (and ``step_param_diff`` with
    ``follow``). ``steps`` caps the updates (``reference_steps``)."""
    from helpers.core.config import JobConfig

    run_dir = Path(run_dir).resolve()
    if steps is not None:
        reference_steps(JobConfig.load(run_dir / "config.json"), steps)      # a bad cap fails before starting
    out = run_dir / f"reference{'_follow' if follow else ''}.npz"
    res = call_fresh("helpers.topics.hybrid_reference:reference_to_npz", str(run_dir), str(out), steps,
                     str(Path(follow).resolve()) if follow else None, timeout_s=timeout_s)
    with np.load(out) as z:
        res["params"] = {k: z[k] for k in z.files}
    return res


def trainable_diff(full_params: dict, reference: dict) -> dict:
    """``{name: max |a - b|}`` over the reference's (trainable) parameters."""
    missing = sorted(set(reference) - set(full_params))
    if missing:
        raise DataError(f"merged checkpoint lacks {missing[:3]}")
    return {k: float(np.max(np.abs(np.asarray(full_params[k], np.float64) - reference[k]))) for k in reference}
