"""Per-card peak training memory of our ResNets, predicted from layer shapes before anything is launched.

Imports no MindSpore and builds no cell: it walks the layout of ``helpers.train.models`` (tests check it
against the real cells). Counted per card and optimizer step: parameters (BatchNorm running statistics always
fp32), gradients, optimizer state (SGD 0, Momentum 1, Adam 2 buffers per parameter), one accumulation buffer
when ``accumulation_steps > 1``, the activations kept for the backward pass (with ``conv_impl="im2col"`` also
the unfolded columns and a per-image weight copy), the largest single-layer backward workspace, and
``overhead_bytes`` (runtime and allocator; default 0, supplied by the caller). ``"mixed"`` precision is fp32
weights, gradients and optimizer state plus fp16 activations and weight copy. Not counted: framework reuse and
fragmentation, cuDNN workspaces, data-loader and communication buffers, oneDNN layout copies; compare the
activation slope (bytes per image), not absolute totals.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.core.errors import ConfigError

# The same layout tables as helpers.train.models (shared, MindSpore-free).
from helpers.core.resnet_layout import ARCHS, EXPANSION, stage_widths  # noqa: E402

STEMS = ("imagenet", "small")
CONV_IMPLS = ("native", "im2col")
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2}       # state buffers per parameter
# precision -> (activation, parameter, gradient, optimizer-state bytes, working-copy bytes per parameter)
PRECISIONS = {
    "fp32": (4, 4, 4, 4, 0),
    "fp16": (2, 2, 2, 2, 0),
    "mixed": (2, 4, 4, 4, 2),
}
BN_STAT_BYTES = 4        # running mean/variance stay fp32 in every mode
LABEL_BYTES = 4          # int32 class index per image
GIB = 2 ** 30


@dataclass(frozen=True)
class LayerRow:
    """One operation of the forward pass, with what it keeps for backward (element counts per image).

    ``saved_elements`` counts only tensors this row is the first to keep, so summing the column never counts
    a tensor twice; ``saved`` says which tensor that is. ``workspace_elements`` is the transient its
    backward needs on top (gradients of output and input, im2col column gradients).
    """

    name: str
    block: str           # "stem", "layer3.17", "head"
    kind: str            # input, conv, bn, relu, maxpool, add, gap, fc, loss
    out_shape: tuple     # (C, H, W) or (features,)
    params: int          # trainable scalars
    buffers: int         # non-trainable scalars (BatchNorm running statistics)
    saved_elements: int
    workspace_elements: int
    saved: str
    kernel: int = 0      # convolutions: kernel size, stride and input elements per image (0 elsewhere)
    stride: int = 0
    in_elements: int = 0

    @property
    def stage(self) -> str:
        return self.block.split(".")[0]


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted per-card peak memory of one training step (bytes); ``layers`` holds the per-op walk."""

    arch: str
    batch: int
    image_size: int
    num_classes: int
    width: float
    stem: str
    precision: str
    conv_impl: str
    optimizer: str
    accumulation_steps: int
    param_count: int
    param_bytes: int
    weight_copy_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    accumulation_bytes: int
    activation_bytes_per_image: int
    activation_bytes: int
    workspace_bytes: int
    overhead_bytes: int
    layers: tuple = ()

    @property
    def model_state_bytes(self) -> int:
        """Everything that does not scale with the batch (weights, copies, gradients, optimizer, buffer)."""
        return (self.param_bytes + self.weight_copy_bytes + self.grad_bytes + self.optimizer_bytes
                + self.accumulation_bytes)

    @property
    def total_bytes(self) -> int:
        return self.model_state_bytes + self.activation_bytes + self.workspace_bytes + self.overhead_bytes

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB

    def fits(self, capacity_gb: float) -> bool:
        return self.total_bytes <= capacity_gb * GIB

    def summary(self) -> dict:
        """Plain numbers (MiB) for a notebook table or a results JSON file."""
        mib = 2 ** 20
        return {
            "arch": self.arch, "batch": self.batch, "image_size": self.image_size,
            "precision": self.precision, "conv_impl": self.conv_impl, "optimizer": self.optimizer,
            "accumulation_steps": self.accumulation_steps, "param_count": self.param_count,
            "params_mib": self.param_bytes / mib, "weight_copy_mib": self.weight_copy_bytes / mib,
            "grads_mib": self.grad_bytes / mib, "optimizer_mib": self.optimizer_bytes / mib,
            "accumulation_mib": self.accumulation_bytes / mib,
            "activations_mib": self.activation_bytes / mib,
            "activation_mib_per_image": self.activation_bytes_per_image / mib,
            "workspace_mib": self.workspace_bytes / mib, "overhead_mib": self.overhead_bytes / mib,
            "total_mib": self.total_bytes / mib, "total_gib": self.total_gib,
        }


# ----------------------------------------------------------------------------------------------- the walk

def _check_model_args(arch, num_classes, width, stem, image_size, conv_impl):
    if arch not in ARCHS:
        raise ConfigError(f"arch: must be one of {sorted(ARCHS)} (got {arch!r})")
    if stem not in STEMS:
        raise ConfigError(f"stem: must be one of {STEMS} (got {stem!r})")
    if conv_impl not in CONV_IMPLS:
        hint = "; resolve 'auto' first (helpers.train.conv_autoselect.resolve_conv_impl)" if conv_impl == "auto" else ""
        raise ConfigError(f"conv_impl: must be one of {CONV_IMPLS} (got {conv_impl!r}){hint}")
    if not width > 0:
        raise ConfigError(f"width: must be positive (got {width!r})")
    if int(num_classes) < 1:
        raise ConfigError(f"num_classes: must be at least 1 (got {num_classes!r})")
    if int(image_size) < 8:
        raise ConfigError(f"image_size: must be at least 8 pixels (got {image_size!r})")


def _conv_out(size: int, k: int, s: int) -> int:
    p = k // 2                                        # helpers.train.im2col_conv.make_conv pads kernel_size // 2
    return (size + 2 * p - k) // s + 1


class _Walker:
    """Appends rows while tracking the current tensor's shape; one method per kind of operation."""

    def __init__(self, conv_impl: str):
        self.conv_impl = conv_impl
        self.rows: list[LayerRow] = []

    def add(self, **kw):
        self.rows.append(LayerRow(**kw))

    def conv(self, name, block, cin, h, w, cout, k, s):
        ho, wo = _conv_out(h, k, s), _conv_out(w, k, s)
        weight = cout * cin * k * k
        out = cout * ho * wo
        grads = out + cin * h * w                      # dY and dX of this layer's backward
        # im2col: the weight broadcast over the batch is one tensor shared by forward and backward (kept). A layer
        # that multiplies once over the batch (helpers.core.im2col_shape) measured the same (ARCHITECTURE.md)
        if self.conv_impl == "im2col" and (k > 1 or s > 1):
            cols = cin * k * k * ho * wo
            saved, what = cols + weight, f"im2col columns ({cin * k * k}x{ho * wo}) + weight broadcast"
            work = grads + cols                       # + the column gradient
        elif self.conv_impl == "im2col":              # 1x1 stride 1: the input itself is the columns
            saved, what, work = weight, "weight broadcast (the input is kept by its producer)", grads
        else:
            saved, what, work = 0, "input (kept by its producer)", grads
        self.add(name=name, block=block, kind="conv", out_shape=(cout, ho, wo), params=weight, buffers=0,
                 saved_elements=saved, workspace_elements=work, saved=what, kernel=k, stride=s,
                 in_elements=cin * h * w)
        return cout, ho, wo

    def bn(self, name, block, c, h, w):
        n = c * h * w
        self.add(name=name, block=block, kind="bn", out_shape=(c, h, w), params=2 * c, buffers=2 * c,
                 saved_elements=n, workspace_elements=2 * n, saved="input (the convolution's output)")

    def relu(self, name, block, c, h, w):
        n = c * h * w
        self.add(name=name, block=block, kind="relu", out_shape=(c, h, w), params=0, buffers=0,
                 saved_elements=n, workspace_elements=2 * n, saved="output")

    def block_body(self, prefix, kind, cin, h, w, width, stride):
        """BasicBlock / Bottleneck of helpers.train.models, torchvision v1.5 layout (stride on the 3x3)."""
        if kind == "basic":
            plan = [(width, 3, stride, True), (width, 3, 1, False)]
        else:
            plan = [(width, 1, 1, True), (width, 3, stride, True), (width * EXPANSION[kind], 1, 1, False)]
        c, hh, ww = cin, h, w
        for i, (cout, k, s, relu) in enumerate(plan, 1):
            c, hh, ww = self.conv(f"{prefix}.conv{i}", prefix, c, hh, ww, cout, k, s)
            self.bn(f"{prefix}.bn{i}", prefix, c, hh, ww)
            if relu:
                self.relu(f"{prefix}.relu{i}", prefix, c, hh, ww)
        if stride != 1 or cin != c:
            self.conv(f"{prefix}.down.conv", prefix, cin, h, w, c, 1, stride)
            self.bn(f"{prefix}.down.bn", prefix, c, hh, ww)
        n = c * hh * ww
        self.add(name=f"{prefix}.add", block=prefix, kind="add", out_shape=(c, hh, ww), params=0,
                 buffers=0, saved_elements=0, workspace_elements=2 * n, saved="nothing")
        self.relu(f"{prefix}.relu_out", prefix, c, hh, ww)
        return c, hh, ww


def layer_walk(arch: str = "resnet50", image_size: int = 224, num_classes: int = 1000, width: float = 1.0,
               stem: str = "imagenet", conv_impl: str = "native") -> list[LayerRow]:
    """Every operation of ``helpers.train.models.ResNet`` in forward order, shapes computed on paper."""
    _check_model_args(arch, num_classes, width, stem, image_size, conv_impl)
    kind, depths = ARCHS[arch]
    widths = stage_widths(width)
    wk = _Walker(conv_impl)
    h = w = int(image_size)
    wk.add(name="input", block="stem", kind="input", out_shape=(3, h, w), params=0, buffers=0,
           saved_elements=3 * h * w, workspace_elements=0, saved="image batch (the first conv's input)")
    c = widths[0]
    if stem == "imagenet":
        c, h, w = wk.conv("stem.conv", "stem", 3, h, w, c, 7, 2)
        wk.bn("stem.bn", "stem", c, h, w)
        wk.relu("stem.relu", "stem", c, h, w)
        h, w = -(-h // 2), -(-w // 2)                 # MaxPool2d(3, 2, pad_mode="same"): ceil(h / 2)
        wk.add(name="stem.maxpool", block="stem", kind="maxpool", out_shape=(c, h, w), params=0, buffers=0,
               saved_elements=c * h * w, workspace_elements=c * h * w * 5,
               saved="output (MaxPoolGrad reads input and output)")
    else:
        c, h, w = wk.conv("stem.conv", "stem", 3, h, w, c, 3, 1)
        wk.bn("stem.bn", "stem", c, h, w)
        wk.relu("stem.relu", "stem", c, h, w)
    for i, (wid, n) in enumerate(zip(widths, depths)):
        for j in range(n):
            stride = 2 if (i > 0 and j == 0) else 1
            c, h, w = wk.block_body(f"layer{i + 1}.{j}", kind, c, h, w, wid, stride)
    wk.add(name="head.gap", block="head", kind="gap", out_shape=(c,), params=0, buffers=0,
           saved_elements=c, workspace_elements=c * h * w, saved="pooled features (the classifier's input)")
    wk.add(name="head.fc", block="head", kind="fc", out_shape=(num_classes,),
           params=c * num_classes + num_classes, buffers=0, saved_elements=num_classes,
           workspace_elements=num_classes + c, saved="logits")
    wk.add(name="head.loss", block="head", kind="loss", out_shape=(num_classes,), params=0, buffers=0,
           saved_elements=num_classes, workspace_elements=num_classes, saved="softmax (the loss gradient)")
    return wk.rows


def param_count(arch: str = "resnet50", num_classes: int = 1000, width: float = 1.0,
                stem: str = "imagenet") -> int:
    """Trainable scalars, as ``helpers.train.models.count_parameters`` counts them (image size plays no part)."""
    return sum(r.params for r in layer_walk(arch, 64, num_classes, width, stem))


# ------------------------------------------------------------------------------------------- estimates

def _check_run_args(batch, precision, optimizer, accumulation_steps, overhead_bytes):
    if int(batch) != batch or batch < 1:
        raise ConfigError(f"batch: must be a positive integer (got {batch!r})")
    if precision not in PRECISIONS:
        raise ConfigError(f"precision: must be one of {sorted(PRECISIONS)} (got {precision!r})")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer: must be one of {sorted(OPTIMIZERS)} (got {optimizer!r})")
    if int(accumulation_steps) != accumulation_steps or accumulation_steps < 1:
        raise ConfigError(f"accumulation_steps: must be a positive integer (got {accumulation_steps!r})")
    if overhead_bytes < 0:
        raise ConfigError(f"overhead_bytes: must not be negative (got {overhead_bytes!r})")


def estimate(arch: str, batch: int, image_size: int = 224, num_classes: int = 1000, width: float = 1.0,
             stem: str = "imagenet", precision: str = "fp32", conv_impl: str = "native",
             optimizer: str = "momentum", accumulation_steps: int = 1,
             overhead_bytes: int = 0) -> MemoryEstimate:
    """Predicted peak memory of one training step on one card with ``batch`` images (the micro-batch)."""
    _check_run_args(batch, precision, optimizer, accumulation_steps, overhead_bytes)
    rows = layer_walk(arch, image_size, num_classes, width, stem, conv_impl)
    act_b, par_b, grad_b, opt_b, copy_b = PRECISIONS[precision]
    params = sum(r.params for r in rows)
    buffers = sum(r.buffers for r in rows)
    per_image = sum(r.saved_elements for r in rows) * act_b + LABEL_BYTES
    workspace = max(r.workspace_elements for r in rows) * act_b
    return MemoryEstimate(
        arch=arch, batch=int(batch), image_size=int(image_size), num_classes=int(num_classes),
        width=float(width), stem=stem, precision=precision, conv_impl=conv_impl, optimizer=optimizer,
        accumulation_steps=int(accumulation_steps), param_count=params,
        param_bytes=params * par_b + buffers * BN_STAT_BYTES,
        weight_copy_bytes=params * copy_b,
        grad_bytes=params * grad_b,
        optimizer_bytes=params * opt_b * OPTIMIZERS[optimizer],
        accumulation_bytes=params * grad_b if accumulation_steps > 1 else 0,
        activation_bytes_per_image=per_image,
        activation_bytes=per_image * int(batch),
        workspace_bytes=workspace * int(batch),
        overhead_bytes=int(overhead_bytes),
        layers=tuple(rows),
    )


def fits(arch: str, batch: int, image_size: int = 224, *, capacity_gb: float, **kwargs) -> bool:
    """Whether ``estimate(arch, batch, image_size, **kwargs)`` fits in ``capacity_gb`` GiB (2**30 bytes;
    a "40 GB" A100 has 40 GiB)."""
    return estimate(arch, batch, image_size, **kwargs).fits(capacity_gb)


def max_batch(arch: str, image_size: int = 224, *, capacity_gb: float, limit: int = 1 << 16,
              **kwargs) -> int:
    """Largest batch whose estimate fits (0 if not even one image does); memory grows with the batch, so
    a bisection is exact."""
    if not fits(arch, 1, image_size, capacity_gb=capacity_gb, **kwargs):
        return 0
    lo, hi = 1, int(limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(arch, mid, image_size, capacity_gb=capacity_gb, **kwargs):
            lo = mid
        else:
            hi = mid - 1
    return lo


def plan_accumulation(arch: str, global_batch: int, world_size: int, capacity_gb: float,
                      image_size: int = 224, **kwargs) -> tuple[int, int]:
    """(micro_batch, accumulation_steps) reaching ``global_batch`` over ``world_size`` cards.

    The per-card batch ``global_batch / world_size`` is split into equal micro-batches (so every
    micro-step has the same shape and one compiled graph serves them all); the largest micro-batch that
    divides it and fits wins, because larger micro-batches run faster and give BatchNorm more images.
    With more than one step the estimate includes the gradient-sized accumulation buffer.
    """
    if int(world_size) != world_size or world_size < 1:
        raise ConfigError(f"world_size: must be a positive integer (got {world_size!r})")
    if int(global_batch) != global_batch or global_batch < 1 or global_batch % world_size:
        raise ConfigError(f"global_batch: must be a positive multiple of world_size={world_size} "
                          f"(got {global_batch!r})")
    per_card = global_batch // world_size
    for micro in sorted((d for d in range(1, per_card + 1) if per_card % d == 0), reverse=True):
        steps = per_card // micro
        if estimate(arch, micro, image_size, accumulation_steps=steps, **kwargs).fits(capacity_gb):
            return micro, steps
    smallest = estimate(arch, 1, image_size, accumulation_steps=max(per_card, 1), **kwargs)
    raise ConfigError(
        f"capacity_gb: {arch} at {image_size} px does not fit in {capacity_gb} GiB even with micro-batch 1 "
        f"(estimate {smallest.total_gib:.2f} GiB, of which model state "
        f"{smallest.model_state_bytes / GIB:.2f} GiB); use more cards (model or pipeline parallelism), "
        f"lower precision, or a smaller model")


def classifier_param_bytes(feature_dim: int, num_classes: int, model_parallel: int = 1,
                           bytes_per_param: int = 4) -> int:
    """Bytes of the fully connected classifier (weight + bias) held by one card.

    With ``model_parallel = m`` the classes are split over m cards (chapter 03's hybrid parallel), each
    holding ``ceil(num_classes / m)`` rows; with 1 every card holds the whole layer (data parallel).
    Multiply by the per-parameter training state (gradient, optimizer buffers) for the full cost.
    """
    if model_parallel < 1 or int(model_parallel) != model_parallel:
        raise ConfigError(f"model_parallel: must be a positive integer (got {model_parallel!r})")
    if feature_dim < 1 or num_classes < 1:
        raise ConfigError(f"feature_dim and num_classes: must be positive (got {feature_dim}, {num_classes})")
    rows = -(-int(num_classes) // int(model_parallel))
    return rows * (int(feature_dim) + 1) * int(bytes_per_param)
