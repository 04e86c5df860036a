"""Chapter 04: what overlapping the gradient AllReduce with backward would save on cards, for the gpu8 preset's
ResNet-50 (a calculation from published figures, ``helpers.core.overlap_savings``; nothing here is measured).

The buckets are the model's float32 gradients (counted from the ResNet-50 the course builds) cut in backward order
at the preset's ``comm_fusion`` threshold, as MindSpore's fusion pass does (``topics.comm_fusion``; the gpu8
rehearsal counted 6). Backward time is spread over them by their layers' forward multiply-adds (the memory
planner's walk), BatchNorm and biases counting nothing.
"""

from __future__ import annotations

from helpers.core.config import PRESETS, JobConfig
from helpers.core.memory_planner import layer_walk
from helpers.core.overlap_savings import (BACKWARD_SHARE, PAIRS, PUBLISHED_BUSBW, PUBLISHED_THROUGHPUT,
                                          group_work, pair_savings)
from helpers.output.tables import show_md, show_table
from helpers.topics.comm_fusion import fusion_threshold_bytes, threshold_buckets
from helpers.topics.shard_stats import IMAGENET_CLASSES

HEADERS = ["cards", "AllReduce (ms)", "left after backward (ms)", "saving (ms)", "backward (ms)", "saving / step"]


def gpu8_config() -> JobConfig:
    """The gpu8 preset as written (no host adjustment: it describes 8 cards, not this machine)."""
    return JobConfig(**PRESETS["gpu8"])


def tensor_macs(rows, counts) -> list[float]:
    """Forward multiply-adds per parameter tensor (forward order): a conv's or fc's on its weight, 0 on the rest."""
    out, i = [], 0
    for r in (r for r in rows if r.params):
        if r.kind == "conv":
            sizes, macs = [r.params], [float(r.params * r.out_shape[1] * r.out_shape[2])]
        elif r.kind == "bn":
            sizes, macs = [r.params // 2] * 2, [0.0, 0.0]
        else:                                           # fc: weight, bias
            sizes, macs = [r.params - r.out_shape[0], r.out_shape[0]], [float(r.params - r.out_shape[0]), 0.0]
        if list(counts[i:i + len(sizes)]) != sizes:
            raise ValueError(f"{r.name}: the model's tensors {list(counts[i:i + len(sizes)])} are not {sizes}")
        out, i = out + macs, i + len(sizes)
    if i != len(counts):
        raise ValueError(f"the walk covers {i} of the model's {len(counts)} parameter tensors")
    return out


def gpu8_gradients(cfg=None) -> tuple[list[int], list[float]]:
    """Bytes and forward multiply-adds of each float32 gradient of the gpu8 ResNet-50, last layer first."""
    import numpy as np

    from helpers.train.models import build_model

    cfg = cfg or gpu8_config()
    net = build_model(cfg.arch, IMAGENET_CLASSES, cfg.width, cfg.stem, "native")
    counts = [int(np.prod(p.shape)) for p in net.trainable_params()]
    macs = tensor_macs(layer_walk(cfg.arch, cfg.image_size, IMAGENET_CLASSES, cfg.width, cfg.stem), counts)
    return [4 * c for c in counts][::-1], macs[::-1]


def calculation(cfg=None) -> dict:
    """The buckets and, per ``PAIRS`` entry, what overlap would save (ms) and the sources: what the chapter records."""
    cfg = cfg or gpu8_config()
    grads, macs = gpu8_gradients(cfg)
    buckets = threshold_buckets(grads, fusion_threshold_bytes(cfg.comm_fusion))
    work = group_work(grads, macs, buckets)
    out = {"arch": cfg.arch, "gradient_mib": sum(grads) / 2**20, "bucket_mib": [b / 2**20 for b in buckets],
           "batch_per_card": cfg.batch_per_rank, "backward_share": BACKWARD_SHARE, "pairs": {}}
    for label, bw_key, tp_key in PAIRS:
        p = pair_savings(label, buckets, work, cfg.batch_per_rank)
        out["pairs"][label] = {
            **{f"{k[:-2]}_ms": 1e3 * p[k] for k in ("comm_s", "exposed_s", "saving_s", "backward_s", "step_s")},
            "saving_share": p["saving_share"], "busbw_gbs": [b["busbw_gbs"] for b in p["buckets"]],
            "hardware": PUBLISHED_BUSBW[bw_key]["hardware"], "busbw_url": PUBLISHED_BUSBW[bw_key]["url"],
            "throughput_hardware": PUBLISHED_THROUGHPUT[tp_key]["hardware"],
            "throughput_url": PUBLISHED_THROUGHPUT[tp_key]["url"]}
    return out


def show_overlap_calculation(cfg=None) -> dict:
    """Shows the calculation (a sentence, a table, the sources), labelled as one; returns ``calculation()``."""
    c = calculation(cfg)
    show_md(f"**Calculated from published figures, not measured:** what overlapping the AllReduce with backward "
            f"would save for gpu8's {c['arch']}, {c['gradient_mib']:.1f} MiB of gradients in "
            f"{len(c['bucket_mib'])} buckets (method: appendix).")
    show_table([(f"{k}, {p['hardware'].split(' (')[0]}", p["comm_ms"], p["exposed_ms"], p["saving_ms"],
                 p["backward_ms"], f"{p['saving_share']:.1%}") for k, p in c["pairs"].items()], HEADERS)
    show_md("Sources: " + "; ".join(f"{k} [busbw]({p['busbw_url']}), [img/s]({p['throughput_url']})"
                                    for k, p in c["pairs"].items()) + ".")
    return c
