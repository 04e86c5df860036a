"""What the CPU hybrid step's gathers move per step, against a sharded cross-entropy that would not gather logits.

Each rank ``(d, m)`` of an ``mp``-wide model-parallel group computes its ``C/mp`` classes for the group's ``mp x b``
images (``helpers.train.hybrid_step``): it AllReduces the zero-padded features (``mp*b x F``) and logit blocks
(``mp*b x C``) in the forward pass, and each AllReduce's backward is one more of the same size. A sharded
softmax cross-entropy keeps the logits split: per image only the row maximum, the sum of exponentials and the
target's logit cross the group (3 numbers forward, the last two again backward).
"""

from __future__ import annotations

FLOAT_BYTES = 4


def gather_bytes(mp: int, batch: int, classes: int, features: int) -> dict:
    """AllReduce payload bytes per rank per step (forward + backward) of the CPU hybrid step's feature and logit
    gathers, and of a sharded cross-entropy's per-image statistics instead of the logit gather."""
    rows = mp * batch
    logits = 2 * rows * classes * FLOAT_BYTES
    return dict(mp=mp, batch=batch, classes=classes, features=features,
                features_gather=2 * rows * features * FLOAT_BYTES, logits_gather=logits,
                sharded_ce=5 * rows * FLOAT_BYTES, logits_over_sharded=logits / (5 * rows * FLOAT_BYTES))
