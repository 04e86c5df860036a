"""Which im2col convolutions (helpers.train.im2col_conv) multiply once over the whole batch; MindSpore-free."""

from __future__ import annotations

import os

FOLD_ENV = "COURSE_IM2COL_FOLD"    # "0": every layer multiplies per image (benchmarks.vs_pytorch's before/after)


def folds_batch(out_channels: int, rows: int, positions: int) -> bool:
    """Whether a convolution multiplies once over the whole batch, ``(O, K) @ (K, N*L)``, rather than per image.

    Per image the batched form copies the weight (``O*K`` elements, BroadcastTo; ``BatchMatMul`` on CPU does not
    broadcast) and reduces an ``(N, O, K)`` weight gradient; the folded form instead transposes the columns and the
    output (``(K + O) * L``). Folding where the weight is the larger (deep layers, few positions) made a
    ResNet-18 x0.25 train step (1 thread) 0.77x as long at batch 128, 0.87-0.97x at 16, equal at 8 (2026-12-06,
    alternated in one process; same loss, gradients within 5e-7)."""
    return out_channels * rows >= (out_channels + rows) * positions     # pure: MindSpore parses it into the graph


def folding_on() -> bool:
    """False with ``COURSE_IM2COL_FOLD=0``; read once when a layer is built (graph mode cannot read os.environ)."""
    return os.environ.get(FOLD_ENV) != "0"
