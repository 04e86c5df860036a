"""One PyTorch CPU training step of the course's ResNet layout, timed (run by the benchmark's torch env).

Standalone on purpose (no mindspore, no helpers import): ``benchmarks.vs_pytorch`` runs it with the torch
environment's python and passes the layout as numbers (stage widths, blocks per stage), so both sides build
the same network as ``helpers.train.models``: bias-free convolutions with ``padding = k // 2``, BatchNorm, the
3x3 stride-1 "small" stem, BasicBlocks with a 1x1 strided projection when the shape changes, global average
pool, a Dense classifier. SGD momentum 0.9 (lr 0.01, no weight decay) and mean cross entropy, as
``helpers.train.recipe.plain_train_step``. Prints one JSON line: median/min/max seconds per step, parameters.

    python torch_step.py --widths 8 16 32 64 --batch 8 --threads 1 --steps 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn


def conv(cin, cout, k, stride):
    """A bias-free convolution with ``padding = k // 2`` (``helpers.train.im2col_conv.make_conv``)."""
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)


class BasicBlock(nn.Module):
    """The two-3x3-convolution residual block, projection shortcut when stride or channels change."""

    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1, self.bn1 = conv(cin, width, 3, stride), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = conv(width, width, 3, 1), nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.down = None if stride == 1 and cin == width else nn.Sequential(conv(cin, width, 1, stride),
                                                                            nn.BatchNorm2d(width))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Small stem (3x3 stride 1, no pool), four stages of BasicBlocks, mean pool, linear classifier."""

    def __init__(self, widths, depths, num_classes):
        super().__init__()
        cin = widths[0]
        self.stem = nn.Sequential(conv(3, cin, 3, 1), nn.BatchNorm2d(cin), nn.ReLU())
        stages = []
        for i, (w, n) in enumerate(zip(widths, depths)):
            blocks = []
            for j in range(n):
                blocks.append(BasicBlock(cin, w, 2 if (i > 0 and j == 0) else 1))
                cin = w
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean(dim=(2, 3)))


def time_steps(args) -> dict:
    """Build the model and optimizer, run one warm-up step, then time ``args.steps`` steps."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = ResNet(args.widths, args.depths, args.classes)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    net = net.to(memory_format=fmt).train()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=0.0)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=g).to(memory_format=fmt)
    y = torch.randint(0, args.classes, (args.batch,), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    step()   # warm-up (first allocations, oneDNN primitive creation)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "steps": args.steps, "params": sum(p.numel() for p in net.parameters() if p.requires_grad),
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "channels_last": args.channels_last}


def main(argv=None) -> dict:
    """Parse the layout and timing arguments, time the steps, print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", type=int, nargs=4, required=True, help="channels of the four stages")
    ap.add_argument("--depths", type=int, nargs=4, default=[2, 2, 2, 2], help="BasicBlocks per stage")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5, help="timed steps after one warm-up step")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--channels-last", action="store_true")
    out = time_steps(ap.parse_args(argv))
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main()
