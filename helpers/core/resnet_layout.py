"""The ResNet layout as plain data (no MindSpore import), shared by the models and the memory planner.

arch -> (block kind, blocks per stage); channel expansion per block kind; base stage widths.
"""

ARCHS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
EXPANSION = {"basic": 1, "bottleneck": 4}
BASE_WIDTHS = (64, 128, 256, 512)
RECOMPUTE_LEVELS = ("none", "block", "stage")   # Cell.recompute() on: nothing, each residual block, each stage


def stage_widths(width: float) -> list[int]:
    """Channels of the four stages' 3x3 convolutions at ``width`` (at least 1 each): the one scaling rule."""
    return [max(1, int(round(c * width))) for c in BASE_WIDTHS]


def feature_width(arch: str, width: float) -> int:
    """The classifier's input size: the last stage's channels, scaled exactly as ``helpers.train.models`` does."""
    kind, _ = ARCHS[arch]
    return stage_widths(width)[-1] * EXPANSION[kind]
