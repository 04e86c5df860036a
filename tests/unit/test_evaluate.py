"""Held-out accuracy in one process: the padded last batch is not counted, every image is counted once."""

import numpy as np
import pytest


class _AlwaysClass:
    """Builds a Cell whose logits favour one class whatever the image: its accuracy is that class's share."""

    @staticmethod
    def build(num_classes: int, cls: int):
        import mindspore as ms
        from mindspore import nn, ops

        class Const(nn.Cell):
            def __init__(self):
                super().__init__()
                self.logits = ms.Tensor(np.eye(num_classes, dtype=np.float32)[cls])

            def construct(self, x):
                return ops.zeros((x.shape[0], 1), ms.float32) + self.logits

        return Const()


@pytest.mark.parametrize("cls", [3])
def test_accuracy_counts_every_held_out_image_once(ci_config, cls):
    import mindspore as ms

    from helpers.train.image_folder import scan_split
    from helpers.train.evaluation import EVAL_BATCH_FACTOR, evaluate

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    val = scan_split(ci_config.data_dir, "val")
    size = EVAL_BATCH_FACTOR * ci_config.batch_per_rank
    assert len(val.labels) % size, "the stand-in's split must leave a partial (padded) last batch"
    net = _AlwaysClass.build(len(val.classes), cls)
    assert evaluate(ci_config, net, rank=0, world=1) == pytest.approx(val.counts[cls] / len(val.labels))
