"""BatchNorm groups and training: one global batch normalised as G groups, held-out loss after N updates over seeds."""

from __future__ import annotations

import time

import numpy as np

from helpers.topics.seed_repeats import paired, spread

RESULTS_FILE = "benchmarks/results/bn_groups.json"     # ``python -m benchmarks bn_groups``
MODEL = {"arch": "resnet18", "width": 0.125, "stem": "small", "image_size": 32}   # the ci preset's model and data
CALIBRATION_IMAGES = 256     # training images whose statistics BatchNorm uses at evaluation (fixed, every run)


def group_slices(batch: int, groups: int) -> list[slice]:
    """The ``groups`` consecutive slices of ``batch`` images that BatchNorm normalises separately."""
    if groups < 1 or batch % groups:
        raise ValueError(f"groups: {groups} does not divide the global batch of {batch} into equal groups")
    size = batch // groups
    return [slice(i * size, (i + 1) * size) for i in range(groups)]


def rank_groups(batch: int, groups: int, ranks: int, rank: int) -> list[slice]:
    """The groups one rank of ``ranks`` normalises: its contiguous share of the global batch's ``groups``."""
    if groups % ranks:
        raise ValueError(f"ranks: {groups} groups cannot be shared equally by {ranks} ranks")
    per_rank = groups // ranks
    return group_slices(batch, groups)[rank * per_rank:(rank + 1) * per_rank]


def batch_order(n_images: int, batch: int, updates: int, seed: int) -> np.ndarray:
    """``(updates, batch)`` image indices: shuffled epochs drawn from ``seed``, the same for every grouping."""
    rng = np.random.default_rng(seed)
    per_epoch = n_images // batch
    if per_epoch < 1:
        raise ValueError(f"batch: {batch} is more than the {n_images} images")
    epochs = -(-updates // per_epoch)
    order = np.concatenate([rng.permutation(n_images)[:per_epoch * batch] for _ in range(epochs)])
    return order[:updates * batch].reshape(updates, batch)


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Mean softmax cross entropy and accuracy of ``logits`` for integer ``labels``."""
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(labels.size), labels].mean()), float((logits.argmax(axis=1) == labels).mean())


def judge(values: dict) -> dict:
    """Each grouping's spread over seeds and its paired difference from the first; ``beyond_spread``: 0 excluded."""
    keys = list(values)
    out = {"spread": {k: spread(v) for k, v in values.items()}, "vs_one_group": {}}
    for k in keys[1:]:
        p = paired(values[k], values[keys[0]])
        out["vs_one_group"][k] = {**p, "beyond_spread": p["ranked"]}
    return out


def final_values(measured: dict, key: str = "held_out_loss") -> dict:
    """``{groups: [the value after the last update, one per seed]}`` from ``train_groups``' record."""
    last = str(measured["updates"])
    return {str(g): [measured["runs"][str(g)][str(s)][key][last] for s in measured["seeds"]]
            for g in measured["groups"]}


def _ci_parts(batch: int, conv_impl: str, classes: int):
    """The ci preset's config, a model factory and its optimizer recipe."""
    from helpers.core.config import job_config
    from helpers.train.models import build_model

    cfg = job_config("ci", conv_impl=conv_impl, global_batch=batch, world_size=1, **MODEL)
    return cfg, lambda: build_model(cfg.arch, classes, cfg.width, cfg.stem, cfg.conv_impl)


def one_update(groups: int, ranks: int = 1, rank: int = 0, batch: int = 16, seed: int = 1,
               conv_impl: str = "im2col") -> dict:
    """One update of the ci model on a fixed batch in ``groups`` groups, this rank's groups as its micro-batches."""
    import mindspore as ms
    from mindspore import nn

    from helpers.train.grad_accumulation import AccumulatingTrainStep
    from helpers.train.recipe import build_loss, build_optimizer

    cfg, model = _ci_parts(batch, conv_impl, 10)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 3, MODEL["image_size"], MODEL["image_size"])).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    ms.set_seed(seed)
    net = model()
    net.set_train()
    opt = build_optimizer(cfg, net.trainable_params())
    mine = rank_groups(batch, groups, ranks, rank)
    step = AccumulatingTrainStep(nn.WithLossCell(net, build_loss(cfg)), opt, len(mine))
    flat = lambda ps: np.concatenate([p.asnumpy().ravel() for p in ps]).astype(np.float64)
    w0 = flat(net.trainable_params())
    step([(ms.Tensor(x[s]), ms.Tensor(y[s])) for s in mine])
    means = [p for p in net.get_parameters() if p.name.endswith("moving_mean")]
    return {"w0": w0, "w1": flat(net.trainable_params()), "running_mean": flat(means)}


def one_update_here(groups: int, batch: int, seed: int, out: str) -> str:
    """``one_update`` in this (fresh) process, one rank (every group a micro-batch), saved to ``out`` (npz)."""
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    np.savez(out, **one_update(groups, 1, 0, batch, seed))
    return out


def update_distance(ranks: dict, one: dict) -> float:
    """How far the ranks' update is from the one-process update, in units of the latter's size."""
    w0, a, b = (np.asarray(v) for v in (one["w0"], ranks["w1"], one["w1"]))
    return float(np.linalg.norm(a - b) / np.linalg.norm(b - w0))


def _load_split(cfg, split: str):
    import mindspore.dataset as ds

    from helpers.train.data import build_dataset

    data = build_dataset(cfg, split, 0, 1, sampler=ds.SequentialSampler(), batch_size=100_000, drop_remainder=False)
    return next(data.create_tuple_iterator(output_numpy=True))


def _copy_params(dst, src) -> None:
    """Every parameter of ``src`` (weights and BatchNorm's running statistics) into ``dst``, in order."""
    for d, s in zip(dst.get_parameters(), src.get_parameters(), strict=True):
        if d.shape != s.shape or d.name.split(".")[-1] != s.name.split(".")[-1]:
            raise ValueError(f"parameter order differs: {d.name} {d.shape} vs {s.name} {s.shape}")
        d.set_data(s.data.copy())


def _calibrator(net):
    """``net`` in training mode whose BatchNorm layers replace their running statistics by the last batch's."""
    from mindspore import nn, ops

    for _, cell in net.cells_and_names():
        if isinstance(cell, nn.BatchNorm2d):
            cell.bn_train = ops.BatchNorm(is_training=True, epsilon=cell.eps, momentum=1.0, data_format=cell.format)
    net.set_train()
    return net


class _Evaluation:
    """Held-out loss and accuracy of a training net: BatchNorm on calibration images' statistics, and on its own."""

    def __init__(self, model, x_val, y_val, x_cal):
        self.evaluator, self.calibrator = model(), _calibrator(model())
        self.evaluator.set_train(False)
        self.x_val, self.y_val, self.x_cal = x_val, y_val, x_cal

    def __call__(self, net) -> dict:
        _copy_params(self.evaluator, net)
        running = cross_entropy(self.evaluator(self.x_val).asnumpy(), self.y_val)
        _copy_params(self.calibrator, net)
        self.calibrator(self.x_cal)
        _copy_params(self.evaluator, self.calibrator)
        held_out = cross_entropy(self.evaluator(self.x_val).asnumpy(), self.y_val)
        return {"held_out_loss": held_out[0], "held_out_accuracy": held_out[1], "running_loss": running[0],
                "running_accuracy": running[1]}


def _train_grouping(cfg, model, groups: int, seeds, updates: int, data, evaluate, checkpoints) -> dict:
    """One grouping's runs, one per seed, on one compiled step whose state is reset to the seed's start."""
    import mindspore as ms
    from mindspore import nn

    from helpers.train.grad_accumulation import AccumulatingTrainStep
    from helpers.train.recipe import build_loss, build_optimizer

    x_train, y_train = data
    slices = group_slices(cfg.global_batch, groups)
    net = model()
    net.set_train()
    opt = build_optimizer(cfg, net.trainable_params())
    step = AccumulatingTrainStep(nn.WithLossCell(net, build_loss(cfg)), opt, len(slices))
    zeroed = [*opt.moments, *step.buffers]      # momentum and accumulation buffers start at 0 for each seed
    runs = {}
    for seed in seeds:
        ms.set_seed(int(seed))
        _copy_params(net, model())               # the seed's initial weights, the same for every grouping
        for p in zeroed:
            p.set_data(ms.Tensor(np.zeros(p.shape, ms.dtype_to_nptype(p.dtype))))
        t0, losses, evals = time.monotonic(), [], {}
        for u, idx in enumerate(batch_order(len(y_train), cfg.global_batch, updates, int(seed)), start=1):
            losses.append(step([(ms.Tensor(x_train[idx[s]]), ms.Tensor(y_train[idx[s]])) for s in slices]))
            if u in checkpoints:
                evals[str(u)] = evaluate(net)
        runs[str(seed)] = {"train_loss": losses, "wall_s": round(time.monotonic() - t0, 1),
                           **{k: {u: e[k] for u, e in evals.items()} for k in next(iter(evals.values()))}}
    return runs


def train_groups(groups: list, seeds: list, updates: int, batch: int = 64, eval_every: int = 10,
                 conv_impl: str = "im2col", threads: int = 1) -> dict:
    """In this process: the ci model trained per grouping and seed, held-out figures every ``eval_every`` updates."""
    import mindspore as ms
    from mindspore.device_context.cpu.op_tuning import threads_num

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    threads_num(threads)
    cfg, _ = _ci_parts(batch, conv_impl, 10)
    x_train, y_train = _load_split(cfg, "train")
    x_val, y_val = _load_split(cfg, "val")
    cfg, model = _ci_parts(batch, conv_impl, int(max(y_train.max(), y_val.max())) + 1)
    x_cal = ms.Tensor(x_train[np.random.default_rng(0).permutation(len(y_train))[:CALIBRATION_IMAGES]])
    evaluate = _Evaluation(model, ms.Tensor(x_val), y_val, x_cal)
    checkpoints = sorted({*range(eval_every, updates + 1, eval_every), updates})
    runs = {str(g): _train_grouping(cfg, model, int(g), seeds, updates, (x_train, y_train), evaluate, checkpoints)
            for g in groups}
    return {"groups": [int(g) for g in groups], "seeds": [int(s) for s in seeds], "updates": updates,
            "batch": batch, "checkpoints": checkpoints, "conv_impl": conv_impl, "threads": threads,
            "lr": cfg.scaled_lr, "momentum": cfg.momentum, "weight_decay": cfg.weight_decay,
            "calibration_images": CALIBRATION_IMAGES, "train_images": len(y_train),
            "held_out_images": len(y_val), "runs": runs}


def layout(groups: int, micro: int = 4) -> str:
    """What ``groups`` BatchNorm groups stand for when each rank runs ``micro`` micro-batches per update."""
    if groups == 1:
        return "the full batch in one group (one process, or a synchronised BatchNorm)"
    if groups <= micro:
        return f"{groups} micro-batches on 1 rank, or {groups} ranks without accumulation"
    ranks = groups // micro
    return f"{micro} micro-batches on each of {ranks} ranks, or {groups} ranks" if groups % micro == 0 \
        else f"{groups} ranks without accumulation"


def _summary(fin: dict, g: str) -> dict:
    """One grouping's spread over seeds and, unless it is the first, its paired difference from the first."""
    s, p = fin["spread"][g], fin["vs_one_group"].get(g)
    return {"mean": s["mean"], "std": s["std"], "by_seed": fin["by_seed"][g],
            **({"diff": p["mean"], "half_width": p["half_width"], "beyond_spread": p["beyond_spread"]} if p else {})}


def chapter_record(bench: dict, key: str = "held_out_loss") -> dict:
    """What chapter 02 records of the benchmark: per grouping its spread and paired difference; the source."""
    fin, running = bench["final"][key], bench["final"].get("running_loss")
    groups = {str(g): {"images": bench["batch"] // g, **_summary(fin, str(g)),
                       **({"running": _summary(running, str(g))} if running else {})} for g in bench["groups"]}
    return {"source": RESULTS_FILE, "measure": key, "updates": bench["updates"], "seeds": bench["seeds"],
            "batch": bench["batch"], "groups": groups, "date": bench["machine"]["date_utc"],
            "wall_s": bench.get("wall_s")}


def _diff(v: dict) -> str:
    if "diff" not in v:
        return "—"
    return f"{v['diff']:+.3f} ± {v['half_width']:.3f} ({'beyond' if v['beyond_spread'] else 'within'} the spread)"


def table_rows(rec: dict) -> list[tuple]:
    """The chapter's table: per grouping, what it stands for, each seed's loss, mean ± std, the paired difference."""
    rows = []
    for g, v in rec["groups"].items():
        run = v.get("running")
        rows.append((f"{g} × {v['images']}", layout(int(g)), " ".join(f"{x:.3f}" for x in v["by_seed"]),
                     f"{v['mean']:.3f} ± {v['std']:.3f}", _diff(v),
                     *([f"{run['mean']:.3f} ± {run['std']:.3f}; {_diff(run)}"] if run else [])))
    return rows


def verdict_text(rec: dict) -> str:
    """The chapter's sentence, result first: which groupings moved held-out loss beyond the seeds' spread."""
    others = {g: v for g, v in rec["groups"].items() if "diff" in v}
    moved = [f"{g} groups of {v['images']} moved it {v['diff']:+.3f}" for g, v in others.items() if v["beyond_spread"]]
    n = len(rec["seeds"])
    head = (f"Benchmark, not this run (`{rec['source'].rsplit('/', 1)[-1]}`): after {rec['updates']} updates "
            + (f"no grouping moved held-out loss beyond the {n} seeds' spread" if not moved else
               f"{' and '.join(moved)} in held-out loss, beyond the {n} seeds' spread"))
    last = list(others)[-1] if others else None
    run = rec["groups"][last].get("running") if last else None
    if not run:
        return head + "."
    return (head + f"; with one process's running averages (last column), {last} groups moved it {run['diff']:+.2f}, "
            f"{'beyond' if run['beyond_spread'] else 'within'} the spread.")


def plot_curves(bench: dict, ax, key: str = "held_out_loss") -> None:
    """Held-out loss over updates per grouping: the seeds' mean and their range."""
    for g in bench["groups"]:
        runs = bench["runs"][str(g)]
        xs = [int(u) for u in bench["checkpoints"]]
        ys = np.array([[runs[str(s)][key][str(u)] for u in xs] for s in bench["seeds"]])
        line, = ax.plot(xs, ys.mean(axis=0), marker="o", label=f"{g} group{'s' * (g > 1)} of {bench['batch'] // g}")
        ax.fill_between(xs, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set(xlabel="update", ylabel="held-out loss", yscale="log")
    ax.legend(fontsize=8)


def show_bn_groups() -> dict:
    """Chapter 02's figure and table of the committed benchmark, labelled as such; returns ``chapter_record``."""
    import json

    import matplotlib.pyplot as plt

    from helpers.core.paths import resolve
    from helpers.output.tables import show_md, show_table

    bench = json.loads(resolve(RESULTS_FILE).read_text())
    rec = chapter_record(bench)
    show_md(verdict_text(rec))
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    plot_curves(bench, ax)
    ax.set_title(f"benchmark, not this run: {RESULTS_FILE}\n{len(bench['seeds'])} seeds, mean and range",
                 fontsize=9)
    fig.tight_layout()
    plt.show()
    rows = table_rows(rec)     # shown: the paired differences from 1 group (the figure shows each grouping's seeds)
    running = ["the same, running averages"] if len(rows[0]) == 6 else []
    show_table([(r[0], r[4], *(x.split("; ")[-1] for x in r[5:])) for r in rows if r[4] != "—"],
               ["groups × images", "held-out loss minus 1 group (95 %)", *running])
    return rec
