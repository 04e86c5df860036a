"""ResNet-18/34/50/101/152 as MindSpore cells (torchvision's v1.5 layout: stride on the bottleneck's 3x3).

Two knobs the course needs and the model zoo does not give together:
- ``width``: multiplies every stage's channel count, so CI can train a real ResNet layout in seconds;
- ``stem="small"``: a 3x3 stride-1 stem without max-pool, for 32 px images (``"imagenet"``: 7x7/2 + pool).
``conv_impl`` picks the convolution kernel (see ``helpers.train.im2col_conv``) without changing any parameter.
"""

from __future__ import annotations

from mindspore import nn, ops

from helpers.train.im2col_conv import make_conv, shared_times
from helpers.core.resnet_layout import ARCHS, EXPANSION, RECOMPUTE_LEVELS, stage_widths


def _bn(channels):
    return nn.BatchNorm2d(channels, momentum=0.9)


class BasicBlock(nn.Cell):
    """The two-3x3-convolution residual block of ResNet-18/34."""

    def __init__(self, cin, width, stride, conv_impl):
        super().__init__()
        self.conv1 = make_conv(cin, width, 3, stride, conv_impl)
        self.bn1 = _bn(width)
        self.conv2 = make_conv(width, width, 3, 1, conv_impl)
        self.bn2 = _bn(width)
        self.relu = nn.ReLU()
        self.down = _downsample(cin, width, stride, conv_impl)

    def construct(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Cell):
    """The 1x1-3x3-1x1 residual block of ResNet-50/101/152, stride on the 3x3 (v1.5)."""

    def __init__(self, cin, width, stride, conv_impl):
        super().__init__()
        cout = width * EXPANSION["bottleneck"]
        self.conv1 = make_conv(cin, width, 1, 1, conv_impl)
        self.bn1 = _bn(width)
        self.conv2 = make_conv(width, width, 3, stride, conv_impl)
        self.bn2 = _bn(width)
        self.conv3 = make_conv(width, cout, 1, 1, conv_impl)
        self.bn3 = _bn(cout)
        self.relu = nn.ReLU()
        self.down = _downsample(cin, cout, stride, conv_impl)

    def construct(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _downsample(cin, cout, stride, conv_impl):
    if stride == 1 and cin == cout:
        return None
    return nn.SequentialCell([make_conv(cin, cout, 1, stride, conv_impl), _bn(cout)])


class ResNet(nn.Cell):
    """Stem, four stages, global average pool, fully connected classifier (``fc``)."""

    def __init__(self, arch="resnet50", num_classes=1000, width=1.0, stem="imagenet", conv_impl="native"):
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"arch must be one of {sorted(ARCHS)}, got {arch!r}")
        if stem not in ("imagenet", "small"):
            raise ValueError(f"stem must be 'imagenet' or 'small', got {stem!r}")
        kind, depths = ARCHS[arch]
        block = BasicBlock if kind == "basic" else Bottleneck
        widths = stage_widths(width)
        cin = widths[0]
        if stem == "imagenet":
            self.stem = nn.SequentialCell([make_conv(3, cin, 7, 2, conv_impl), _bn(cin), nn.ReLU(),
                                           nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")])
        else:
            self.stem = nn.SequentialCell([make_conv(3, cin, 3, 1, conv_impl), _bn(cin), nn.ReLU()])
        stages = []
        for i, (w, n) in enumerate(zip(widths, depths)):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(block(cin, w, stride, conv_impl))
                cin = w * EXPANSION[kind]
            stages.append(nn.SequentialCell(blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.feature_dim = cin
        self.fc = nn.Dense(cin, num_classes)

    def features(self, x):
        x = self.stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return ops.mean(x, (2, 3))

    def construct(self, x):
        return self.fc(self.features(x))


def build_model(arch="resnet50", num_classes=1000, width=1.0, stem="imagenet", conv_impl="native"):
    """A ResNet cell (``arch`` one of resnet18/34/50/101/152); see the module docstring for the knobs. Its im2col
    convolutions share one matmul cell of their own: AMP's float16 flag on it must not reach the next model."""
    shared_times.cache_clear()
    return ResNet(arch, num_classes, width, stem, conv_impl)


def set_recompute(net, level="none"):
    """Mark ``net``'s residual blocks (``"block"``) or stages (``"stage"``) for ``Cell.recompute()``, so backward
    recomputes what they computed instead of keeping it (chapter 02's lever; ``helpers.core.memory_levers``)."""
    if level not in RECOMPUTE_LEVELS:
        raise ValueError(f"recompute must be one of {RECOMPUTE_LEVELS}, got {level!r}")
    stages = [net.layer1, net.layer2, net.layer3, net.layer4]
    cells = [] if level == "none" else stages if level == "stage" else [b for s in stages for b in s.cells()]
    for cell in cells:
        cell.recompute()
    return net


def count_parameters(net, trainable_only=True):
    """Number of scalars in the network's parameters (BatchNorm running statistics excluded by default)."""
    params = net.trainable_params() if trainable_only else net.get_parameters()
    total = 0
    for p in params:
        n = 1
        for d in p.shape:
            n *= d
        total += n
    return total
