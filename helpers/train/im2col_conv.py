"""Convolution implementations with identical parameters: MindSpore's native kernel or im2col + MatMul.

Why: on this course's machine (AMD EPYC, AVX-512) MindSpore 2.10 runs a CPU ``Conv2d`` through a composite
oneDNN kernel; ``ops.unfold`` (im2col) + MatMul gives the same outputs and gradients, and a whole training
step ran 6.4x (ci model) and 11x (cpu model) faster (``benchmarks/results/conv_cpu.json``). Other CPUs were
not measured, so ``conv_impl="auto"`` times both per machine (``helpers.train.conv_autoselect``); on
GPU/Ascend the native kernel is used. The price is memory: the unfolded columns (kh*kw times the input) are
kept for the backward pass.

``Im2ColConv2d`` takes its ``weight`` from an ``nn.Conv2d`` built with the same arguments (same name, shape,
initialiser and random draws), so checkpoints move freely between the two. It is a plain ``nn.Cell``, not an
``nn.Conv2d`` subclass, because AMP O1's rewrite failed on a cell holding both.
"""

from __future__ import annotations

from mindspore import nn, ops

CONV_IMPLS = ("native", "im2col")


class Im2ColConv2d(nn.Cell):
    """``nn.Conv2d`` (NCHW, no groups, no dilation, explicit padding) computed as unfold + MatMul."""

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

    def construct(self, x):
        n, _, h, w = x.shape
        cols = ops.unfold(x, self._k, 1, self._p, self._s)              # (N, C*k*k, L)
        wmat = self.weight.reshape(self.out_channels, -1)                 # (O, C*k*k)
        out = ops.matmul(wmat, cols)                                      # (N, O, L)
        ho = (h + 2 * self._p - self._k) // self._s + 1
        wo = (w + 2 * self._p - self._k) // self._s + 1
        out = out.reshape(n, self.out_channels, ho, wo)
        if self.has_bias:
            out = out + self.bias.reshape(1, -1, 1, 1)
        return out


def make_conv(in_channels, out_channels, kernel_size, stride=1, impl="native", weight_init=None):
    """A bias-free ResNet convolution with ``padding = kernel_size // 2``.

    ``impl="im2col"`` only changes kernels larger than 1x1: MindSpore's 1x1 convolution is already fast
    on CPU (about 25 GFLOP/s measured), so rewriting it would only add transposes.
    """
    if impl not in CONV_IMPLS:
        raise ValueError(f"conv_impl must be one of {CONV_IMPLS}, got {impl!r}")
    padding = kernel_size // 2
    if impl == "im2col" and kernel_size > 1:
        return Im2ColConv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                            weight_init=weight_init)
    return nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, pad_mode="pad",
                     padding=padding, has_bias=False, weight_init=weight_init)
