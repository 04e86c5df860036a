"""The memory levers beyond accumulation, counted on the planner's layer walk: recomputation, AMP's activation
dtypes, optimizer-state sharding (ZeRO-1 as MindSpore's ``enable_parallel_optimizer``).

Imports no MindSpore. Each lever changes one part of ``helpers.core.memory_planner.estimate``; ``estimate_levers``
applies them together. ARCHITECTURE.md ("helpers.core.memory_levers") says what was measured on CPU and read in
MindSpore's docs for each rule.
"""

from __future__ import annotations

from dataclasses import replace

from helpers.core.errors import ConfigError
from helpers.core.memory_planner import LABEL_BYTES, OPTIMIZERS, PRECISIONS, LayerRow, MemoryEstimate, estimate
from helpers.core.resnet_layout import RECOMPUTE_LEVELS

RECOMPUTE_ORDERS = ("interleaved", "eager")
AMP_LEVELS = ("O0", "O2")
SHARD_LEVELS = ("level1", "level2", "level3")      # MindSpore's parallel_optimizer_config optimizer_level
SHARD_THRESHOLD_KB = 64                            # parallel_optimizer_threshold: smaller parameters stay whole
# AMP O2 on CPU (MindSpore 2.10): these kernels have no float16 version and run float32 between Casts (the
# compiled graph's kernel dtypes)
CPU_FP32_KERNELS = ("Conv2D", "BatchMatMul", "BatchNorm", "MatMul")


# --------------------------------------------------------------------------------------------- recomputation

def _segment(row: LayerRow, level: str) -> str | None:
    """The recomputed cell a row belongs to: its residual block or stage; None outside (stem, head) or when off."""
    if level == "none" or row.stage in ("stem", "head"):
        return None
    return row.block if level == "block" else row.stage


def recompute_elements_per_image(rows: list[LayerRow], level: str = "block", order: str = "interleaved") -> dict:
    """Elements per image a step keeps with ``Cell.recompute()`` on each block or stage (``level``).

    A recomputed cell keeps only its output (the next cell's input) through the forward pass; its backward first
    recomputes every kernel of the cell, output included (MindSpore's compiled graph ran each block's output ReLU
    again). ``order="interleaved"`` (what recomputation is for): one cell at a time, the largest on top of the kept
    tensors. ``order="eager"`` (MindSpore 2.10 on CPU: every recomputed kernel ran between the loss and the first
    backward kernel): all cells at once.
    """
    if level not in RECOMPUTE_LEVELS:
        raise ConfigError(f"recompute: must be one of {RECOMPUTE_LEVELS} (got {level!r})")
    if order not in RECOMPUTE_ORDERS:
        raise ConfigError(f"order: must be one of {RECOMPUTE_ORDERS} (got {order!r})")
    outside, outputs, insides = 0, {}, {}
    for r in rows:
        seg = _segment(r, level)
        if seg is None:
            outside += r.saved_elements
            continue
        insides[seg] = insides.get(seg, 0) + outputs.get(seg, 0)   # the previous row was not the output after all
        outputs[seg] = r.saved_elements
    kept = outside + sum(outputs.values())
    cells = [insides[k] + outputs[k] for k in outputs]                 # one cell recomputed: insides and output
    peak = kept + (max(cells, default=0) if order == "interleaved" else sum(cells))
    return {"kept": kept, "recomputed_max": max(cells, default=0), "recomputed_sum": sum(cells),
            "outputs": sum(outputs.values()), "peak": peak, "segments": len(outputs)}


# ------------------------------------------------------------------------------------------------- AMP dtypes

def amp_bytes_per_image(rows: list[LayerRow], amp_level: str = "O2") -> int:
    """Activation bytes per image kept for backward at ``amp_level``: O0 all float32; O2 float16 except BatchNorm's
    input and the loss's softmax, which O2 keeps float32 (``mindspore.amp``: BatchNorm in float32, logits cast to
    float32 for the loss). On CPU the same tensors are kept; the float32 copies that ``CPU_FP32_KERNELS`` need are
    transients, not counted here."""
    if amp_level not in AMP_LEVELS:
        raise ConfigError(f"amp_level: must be one of {AMP_LEVELS} (got {amp_level!r})")
    if amp_level == "O0":
        return sum(r.saved_elements for r in rows) * 4 + LABEL_BYTES
    return sum(r.saved_elements * (4 if r.kind in ("bn", "loss") else 2) for r in rows) + LABEL_BYTES


# -------------------------------------------------------------------------------------- optimizer sharding

def param_tensors(rows: list[LayerRow]) -> list[tuple[str, int, int]]:
    """(name, elements, first dimension) of every trainable tensor: conv weights, BatchNorm gamma/beta, fc weight
    and bias (the models' own tensors; the convolutions have no bias)."""
    out = []
    for r in rows:
        c = r.out_shape[0]
        if r.kind == "conv":
            out.append((f"{r.name}.weight", r.params, c))
        elif r.kind == "bn":
            out += [(f"{r.name}.gamma", c, c), (f"{r.name}.beta", c, c)]
        elif r.kind == "fc":
            out += [(f"{r.name}.weight", r.params - c, c), (f"{r.name}.bias", c, c)]
    return out


def sharded_state(rows: list[LayerRow], shards: int = 1, level: str = "level1", optimizer: str = "momentum",
                  precision: str = "fp32", threshold_kb: float = SHARD_THRESHOLD_KB) -> dict:
    """Bytes per rank of weights, gradients and optimizer state with the optimizer sharded over ``shards`` ranks.

    MindSpore's ``enable_parallel_optimizer`` (SEMI_AUTO/AUTO_PARALLEL on Ascend/GPU) splits a parameter when it
    is at least ``threshold_kb`` and its first dimension divides by the shard count: ``level1`` (the default) the
    weights and optimizer state, ``level2`` also the gradients, ``level3`` also frees the forward's gathered weights
    before backward. A split weight is gathered whole for the step: ``gathered`` counts those copies (all of them
    through backward at level1/2, the largest at level3). ``shards=1`` is plain data parallelism.
    """
    if int(shards) != shards or shards < 1:
        raise ConfigError(f"optimizer_shards: must be a positive integer (got {shards!r})")
    if level not in SHARD_LEVELS:
        raise ConfigError(f"shard_level: must be one of {SHARD_LEVELS} (got {level!r})")
    _, par_b, grad_b, opt_b, _ = PRECISIONS[precision]
    split = [n for _, n, dim0 in param_tensors(rows)
             if shards > 1 and n * par_b >= threshold_kb * 1024 and dim0 % shards == 0]
    whole = sum(r.params for r in rows) - sum(split)
    part = sum(-(-n // shards) for n in split)
    gathered = (max(split, default=0) if level == "level3" else sum(split)) * par_b
    grads = (whole + (part if level != "level1" else sum(split))) * grad_b
    out = {"shards": int(shards), "level": level, "split_tensors": len(split), "split_params": sum(split),
           "params": (whole + part) * par_b, "gathered": gathered, "grads": grads,
           "optimizer": (whole + part) * opt_b * OPTIMIZERS[optimizer]}
    out["total"] = out["params"] + out["gathered"] + out["grads"] + out["optimizer"]
    return out


# ------------------------------------------------------------------------------------------------ together

def estimate_levers(arch: str, batch: int, image_size: int = 224, *, recompute: str = "none",
                    recompute_order: str = "interleaved", amp_level: str = "O0",
                    optimizer_shards: int = 1, shard_level: str = "level1", **kwargs) -> MemoryEstimate:
    """``memory_planner.estimate`` with the levers applied: recomputation and AMP change the activations per image,
    sharding the weights (``weight_copy_bytes`` holds the gathered copies), gradients and optimizer state."""
    if amp_level != "O0" and recompute != "none":
        raise ConfigError("amp_level: count AMP and recomputation one at a time (their kept dtypes differ)")
    if amp_level != "O0":
        kwargs["precision"] = "mixed"
    est = estimate(arch, batch, image_size, **kwargs)
    rows = list(est.layers)
    per_image = est.activation_bytes_per_image
    if recompute != "none":
        act_b = PRECISIONS[est.precision][0]
        per_image = recompute_elements_per_image(rows, recompute, recompute_order)["peak"] * act_b + LABEL_BYTES
    elif amp_level != "O0":
        per_image = amp_bytes_per_image(rows, amp_level)
    state = sharded_state(rows, optimizer_shards, shard_level, est.optimizer, est.precision)
    buffers = est.param_bytes - est.param_count * PRECISIONS[est.precision][1]
    return replace(est, activation_bytes_per_image=per_image, activation_bytes=per_image * est.batch,
                   param_bytes=state["params"] + buffers, grad_bytes=state["grads"],
                   weight_copy_bytes=est.weight_copy_bytes + state["gathered"], optimizer_bytes=state["optimizer"])

