"""Hybrid (data x model) parallel training of a ResNet, driven by a MindSpore strategy file.

Two paths, one strategy file (``helpers.topics.strategy.build_strategy``):

- **CPU (runs here)**: ``SEMI_AUTO_PARALLEL`` is refused on CPU, so the layout is built from explicit
  collectives. The backbone is data parallel over all ranks; the classifier ``fc`` is cut per the file's
  layout of ``fc.weight``/``fc.bias`` (``helpers.topics.strategy.shard_slice``), so rank ``(d, m)`` of a
  ``[dp, mp]`` device matrix holds class rows block ``m``. Forward, inside each model-parallel group
  (``create_group``): the ranks' features are gathered ("place my block in a zero tensor, then
  ``AllReduce(SUM, group)``" - ``AllGather`` works on the world group only on CPU), each rank computes its
  slice of the logits, the slices are gathered the same way, and each rank takes the cross entropy of its
  own samples. MindSpore differentiates through both gathers (the backward of ``AllReduce(SUM)`` is an
  ``AllReduce(SUM)`` of the gradient), so each rank ends up with the gradient of its group's summed loss.
  Gradient scaling, for an update equal to single-process training on the same global batch
  (loss = mean over the global batch = ``1/world * sum_r loss_r``):

  * backbone: ``AllReduce(SUM, world) / world`` (plain data parallel);
  * classifier slice: ``AllReduce(SUM, ranks holding the same slice) / world``.

- **GPU/Ascend (cannot run here)**: ``semi_auto_plan`` gives ``set_auto_parallel_context`` keywords
  (``SEMI_AUTO_PARALLEL`` with ``strategy_ckpt_config`` loading the same file) and the classifier's
  ``shard()`` strategies; ``build_semi_auto_step`` applies them to a full network.

The reference for the equality proof (``reference_train``) is one process training the full network on the
same global batch, with BatchNorm fed each rank's micro-batch separately (as every data-parallel rank does).

Why the proof follows the hybrid run step by step (``follow=``) instead of comparing two free-running
trajectories: this network's gradient is not a continuous function of its weights (at a ReLU it jumps where
a pre-activation crosses zero; which kink is hit was not pinned down). Float32 rounding that
differs between two correct implementations (the order of a sum: a split matmul + ``AllReduce`` vs one
matmul, float32 vs float64 accumulation) moves weights by ~1e-8, and now and then that tips one rank's
micro-batch over a kink: its gradient jumps by 1e-4..4e-2 and momentum carries the jump on. Measured (ci
model, 12 classes, 4x2, 4 steps): free-running, the hybrid run and the reference part from step 1 (max weight
difference 1.6e-2 after 4 steps), yet the reference's own gradient code evaluated *at the hybrid run's
weights* reproduces every rank's hybrid gradient to <= 1e-6 at every step, and moving ``stem.0.weight``
by fractions of its 6e-7 difference changes one rank's gradient in a single jump (4e-6 -> 3.8e-2), not
gradually. Two single-process references that differ only in summing the ranks' gradients in float32
instead of float64 already end 2.4e-5 apart after 4 steps. So the reference starts each step from the hybrid
run's own weights (``trace_dir``, written by the workers) and one update is compared at a time: that is
exact to float rounding and is the claim that matters (each hybrid step performs the single-process update).
Pure data parallel (8x1) through the same code was earlier measured within 5e-7 free-running for 4-5 steps: its
rounding also differs from the reference's (float32 AllReduce vs float64 host sum), it just tipped no kink then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from helpers.core.errors import ConfigError, DataError
from helpers.topics.strategy import Layout, layout_to_dict, read_strategy, shard_slice, validate_strategy

CLASSIFIER = ("fc.weight", "fc.bias")


# ------------------------------------------------------------------------------------------- layouts


def classifier_layout(strategy: dict, world_size: int) -> Layout:
    """The ``Layout`` the CPU path can build from a read strategy: ``fc.weight``/``fc.bias`` on device
    matrix ``[dp, mp]``, split on their class dimension (tensor map ``[0, -1]``/``[0]``) or not at all."""
    missing = [n for n in CLASSIFIER if n not in strategy]
    if missing:
        raise ConfigError(f"strategy has no layout for {missing}; the CPU hybrid path splits the classifier "
                          "'fc' and needs both")
    w = layout_to_dict(strategy["fc.weight"], "fc.weight")
    b = layout_to_dict(strategy["fc.bias"], "fc.bias")
    dev = list(w["dev_matrix"])
    if len(dev) == 1:
        dev = [dev[0], 1]
    if len(dev) != 2 or int(np.prod(dev)) != world_size:
        raise ConfigError(f"fc.weight: device matrix {w['dev_matrix']} is not [dp, mp] with dp*mp = "
                          f"world size {world_size}")
    split = w["tensor_map"] == [0, -1] and b["tensor_map"] == [0]
    replicated = w["tensor_map"] == [-1, -1] and b["tensor_map"] == [-1]
    if not (split or replicated) or list(b["dev_matrix"]) not in (list(w["dev_matrix"]), dev):
        raise ConfigError(f"fc: tensor maps {w['tensor_map']} / {b['tensor_map']} on {w['dev_matrix']}: the "
                          "CPU path splits the classifier on its class dimension over the last device "
                          "axis ([0, -1] and [0]) or replicates it ([-1, -1] and [-1])")
    return Layout(dev[0], dev[1]) if split else Layout(world_size, 1)


def write_layout_strategy(cfg, layout: Layout, path, num_classes: int | None = None) -> Path:
    """Build the full network's shapes for ``cfg`` and write ``build_strategy(net, layout)`` to ``path``."""
    from helpers.train.models import build_model
    from helpers.topics.strategy import build_strategy, save_strategy

    net = build_model(cfg.arch, num_classes or _num_classes(cfg), cfg.width, cfg.stem, "native")
    return save_strategy(build_strategy(net, layout), path, param_shapes=net)


def _num_classes(cfg) -> int:
    from helpers.train.image_folder import scan_split

    found = len(scan_split(cfg.data_dir, "train").classes)
    want = getattr(cfg, "num_classes", None) or found
    if want < found:
        raise ConfigError(f"num_classes: {want} is fewer than the {found} class folders of {cfg.data_dir}")
    return want


TRACE_ENV = "HYBRID_TRACE_DIR"


def hybrid_config(cfg, layout: Layout, strategy_file, trace_dir=None, **changes):
    """``cfg`` for a hybrid job on ``layout``: the strategy file, and no compile cache. The CPU path runs
    PyNative (see ``build_hybrid_step``), where a cache buys little; and a cache written by another layout or
    an older version of this module was measured to be reused (its key knows neither), failing the job.
    ``trace_dir``: every rank writes its parameters after each update there (``StepTrace``), for
    ``reference_train(follow=...)``; costs one small file per rank and step (the ci model: ~0.3 MB)."""
    if layout.world != cfg.world_size:
        raise ConfigError(f"layout {layout.name} has {layout.world} ranks, the job {cfg.world_size}")
    if trace_dir is not None:
        changes["env"] = {**dict(changes.get("env", cfg.env)), TRACE_ENV: str(Path(trace_dir).resolve())}
    return cfg.replace(strategy_file=str(Path(strategy_file).resolve()), compile_cache=False, **changes)


def classifier_bytes_per_rank(strategy_file, world_size: int, feature_dim: int, num_classes: int) -> int:
    """Bytes of ``fc`` (fp32 weight + bias) one rank holds under the file's layout."""
    layout = classifier_layout(read_strategy(strategy_file), world_size)
    from helpers.core.memory_planner import classifier_param_bytes

    return classifier_param_bytes(feature_dim, num_classes, layout.mp)


# ------------------------------------------------------------------ the failure it fixes: a memory cap

def classifier_saving_mb(feature_dim: int, num_classes: int, layout: Layout) -> float:
    """MiB of classifier (fp32 weight + bias) one rank holds less on ``layout`` than under data parallel."""
    from helpers.core.memory_planner import classifier_param_bytes

    saved = classifier_param_bytes(feature_dim, num_classes, 1) - classifier_param_bytes(feature_dim, num_classes,
                                                                                         layout.mp)
    return saved / 2**20


def classifier_bytes_planned(feature_dim: int, num_classes: int, layout: Layout) -> int:
    from helpers.core.memory_planner import classifier_param_bytes

    return classifier_param_bytes(feature_dim, num_classes, layout.mp)


CAP_BELOW_DP = 0.75     # the cap sits this many per-rank classifier savings below the data-parallel peak


def cap_between(dp_vms_peak_mb: float, saving_mb: float) -> int:
    """The per-rank address-space cap of the out-of-memory experiment: ``CAP_BELOW_DP x saving_mb`` below the
    data-parallel run's measured peak virtual size, ``saving_mb`` being the classifier bytes (weight + bias) a
    rank of the hybrid layout holds less.

    Measured on the CPU path (ci model: 64 features, 400,000 classes, 8 ranks, one step; saving 49.6 MB per rank):
    peak virtual size after the step 3326 MB under 8x1, 3215 MB under 4x2 (the classifier, its momentum and
    gradient scale with the slice: 2-2.2x the saving). The peaks are read after the step, and the step's
    transients push the true need higher: under a 3227 MB cap the 4x2 job failed although it had peaked at
    3215 MB uncapped. Under 3290 MB the 4x2 job fitted and 8x1 failed at its first operator (MindSpore's memory
    pool could not reserve its block: a readable out-of-memory error). Nearer the data-parallel peak the 8x1 job
    fails at whatever small allocation comes last (a thread's stack: ``Resource temporarily unavailable``, a
    communication buffer), which reads as a ``crash``. Hence 0.75x the saving below the 8x1 peak (3289 MB)."""
    if saving_mb <= 0:
        raise ConfigError(f"the layout saves {saving_mb:.1f} MB of classifier per rank: nothing for a cap to "
                          "tell apart (use mp > 1 and more classes)")
    return int(dp_vms_peak_mb - CAP_BELOW_DP * saving_mb)


OOM_CLASSIFIER_BYTES = 102_400_000   # ~100 MB of fp32 classifier: ResNet-50 at 12,500 classes


def oom_classes(cfg, classifier_bytes: int = OOM_CLASSIFIER_BYTES) -> int:
    """How many classes make the classifier weigh ``classifier_bytes`` of fp32 on ``cfg``'s backbone (ci: 400,000
    on 64 features; cpu: 200,000 on 128; ResNet-50: 12,500 on 2,048): the same pressure on every preset."""
    from helpers.core.resnet_layout import feature_width

    return int(round(classifier_bytes / (4 * feature_width(cfg.arch, cfg.width)), -2))


def classifier_oom(cfg, dp_layout: Layout, hybrid_layout: Layout, num_classes: int, work, steps: int = 1,
                   progress: str = "auto") -> dict:
    """The failure hybrid parallel fixes, for real: a classifier of ``num_classes`` (the data's classes padded
    with image-less ones) trained data parallel (``dp_layout``, mp = 1) and on ``hybrid_layout``, every job on
    the same path (CPU: explicit collectives, PyNative). Three jobs of ``steps`` steps:

    1. data parallel without a cap: its per-rank peak virtual size (what ``RLIMIT_AS`` counts);
    2. data parallel under ``cap_between(peak, saving)``: expected to fail with ``JobFailed(kind="oom")``;
    3. the hybrid layout under the same cap: expected to finish; its peak shows the margin below the cap.

    Returns the cap, the measured peaks, the error (or None) and the hybrid job's result."""
    from helpers.core.errors import JobFailed
    from helpers.job.launch import run_job
    from helpers.topics.memory_runs import job_memory

    if dp_layout.mp != 1 or hybrid_layout.mp < 2:
        raise ConfigError(f"classifier_oom compares data parallel (mp = 1) with a split classifier (mp > 1), got "
                          f"{dp_layout.name} and {hybrid_layout.name}")
    big = cfg.replace(num_classes=int(num_classes), steps=int(steps))
    work = Path(work)
    files = {lay.name: write_layout_strategy(big, lay, work / f"strategy_oom_{lay.name}.ckpt")
             for lay in (dp_layout, hybrid_layout)}

    def job(layout, name, cap=None):
        return run_job(hybrid_config(big, layout, files[layout.name], name=name, mem_cap_mb=cap),
                       progress=progress)

    dp = job(dp_layout, f"oom-{dp_layout.name}-uncapped")
    dp_mem = job_memory(dp)
    feature_dim = int(dp.summary("classifier_shape")[0][1])
    saving = classifier_saving_mb(feature_dim, big.num_classes, hybrid_layout)
    cap = cap_between(dp_mem["max_vms_peak"], saving)
    try:
        job(dp_layout, f"oom-{dp_layout.name}-capped", cap)
        error = None
    except JobFailed as exc:
        error = exc
    try:
        hyb = job(hybrid_layout, f"oom-{hybrid_layout.name}-capped", cap)
        hyb_mem = job_memory(hyb)
        hyb_error = None
    except JobFailed as exc:      # recorded (the claim then says it did not fit), not raised
        hyb, hyb_error = None, exc
        hyb_mem = {"max_vms_peak": None, "max_peak_rss": None}
    fits = hyb is not None and len(hyb.summaries) == hyb.config.world_size and hyb_mem["max_vms_peak"] < cap
    below = cap - hyb_mem["max_vms_peak"] if hyb is not None else None
    return {"num_classes": big.num_classes, "feature_dim": feature_dim, "steps": big.steps,
            "dp_layout": dp_layout.name, "hybrid_layout": hybrid_layout.name, "cap_mb": cap,
            "classifier_saving_mb": saving,
            "dp_vms_peak_mb": dp_mem["max_vms_peak"], "hybrid_vms_peak_mb": hyb_mem["max_vms_peak"],
            "dp_rss_peak_mb": dp_mem["max_peak_rss"], "hybrid_rss_peak_mb": hyb_mem["max_peak_rss"],
            "margin_above_mb": dp_mem["max_vms_peak"] - cap, "margin_below_mb": below,
            "dp_classifier_bytes": int(max(dp.summary("classifier_param_bytes"))),
            "hybrid_classifier_bytes": (int(max(hyb.summary("classifier_param_bytes"))) if hyb is not None else
                                        classifier_bytes_planned(feature_dim, big.num_classes, hybrid_layout)),
            "error_kind": error.kind if error else None,
            "hybrid_error_kind": hyb_error.kind if hyb_error else None,
            "dp_oom_reproduced": error is not None and error.kind == "oom", "hybrid_fits_under_cap": bool(fits),
            "error": error, "hybrid_error": hyb_error, "hybrid_result": hyb}


def oom_message(error) -> str:
    """The readable part of a ``JobFailed`` (without the log's tail), or what happened instead."""
    if error is None:
        return "(the job finished: no failure)"
    return str(error).split("\n  --- tail of the log ---")[0]


# ------------------------------------------------------------------------------------ CPU: the cells


def _make_cells():
    """The cells, defined lazily so importing this module does not import MindSpore."""
    import mindspore as ms
    from mindspore import nn, ops

    class HybridLoss(nn.Cell):
        """Per-rank loss of the hybrid layout: backbone on my micro-batch, classifier slice over my group."""

        def __init__(self, net, layout: Layout, rank: int, mp_group: str | None, batch: int):
            super().__init__(auto_prefix=False)
            self.net = net
            self.mp = layout.mp
            self.m = layout.coords(rank)[1]
            self.batch = batch
            self.c_local = int(net.fc.weight.shape[0])
            self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
            if self.mp > 1:
                self.gather_features = ops.AllReduce(ops.ReduceOp.SUM, group=mp_group)
                self.gather_logits = ops.AllReduce(ops.ReduceOp.SUM, group=mp_group)

        def construct(self, x, y):
            f = self.net.features(x)
            if self.mp == 1:
                return self.ce(self.net.fc(f), y)
            b, m, mp, c = self.batch, self.m, self.mp, self.c_local
            # gather the group's features: my block at rows m*b.., zeros elsewhere, summed over the group
            fg = self.gather_features(ops.pad(f, (0, 0, m * b, (mp - 1 - m) * b)))
            part = self.net.fc(fg)                                    # (mp*b, classes/mp): my class slice
            logits = self.gather_logits(ops.pad(part, (m * c, (mp - 1 - m) * c)))   # (mp*b, classes)
            return self.ce(logits[m * b:(m + 1) * b], y)

    class HybridTrainStep(nn.Cell):
        """Gradient of the per-rank loss, reduced as the module docstring says, then the optimizer."""

        def __init__(self, loss_net, optimizer, n_backbone: int, world: int, dp: int, dp_group: str | None,
                     trace=None):
            super().__init__(auto_prefix=False)
            self.trace = trace      # PyNative only: a host-side callable run after each update (StepTrace)
            self.loss_net = loss_net
            self.optimizer = optimizer
            self.weights = optimizer.parameters
            # one forward for the loss and the gradients: the gathers run once per step, in one order
            self.value_and_grad = ms.value_and_grad(loss_net, grad_position=None, weights=self.weights)
            self.n = n_backbone
            # backbone: AllReduce(SUM) over the world, times 1/world (fused by the context's comm_fusion)
            self.reduce_backbone = nn.DistributedGradReducer(self.weights[:n_backbone], mean=True, degree=world)
            self.dp = dp
            if dp > 1:   # classifier slice: AllReduce(SUM) over the ranks holding it, times 1/world
                self.reduce_fc = nn.DistributedGradReducer(self.weights[n_backbone:], mean=True, degree=world,
                                                           fusion_type=2, group=dp_group)
            self.scale = ms.Tensor(1.0 / world, ms.float32)

        def construct(self, x, y):
            loss, grads = self.value_and_grad(x, y)
            back = self.reduce_backbone(grads[:self.n])
            if self.dp > 1:
                fc = self.reduce_fc(grads[self.n:])
            else:
                fc = (grads[self.n] * self.scale, grads[self.n + 1] * self.scale)
            self.optimizer(back + fc)
            if self.trace is not None:
                self.trace()
            return loss

    return ms, HybridLoss, HybridTrainStep


def _ordered_params(net):
    """Trainable parameters, backbone first and the classifier last (the step relies on the order)."""
    params = net.trainable_params()
    back = [p for p in params if p.name not in CLASSIFIER]
    fc = [p for p in params if p.name in CLASSIFIER]
    return back, sorted(fc, key=lambda p: CLASSIFIER.index(p.name))


def build_full_net(cfg, num_classes: int):
    """The full network with the worker's seed: every rank (and the reference) starts from these weights."""
    import mindspore as ms

    from helpers.train.models import build_model

    ms.set_seed(cfg.seed)
    return build_model(cfg.arch, num_classes, cfg.width, cfg.stem, cfg.conv_impl)


def cut_classifier(net, strategy: dict, rank: int):
    """Replace ``net.fc`` by this rank's slice of it, cut with ``helpers.topics.strategy.shard_slice``."""
    import mindspore as ms
    from mindspore import nn

    w = shard_slice(net.fc.weight.asnumpy(), strategy["fc.weight"], rank)
    b = shard_slice(net.fc.bias.asnumpy(), strategy["fc.bias"], rank)
    fc = nn.Dense(w.shape[1], w.shape[0])
    fc.weight.set_data(ms.Tensor(w))
    fc.bias.set_data(ms.Tensor(b))
    net.fc = fc
    net.fc.weight.name, net.fc.bias.name = CLASSIFIER
    return net


def build_hybrid_step(cfg, num_classes: int, rank: int, world: int):
    """``(net, train step)`` for ``cfg.strategy_file`` (the worker's hook). CPU: explicit collectives;
    GPU/Ascend: ``SEMI_AUTO_PARALLEL`` (``build_semi_auto_step``)."""
    if cfg.device_target != "CPU":
        return build_semi_auto_step(cfg, num_classes)
    from mindspore import nn
    from mindspore.communication import create_group

    import mindspore as ms

    # PyNative: each step's gradient was checked against the single-process reference at the same weights
    # (<= 1e-6 per rank, see the module docstring). GRAPH_MODE (HYBRID_MODE=graph) was measured with per-rank
    # losses ~0.1 off from step 2 in a free-running comparison and has not been checked step by step.
    graph = os.environ.get("HYBRID_MODE") == "graph"
    trace_dir = os.environ.get(TRACE_ENV)
    if graph and trace_dir:
        raise ConfigError(f"{TRACE_ENV}: the step trace runs host code inside the step, PyNative only")
    ms.set_context(mode=ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE)
    net = build_full_net(cfg, num_classes)
    strategy = validate_strategy(cfg.strategy_file, net, world)
    layout = classifier_layout(strategy, world)
    cut_classifier(net, strategy, rank)
    mp_group = dp_group = None
    if layout.mp > 1:
        mp_group = f"hybrid_mp_{layout.coords(rank)[0]}"
        create_group(mp_group, list(layout.mp_group(rank)))
    if layout.dp > 1 and layout.mp > 1:
        dp_group = f"hybrid_dp_{layout.coords(rank)[1]}"
        create_group(dp_group, list(layout.dp_group(rank)))
    elif layout.dp > 1:
        from mindspore.communication import GlobalComm

        dp_group = GlobalComm.WORLD_COMM_GROUP
    if getattr(cfg, "init_checkpoint", None):
        load_rank_checkpoint(net, cfg.init_checkpoint, rank)
    ms, HybridLoss, HybridTrainStep = _make_cells()
    back, fc = _ordered_params(net)
    opt = nn.Momentum(back + fc, cfg.lr, cfg.momentum, weight_decay=cfg.weight_decay)
    loss_net = HybridLoss(net, layout, rank, mp_group, cfg.micro_batch_size)
    trace = StepTrace(trace_dir, rank, back + fc) if trace_dir else None
    step = HybridTrainStep(loss_net, opt, len(back), world, layout.dp, dp_group, trace)
    step.set_train()
    return net, step


class StepTrace:
    """This rank's trainable parameters before the first step and after every update:
    ``<trace_dir>/rank_<r>/step_<s>.npz`` (``s`` = updates done). ``reference_train(follow=...)`` reads them."""

    def __init__(self, trace_dir, rank: int, params):
        self.dir = Path(trace_dir) / f"rank_{rank}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.params = list(params)
        self.done = 0
        self.save()

    def save(self) -> Path:
        path = self.dir / f"step_{self.done}.npz"
        np.savez(path, **{p.name: p.asnumpy() for p in self.params})
        return path

    def __call__(self) -> None:
        self.done += 1
        self.save()


def read_trace(trace_dir, strategy_file, world_size: int, step: int) -> dict:
    """The full network's trainable parameters after ``step`` updates of a traced hybrid run: the backbone
    from rank 0, ``fc.weight``/``fc.bias`` put back together from the ranks' shards (``merge_shards``)."""
    from helpers.topics.strategy import merge_shards

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


# --------------------------------------------------------------------------- checkpoints of a hybrid run


# Each rank writes its own slice. With the default integrated_save=True, save_checkpoint under
# SEMI_AUTO_PARALLEL runs _get_merged_param_data (mindspore/train/serialization.py) on every parameter whose
# tensor map splits it: an AllGather cell over the parameter's group, then _reshape_param_data back to the
# full shape, so each rank would write the whole classifier and merge_rank_checkpoints would take it for a
# slice. With False that function gathers nothing. (Outside auto/semi-auto parallel the network has no
# parameter layouts and it is not called: the CPU path's sliced nets are saved as they are.)
RANK_SLICE_SAVE = {"integrated_save": False}


def save_rank_checkpoint(net, run_dir, rank: int) -> dict:
    """``<run_dir>/ckpt/rank_<r>/hybrid<r>.ckpt`` (network parameters, BatchNorm statistics included; not
    the optimizer's momentum), the layout ``merge_rank_checkpoints`` reads. Returns summary fields."""
    import mindspore as ms

    path = Path(run_dir) / "ckpt" / f"rank_{rank}" / f"hybrid{rank}.ckpt"
    path.parent.mkdir(parents=True, exist_ok=True)
    ms.save_checkpoint(net, str(path), **RANK_SLICE_SAVE)
    fc_bytes = sum(int(p.asnumpy().nbytes) for p in (net.fc.weight, net.fc.bias))
    return {"checkpoint": str(path), "classifier_param_bytes": fc_bytes,
            "classifier_shape": [int(d) for d in net.fc.weight.shape]}


def load_rank_checkpoint(net, ckpt_dir, rank: int) -> None:
    """Load ``<ckpt_dir>/rank_<r>/*.ckpt`` (e.g. from ``resplit_checkpoint``) into this rank's network;
    every parameter must be found with this rank's shape."""
    import mindspore as ms

    files = sorted((Path(ckpt_dir) / f"rank_{rank}").glob("*.ckpt"))
    if not files:
        raise DataError(f"init_checkpoint: no {ckpt_dir}/rank_{rank}/*.ckpt")
    params = ms.load_checkpoint(str(files[-1]))
    own = {p.name: p for p in net.get_parameters()}
    missing = sorted(set(own) - set(params))
    if missing:
        raise DataError(f"{files[-1]} lacks {len(missing)} parameters, e.g. {missing[:3]}")
    for name, p in own.items():
        if tuple(params[name].shape) != tuple(p.shape):
            raise DataError(f"{files[-1]}: {name!r} has shape {tuple(params[name].shape)}, this rank's "
                            f"layout needs {tuple(p.shape)} (checkpoint cut for another layout?)")
    ms.load_param_into_net(net, params, strict_load=True)


# ------------------------------------------------------------------ GPU/Ascend: SEMI_AUTO_PARALLEL path


def semi_auto_plan(cfg) -> dict:
    """What the GPU/Ascend path does with ``cfg.strategy_file``: ``context`` (keywords for
    ``mindspore.set_auto_parallel_context``, loading the file) and the classifier's ``shard()`` strategies."""
    from helpers.topics.strategy import classifier_bias_strategy, classifier_shard_strategy, semi_auto_context

    if not cfg.strategy_file:
        raise ConfigError("strategy_file: the semi-auto path needs a strategy file")
    layout = classifier_layout(read_strategy(cfg.strategy_file), cfg.world_size)
    return {"layout": layout.name,
            "context": semi_auto_context(layout, cfg.strategy_file, mode="load"),
            "matmul_in_strategy": classifier_shard_strategy(layout),
            "bias_add_in_strategy": classifier_bias_strategy(layout)}


def build_semi_auto_step(cfg, num_classes: int):
    """GPU/Ascend: MindSpore splits the classifier itself (``shard()``), loading the strategy file; the step
    is the preset's recipe (``helpers.train.recipe``). ``init_checkpoint`` is a full checkpoint file (e.g.
    ``merge_rank_checkpoints``'s output), loaded into the unsplit network; compiling cuts each rank's slice.
    ``HYBRID_TRACE_DIR`` is refused (a compiled step runs no host code between updates)."""
    # Cutting at compile: the compiler calls _slice_parameter (mindspore/parallel/_utils.py) for every
    # parameter, which slices data already loaded (has_init False) with _load_tensor_by_layout. Per-rank slice
    # files would have to be loaded after compiling (MindSpore's "Model Transformation" tutorial), i.e. after
    # a first batch.
    import mindspore as ms

    from helpers.train.recipe import build_loss, build_optimizer, build_train_step
    from helpers.topics.strategy import shard_classifier

    if os.environ.get(TRACE_ENV):
        raise ConfigError(f"{TRACE_ENV}: the step trace runs host code after every update, which a compiled "
                          "SEMI_AUTO_PARALLEL step on GPU/Ascend cannot; trace on the CPU path")
    plan = semi_auto_plan(cfg)
    ms.set_auto_parallel_context(**plan["context"])
    net = build_full_net(cfg, num_classes)
    if cfg.init_checkpoint:
        load_full_checkpoint(net, cfg.init_checkpoint)
    shard_classifier(net.fc, Layout.parse(plan["layout"]))
    step = build_train_step(cfg, net, build_loss(cfg), build_optimizer(cfg, net.trainable_params()))
    return net, step


def load_full_checkpoint(net, path) -> None:
    """Load a full checkpoint file (e.g. ``merge_rank_checkpoints``'s output) into the unsplit network."""
    import mindspore as ms

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"init_checkpoint: on GPU/Ascend give the merged full checkpoint file, not {path} "
                          "(MindSpore slices it per the strategy file when it compiles)")
    params = ms.load_checkpoint(str(path))
    own = {p.name: p for p in net.get_parameters()}
    missing = sorted(set(own) - set(params))
    if missing:
        raise DataError(f"{path} lacks {len(missing)} parameters of this network, e.g. {missing[:3]}")
    wrong = [n for n, p in own.items() if tuple(params[n].shape) != tuple(p.shape)]
    if wrong:
        raise DataError(f"{path}: {wrong[0]!r} has shape {tuple(params[wrong[0]].shape)}, the network "
                        f"{tuple(own[wrong[0]].shape)} (a checkpoint of another model?)")
    ms.load_param_into_net(net, params, strict_load=True)


# --------------------------------------------------------------------------------------- the reference


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
    import mindspore.dataset as ds
    from mindspore import nn, ops

    from helpers.core.config import JobConfig
    from helpers.train.data import build_dataset

    run_dir = Path(run_dir)
    cfg = JobConfig.load(run_dir / "config.json")
    steps = reference_steps(cfg, steps, follow)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    num_classes = _num_classes(cfg)
    world = cfg.world_size
    net = build_full_net(cfg, num_classes)
    if cfg.init_checkpoint:
        raise ConfigError("reference_train starts from the seed's weights; run it for a job without "
                          "init_checkpoint")
    back, fc = _ordered_params(net)
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

    grad_of = GradOf()
    ds.config.set_seed(cfg.seed)
    its = [build_dataset(cfg, "train", r, world, batch_size=cfg.micro_batch_size).repeat()
           .create_tuple_iterator(num_epochs=-1) for r in range(world)]
    losses, step_diff = [], []
    for s in range(steps):
        if follow:
            state = read_trace(follow, cfg.strategy_file, world, s)
            for p in weights:
                p.set_data(ms.Tensor(state[p.name]))
        total, per_rank = None, []
        for r in range(world):
            x, y = next(its[r])
            loss, grads = grad_of(x, y)
            per_rank.append(float(loss.asnumpy()))
            grads = [g.asnumpy().astype(np.float64) for g in grads]   # host copies, summed in float64
            total = grads if total is None else [a + g for a, g in zip(total, grads)]
        opt(tuple(ms.Tensor((g / world).astype(np.float32)) for g in total))
        losses.append(per_rank)
        if follow:
            after = read_trace(follow, cfg.strategy_file, world, s + 1)
            step_diff.append(max(float(np.max(np.abs(p.asnumpy() - after[p.name]))) for p in weights))
    params = {p.name: p.asnumpy() for p in weights}
    if out_path:
        np.savez(out_path, **params)
    return {"losses": losses, "params": params, "steps": steps,
            **({"step_param_diff": step_diff} if follow else {})}


def reference_command(run_dir, out_path, follow=None, steps: int | None = None) -> list[str]:
    """The command line ``run_reference`` starts (``python -m helpers.topics.hybrid reference ...``)."""
    cmd = [sys.executable, "-m", "helpers.topics.hybrid", "reference", str(run_dir), str(out_path)]
    if follow:
        cmd.append(str(follow))
    if steps is not None:
        cmd += ["--steps", str(int(steps))]
    return cmd


def run_reference(run_dir, timeout_s: float = 600.0, follow=None, steps: int | None = None) -> dict:
    """``reference_train`` in a separate Python process (the notebook kernel stays light); returns
    ``{"losses": per step per rank, "params": {name: array}, "steps": n}`` (and ``step_param_diff`` with
    ``follow``). ``steps`` caps the updates (``reference_steps``)."""
    run_dir = Path(run_dir)
    if steps is not None:
        from helpers.core.config import JobConfig

        reference_steps(JobConfig.load(run_dir / "config.json"), steps)      # a bad cap fails before starting
    tag = "_follow" if follow else ""
    out = run_dir / f"reference{tag}.npz"
    proc = subprocess.run(reference_command(run_dir, out, follow, steps), capture_output=True, text=True,
                          timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"reference run failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    res = json.loads((run_dir / f"reference{tag}_losses.json").read_text())
    with np.load(out) as z:
        res["params"] = {k: z[k] for k in z.files}
    return res


def trainable_diff(full_params: dict, reference: dict) -> dict:
    """``{name: max |a - b|}`` over the reference's (trainable) parameters."""
    missing = sorted(set(reference) - set(full_params))
    if missing:
        raise DataError(f"merged checkpoint lacks {missing[:3]}")
    return {k: float(np.max(np.abs(np.asarray(full_params[k], np.float64) - reference[k]))) for k in reference}


def _main(argv) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m helpers.topics.hybrid")
    parser.add_argument("command", choices=["reference"])
    parser.add_argument("run_dir")
    parser.add_argument("out_npz")
    parser.add_argument("trace_dir", nargs="?")
    parser.add_argument("--steps", type=int)
    args = parser.parse_args(argv)
    res = reference_train(args.run_dir, args.out_npz, steps=args.steps, follow=args.trace_dir)
    res.pop("params")
    name = "reference_follow_losses.json" if args.trace_dir else "reference_losses.json"
    (Path(args.run_dir) / name).write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
