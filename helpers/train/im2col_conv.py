"""Convolution implementations with identical parameters: MindSpore's native kernel or im2col + MatMul.

Why: on this course's machine (AMD EPYC, AVX-512) MindSpore 2.10 runs a CPU ``Conv2d`` through a composite
oneDNN kernel that is slow at every kernel size, 1x1 included; unfolding the input (im2col; a 1x1 stride-1
kernel needs none) and multiplying by the weight gives the same outputs and gradients in a fraction of the time
(``benchmarks/results/conv_cpu.json``). Other CPUs were not measured, so ``conv_impl="auto"`` times both per
machine (``helpers.train.conv_autoselect``); on GPU/Ascend the native kernel is used. The price is memory:
the unfolded columns (kh*kw rows per input channel) are kept for the backward pass (see ``folds_batch``).

``Im2ColConv2d`` takes its ``weight`` from an ``nn.Conv2d`` built with the same arguments (same name, shape,
initialiser and random draws), so checkpoints move freely between the two. It is a plain ``nn.Cell``, not an
``nn.Conv2d`` subclass, because AMP O1's rewrite failed on a cell holding both.
"""

from __future__ import annotations

from functools import lru_cache

from mindspore import nn, ops

from helpers.core.im2col_shape import folding_on, folds_batch

CONV_IMPLS = ("native", "im2col")


class WeightTimesColumns(nn.Cell):
    """``w (O, C, k, k) as (O, K) @ cols (N, K, L) -> (N, O, L)`` with a hand-written backward: two batched
    matmuls whose transpose flags replace the explicit ``Transpose`` of the columns that autodiff of a broadcast
    matmul adds. The weight's gradient leaves in the weight's own shape from a ``ReduceSum``, never through a
    ``Reshape``: on CPU with MindSpore 2.10's fused gradient AllReduce, each such reshaped gradient arrived as the
    previous same-shaped convolution's (tests/jobs/test_averaging_jobs.py)."""

    def __init__(self):
        super().__init__()
        self.bmm = ops.BatchMatMul()
        self.bmm_a_t = ops.BatchMatMul(transpose_a=True)
        self.bmm_b_t = ops.BatchMatMul(transpose_b=True)

    def construct(self, w, cols):
        w2 = w.reshape(w.shape[0], -1)
        return self.bmm(w2.broadcast_to((cols.shape[0],) + w2.shape), cols)

    def bprop(self, w, cols, out, dout):
        w2 = w.reshape(w.shape[0], -1)
        dw = self.bmm_b_t(dout, cols).reshape((cols.shape[0],) + w.shape).sum(0)      # sum_n dY_n @ cols_n^T
        dcols = self.bmm_a_t(w2.broadcast_to((cols.shape[0],) + w2.shape), dout)     # W^T @ dY_n
        return dw, dcols


@lru_cache(maxsize=None)
def shared_times() -> WeightTimesColumns:
    """One parameter-free ``WeightTimesColumns`` for every convolution of a model (``build_model`` starts a new
    one): its backward is parsed once instead of once per convolution (a ci-model graph compiled about 15 % faster)."""
    return WeightTimesColumns()


class Im2ColConv2d(nn.Cell):
    """``nn.Conv2d`` (NCHW, no groups, no dilation, explicit padding) computed as unfold + MatMul; a 1x1
    stride-1 kernel needs no unfold: its columns are the input itself."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, has_bias=False,
                 weight_init=None):
        super().__init__()
        native = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, pad_mode="pad",
                           padding=padding, has_bias=has_bias, weight_init=weight_init)
        self.in_channels, self.out_channels, self.has_bias = in_channels, out_channels, has_bias
        self.weight = native.weight
        if has_bias:
            self.bias = native.bias
        self._k = kernel_size
        self._s = stride
        self._p = padding
        self.times = shared_times()
        self._fold = folding_on()       # a constant of the graph, as the shapes folds_batch is given

    def construct(self, x):
        n, c, h, w = x.shape
        ho = (h + 2 * self._p - self._k) // self._s + 1
        wo = (w + 2 * self._p - self._k) // self._s + 1
        if self._k == 1 and self._s == 1 and self._p == 0:
            cols = x.reshape(n, c, h * w)                                 # (N, C, L): the input itself
        else:
            cols = ops.unfold(x, self._k, 1, self._p, self._s)            # (N, C*k*k, L)
        rows, positions = c * self._k * self._k, ho * wo
        w = ops.cast(self.weight, cols.dtype)      # under AMP its backward returns the float32 gradient
        if self._fold and folds_batch(self.out_channels, rows, positions):   # static shapes: decided when compiling
            cols = ops.transpose(cols, (1, 0, 2)).reshape(1, rows, n * positions)              # (1, K, N*L)
            out = self.times(w, cols)                                              # (1, O, N*L)
            out = ops.transpose(out.reshape(self.out_channels, n, positions), (1, 0, 2))        # (N, O, L)
        else:
            out = self.times(w, cols)                                              # (N, O, L)
        out = out.reshape(n, self.out_channels, ho, wo)
        if self.has_bias:
            out = out + self.bias.reshape(1, -1, 1, 1)
        return out


def make_conv(in_channels, out_channels, kernel_size, stride=1, impl="native", weight_init=None):
    """A bias-free ResNet convolution with ``padding = kernel_size // 2``, native or im2col."""
    if impl not in CONV_IMPLS:
        raise ValueError(f"conv_impl must be one of {CONV_IMPLS}, got {impl!r}")
    padding = kernel_size // 2
    if impl == "im2col":
        return Im2ColConv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                            weight_init=weight_init)
    return nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, pad_mode="pad",
                     padding=padding, has_bias=False, weight_init=weight_init)
