"""The classifier of a hybrid job on one rank: its layout in the strategy file, the class count, the full network
every rank starts from, this rank's slice of ``fc``, and the per-rank checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from helpers.core.errors import ConfigError, DataError
from helpers.train.strategy_layout import Layout, layout_to_dict, shard_slice

CLASSIFIER = ("fc.weight", "fc.bias")


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


def num_classes_of(cfg) -> int:
    """The classifier's rows: ``cfg.num_classes`` or else the train split's class folders (never fewer)."""
    from helpers.train.image_folder import scan_split

    found = len(scan_split(cfg.data_dir, "train").classes)
    want = getattr(cfg, "num_classes", None) or found
    if want < found:
        raise ConfigError(f"num_classes: {want} is fewer than the {found} class folders of {cfg.data_dir}")
    return want


def ordered_params(net):
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
    """Replace ``net.fc`` by this rank's slice of it, cut with ``helpers.train.strategy_layout.shard_slice``."""
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


# Each rank writes its own slice. With the default integrated_save=True, save_checkpoint under
# SEMI_AUTO_PARALLEL runs _get_merged_param_data (mindspore/train/serialization.py) on every parameter whose
# tensor map splits it: an AllGather cell over the parameter's group, then _reshape_param_data back to the
# full shape, so each rank would write the whole classifier and merge_rank_checkpoints would take it for a
# slice. With False that function gathers nothing. (Outside auto/semi-auto parallel the network has no
# parameter layouts and it is not called: the CPU path's sliced nets are saved as they are.)
RANK_SLICE_SAVE = {"integrated_save": False}
# Set (to "1") by helpers.topics.hybrid.classifier_oom, whose checkpoints nothing reads: its ranks write none.
# save_checkpoint copies a parameter twice (Tensor.get_bytes, then the pure-Python protobuf serializer that
# mindspore/run_check/_check_version.py selects; mindspore/train/serialization.py, _write_parameter_bytes_data):
# a 1x2 rank's 50 MB classifier slice took it 55-70 MB above its trained size (ci), into that experiment's cap.
NO_CHECKPOINT_ENV = "HYBRID_NO_CHECKPOINT"


def save_rank_checkpoint(net, run_dir, rank: int) -> dict:
    """``<run_dir>/ckpt/rank_<r>/hybrid<r>.ckpt`` (network parameters, BatchNorm statistics included; not
    the optimizer's momentum), the layout ``merge_rank_checkpoints`` reads, unless ``NO_CHECKPOINT_ENV`` is set
    (then ``checkpoint`` is None). Returns summary fields."""
    import mindspore as ms

    path = Path(run_dir) / "ckpt" / f"rank_{rank}" / f"hybrid{rank}.ckpt"
    if os.environ.get(NO_CHECKPOINT_ENV) == "1":
        path = None
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        ms.save_checkpoint(net, str(path), **RANK_SLICE_SAVE)
    fc_bytes = sum(int(p.nbytes) for p in (net.fc.weight, net.fc.bias))   # Tensor.nbytes: no host copy
    return {"checkpoint": str(path) if path else None, "classifier_param_bytes": fc_bytes,
            "classifier_shape": [int(d) for d in net.fc.weight.shape]}


def optimizer_state_norms(step, net) -> dict:
    """The L2 norms of the optimizer's momentum and of the weights: what a weights-only checkpoint drops, beside
    what it keeps (MindSpore's ``Momentum`` names its buffers ``moments.<parameter>``). A dot product of each
    parameter's own storage: no copy, so a job under a memory cap (chapter 03's) is not pushed over it here."""
    import numpy as np

    def norm(params) -> float:
        return float(np.sqrt(sum(float(np.dot(x, x)) for x in (p.asnumpy().reshape(-1) for p in params))))
    return {"momentum_norm": norm(p for p in step.get_parameters() if p.name.startswith("moments.")),
            "weight_norm": norm(net.trainable_params())}


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
