"""The planner's counts under other accounts, for chapter 02: per-layer tables, published figures, the blog's claim.

``helpers.core.memory_planner`` answers "what does a step keep"; this module sets that count next to what others
published (``PUBLISHED``, ``compare_published``), what a "needs more than N GiB" claim would require
(``keep_scenarios``), oneDNN's plain-layout copies on AVX-512 CPUs (``onednn_ncsp_copy_bytes_per_image``) and
per-layer rows for display (``layer_table``).
"""

from __future__ import annotations

from helpers.core.errors import ConfigError
from helpers.core.memory_planner import GIB, PRECISIONS, estimate, layer_walk, max_batch


def layer_table(arch: str, batch: int = 1, image_size: int = 224, by: str = "block", **kwargs) -> list[dict]:
    """Rows for display: per op (``by="op"``), per residual block or per stage, in forward order.

    Each row gives the output shape (last op of the group), trainable parameters, and the memory kept for
    backward by the group for ``batch`` images in the estimate's precision.
    """
    if by not in ("op", "block", "stage"):
        raise ConfigError(f"by: must be 'op', 'block' or 'stage' (got {by!r})")
    est = estimate(arch, batch, image_size, **kwargs)
    act_b = PRECISIONS[est.precision][0]
    groups: dict[str, dict] = {}
    for r in est.layers:
        key = {"op": r.name, "block": r.block, "stage": r.stage}[by]
        g = groups.setdefault(key, {"name": key, "kind": r.kind if by == "op" else by, "ops": 0,
                                    "params": 0, "saved_elements_per_image": 0, "saved": r.saved})
        g["ops"] += 1
        g["out_shape"] = r.out_shape
        g["params"] += r.params
        g["saved_elements_per_image"] += r.saved_elements
    rows = []
    for g in groups.values():
        g["saved_mib"] = g["saved_elements_per_image"] * act_b * est.batch / 2 ** 20
        if by != "op":
            del g["saved"]
        rows.append(g)
    return rows


def forward_feature_bytes_per_image(arch: str, image_size: int = 224, bytes_per_value: int = 4,
                                    **kwargs) -> int:
    """Sum of every forward output with ReLUs done in place (convnet-burden's "feature memory" convention),
    for comparing with ``PUBLISHED["convnet_burden"]``; not what training keeps (see ``estimate``)."""
    rows = layer_walk(arch, image_size, **kwargs)
    total = 0
    for r in rows:
        if r.kind in ("relu", "loss"):
            continue
        n = 1
        for d in r.out_shape:
            n *= d
        total += n
    return total * bytes_per_value


def onednn_ncsp_copy_bytes_per_image(arch: str, image_size: int = 224, num_classes: int = 1000,
                                     width: float = 1.0, stem: str = "imagenet", composite_passes: int = 1,
                                     bytes_per_value: int = 4) -> int:
    """Bytes per image that oneDNN's composite plain-layout convolution books beyond what the planner counts.

    On CPUs with AVX-512 oneDNN runs an f32 convolution on plain NCHW tensors (MindSpore's layout) as
    ``jit_uni_ncsp`` (verbose name ``jit_uni_ncsp:conv+ref``): it reorders the source to NHWC, runs an NHWC
    convolution, and reorders the result back, so its scratchpad books one NHWC copy of the source and one of
    the destination (``key_conv_ncsp_src`` / ``key_conv_ncsp_dst`` in oneDNN's ``jit_uni_ncsp_convolution.cpp``;
    backward data books ``key_conv_ncsp_diff_dst`` / ``key_conv_ncsp_diff_src``, the same sizes, and backward
    weights, when it runs the composite, source and output gradient). A 1x1, stride-1 unpadded convolution is
    run as a matmul instead, with no copies. This sums
    ``in + out`` elements over every other convolution, times ``composite_passes`` (how many of the
    forward / backward-data / backward-weights passes ran the composite kernel): the growth per image if the
    copies of every convolution were alive at the step's peak. An upper-bound model, to compare with a
    measured slope, not a planner term (an AVX2 CPU runs a direct NCHW kernel with no such copies).
    """
    rows = layer_walk(arch, image_size, num_classes, width, stem)
    per_pass = sum(r.in_elements + r.out_shape[0] * r.out_shape[1] * r.out_shape[2]
                   for r in rows if r.kind == "conv" and not (r.kernel == 1 and r.stride == 1))
    return int(per_pass) * int(composite_passes) * int(bytes_per_value)


def keep_scenarios(arch: str = "resnet152", image_size: int = 224, batch: int = 64,
                   target_gib: float = 35.0) -> list[dict]:
    """What per-card memory a training step needs under different accounts of what it keeps (fp32, Momentum,
    1,000 classes), to settle a published "needs more than ``target_gib``" claim: the planner's minimum,
    the planner plus every BatchNorm output kept (what MXNet's measured slope implies), and no reuse of
    backward workspaces (every layer's transient alive at once); each at ``batch`` and at twice it, with
    the smallest batch that exceeds ``target_gib`` under each account."""
    est = estimate(arch, batch, image_size)
    per_image = {
        "planner (what backward must keep)": est.activation_bytes_per_image + est.workspace_bytes / batch,
        "planner + every BatchNorm output kept": est.activation_bytes_per_image + est.workspace_bytes / batch
        + sum(r.saved_elements for r in est.layers if r.kind == "bn") * PRECISIONS["fp32"][0],
        "planner + no reuse of backward workspaces": est.activation_bytes_per_image
        + sum(r.workspace_elements for r in est.layers) * PRECISIONS["fp32"][0],
    }
    rows = []
    for what, b_img in per_image.items():
        at = {b: (est.model_state_bytes + b_img * b) / GIB for b in (batch, 2 * batch)}
        first_over = int((target_gib * GIB - est.model_state_bytes) // b_img) + 1
        rows.append({"account": what, "mib_per_image": b_img / 2 ** 20, "gib_at_batch": at[batch],
                     "gib_at_double_batch": at[2 * batch], "batch_over_target": first_over,
                     "batch": batch, "target_gib": target_gib, "arch": arch, "image_size": image_size})
    pub = PUBLISHED["mxnet_finetuner_titanx"]
    if arch in pub["mib"] and image_size == pub["image_size"]:
        slope = published_slope_mib_per_image(arch)
        b0, m0 = pub["batches"][0], pub["mib"][arch][0]
        at = {b: (m0 + slope * (b - b0)) / 1024 for b in (batch, 2 * batch)}
        rows.append({"account": "MXNet measured (TITAN X), extrapolated", "mib_per_image": slope,
                     "gib_at_batch": at[batch], "gib_at_double_batch": at[2 * batch],
                     "batch_over_target": int((target_gib * 1024 - m0) // slope) + b0 + 1,
                     "batch": batch, "target_gib": target_gib, "arch": arch, "image_size": image_size})
    return rows


# ----------------------------------------------------------------------------------- published figures
# Only numbers read from a public source, with where they come from. They were produced with other
# frameworks and memory managers (PyTorch, MXNet, MatConvNet): compare orders of magnitude and slopes.
PUBLISHED = {
    "nvidia_dle_resnet50": {
        "what": "per-GPU batch size of NVIDIA's ResNet-50 v1.5 training recipes (224 px, SGD with "
                "momentum, PyTorch); a batch that runs, not a measured maximum nor a memory figure",
        "source": "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/configs.yml "
                  "(models.resnet50), commit 097c7ff917b7c56246590b1246a8f5bd8957c534",
        "url": "https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/Classification/"
               "ConvNets/configs.yml",
        "arch": "resnet50", "image_size": 224,
        "entries": [
            {"platform": "DGX-1V (V100 16GB)", "capacity_gb": 16, "precision": "fp32", "batch_per_gpu": 112},
            {"platform": "DGX-1V (V100 16GB)", "capacity_gb": 16, "precision": "mixed", "batch_per_gpu": 256},
            {"platform": "DGX-2V (V100 32GB)", "capacity_gb": 32, "precision": "fp32", "batch_per_gpu": 256},
            {"platform": "DGX-2V (V100 32GB)", "capacity_gb": 32, "precision": "mixed", "batch_per_gpu": 256},
            {"platform": "DGX A100 (A100 80GB)", "capacity_gb": 80, "precision": "fp32",
             "batch_per_gpu": 256, "note": "TF32 math, fp32 storage"},
            {"platform": "DGX A100 (A100 80GB)", "capacity_gb": 80, "precision": "mixed",
             "batch_per_gpu": 256},
            {"platform": "T4 (16GB)", "capacity_gb": 16, "precision": "fp32", "batch_per_gpu": 128},
            {"platform": "T4 (16GB)", "capacity_gb": 16, "precision": "mixed", "batch_per_gpu": 256},
        ],
    },
    "mxnet_finetuner_titanx": {
        "what": "GPU memory (MiB) while fine-tuning with SGD on one Maxwell TITAN X (12 GiB), 224 px, "
                "MXNet model-zoo ResNets, at batch 10/20/30/40; totals include the runtime's fixed cost, "
                "so the slope between batch sizes is the comparable figure",
        "source": "knjcode/mxnet-finetuner, docs/benchmark.md ('Memory usage (MiB)'), "
                  "commit 40d142dc28c1e56d0cfbdc727ecf58d4e6efb195; 224 px from util/functions "
                  "get_image_size",
        "url": "https://github.com/knjcode/mxnet-finetuner/blob/master/docs/benchmark.md",
        "image_size": 224, "precision": "fp32", "batches": (10, 20, 30, 40),
        "mib": {
            "resnet18": (814, 1163, 1497, 1853),
            "resnet34": (1127, 1619, 2094, 2598),
            "resnet50": (1875, 3080, 4265, 5483),
            "resnet101": (2791, 4576, 6341, 8158),
            "resnet152": (3790, 6296, 8777, 11330),
        },
    },
    "convnet_burden": {
        "what": "memory of all forward feature maps for one 224 px image, fp32, ReLUs in place "
                "(MatConvNet ResNet v1 models, stride on the first 1x1), and parameter memory; "
                "an inference-style count, not what training keeps",
        "source": "albanie/convnet-burden, README.md table 'Image Classification Architectures', "
                  "commit 1fe5ef5601014e5b1c4669231736bdd32dea67fd",
        "url": "https://github.com/albanie/convnet-burden/blob/master/README.md",
        "image_size": 224,
        "feature_mb": {"resnet50": 103, "resnet101": 155, "resnet152": 219},
        "param_mb": {"resnet50": 98, "resnet101": 170, "resnet152": 230},
    },
}


def published_slope_mib_per_image(arch: str) -> float:
    """Least-squares slope (MiB per image) of the mxnet-finetuner memory figures for ``arch``."""
    src = PUBLISHED["mxnet_finetuner_titanx"]
    xs, ys = src["batches"], src["mib"][arch]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def compare_published(precision: str = "fp32") -> list[dict]:
    """The planner next to every published figure above (ImageNet layout, 1000 classes, native conv).

    ``kind`` says what is compared: ``batch_fits`` (the planner's total at the recipe's batch, in GiB,
    against the card), ``slope`` (MiB per image of batch) or ``features`` (forward feature MB per image).
    """
    rows = []
    dle = PUBLISHED["nvidia_dle_resnet50"]
    for e in dle["entries"]:
        if e["precision"] != precision and precision != "all":
            continue
        est = estimate("resnet50", e["batch_per_gpu"], 224, precision=e["precision"])
        rows.append({"kind": "batch_fits", "arch": "resnet50", "what": e["platform"],
                     "precision": e["precision"], "batch": e["batch_per_gpu"],
                     "published": e["capacity_gb"], "planner": round(est.total_gib, 2),
                     "planner_max_batch": max_batch("resnet50", 224, capacity_gb=e["capacity_gb"],
                                                    precision=e["precision"]),
                     "source": "nvidia_dle_resnet50"})
    for arch in PUBLISHED["mxnet_finetuner_titanx"]["mib"]:
        est = estimate(arch, 1, 224, precision="fp32")
        per_image = (est.activation_bytes_per_image + est.workspace_bytes) / 2 ** 20
        rows.append({"kind": "slope", "arch": arch, "what": "MiB per image of batch",
                     "precision": "fp32", "published": round(published_slope_mib_per_image(arch), 1),
                     "planner": round(per_image, 1), "source": "mxnet_finetuner_titanx"})
    burden = PUBLISHED["convnet_burden"]
    for arch, mb in burden["feature_mb"].items():
        mine = forward_feature_bytes_per_image(arch, 224) / 2 ** 20
        rows.append({"kind": "features", "arch": arch, "what": "forward feature MB per image",
                     "precision": "fp32", "published": mb, "planner": round(mine, 1),
                     "source": "convnet_burden"})
    return rows
