"""Which im2col convolutions (helpers.train.im2col_conv) multiply once over the whole batch; MindSpore-free."""

from __future__ import annotations

import os

FOLD_ENV = "COURSE_IM2COL_FOLD"    # "0": every layer multiplies per image (benchmarks.vs_pytorch's before/after)


def folds_batch(out_channels: int, rows: int, positions: int) -> bool:
    """Whether a layer multiplies once, ``(O, K) @ (K, N*L)``: where the per-image weight copy (``O*K``)
    outweighs the folded form's transposes (``(O + K) * L``); measured in ARCHITECTURE.md's im2col note."""
    return out_channels * rows >= (out_channels + rows) * positions     # pure: MindSpore parses it into the graph


def folding_on() -> bool:
    """False with ``COURSE_IM2COL_FOLD=0``; read once when a layer is built (graph mode cannot read os.environ)."""
    return os.environ.get(FOLD_ENV) != "0"
