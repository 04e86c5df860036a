import numpy as np

from helpers.topics.seen_classes import global_step_classes, global_step_entropy, rank_histograms, step_histograms, tv_from_global
from helpers.train.worker import class_counts


class FakeResult:
    """Two ranks, two steps, three classes: the shape of JobResult.steps (sparse class_counts records)."""

    steps = {0: [{"class_counts": [[0, 2]]}, {"class_counts": [[1, 2]]}],
             1: [{"class_counts": [[0, 2]]}, {"class_counts": [[2, 2]]}]}
    summaries = {0: {"num_classes": 3}, 1: {"num_classes": 3}}


def test_histograms_and_step_coverage_from_records():
    r = FakeResult()
    assert rank_histograms(r).tolist() == [[2, 2, 0], [2, 0, 2]]
    assert global_step_classes(r).tolist() == [1, 2]
    np.testing.assert_allclose(global_step_entropy(r), [0.0, 1.0])


def test_imagenet_sized_label_space_is_recorded_and_read_back():
    """1,000 classes, a batch of 256 ImageNet labels per rank: the worker's record reads back exactly."""
    rng = np.random.default_rng(0)
    batches = {r: [rng.integers(0, 1000, 256) for _ in range(3)] for r in range(2)}

    class Result:
        steps = {r: [{"class_counts": class_counts(b)} for b in bs] for r, bs in batches.items()}
        summaries = {0: {"num_classes": 1000}, 1: {"num_classes": 1000}}

    hist = step_histograms(Result())
    assert hist.shape == (2, 3, 1000)
    for r, bs in batches.items():
        for s, b in enumerate(bs):
            assert hist[r, s].tolist() == np.bincount(b, minlength=1000).tolist()


def test_class_counts_lists_only_the_classes_present():
    assert class_counts(np.array([7, 3, 7, 7], dtype=np.int32)) == [[3, 1], [7, 3]]


def test_tv_is_zero_for_the_global_mix_and_one_for_disjoint_classes():
    np.testing.assert_allclose(tv_from_global([[1, 1], [2, 0]], [5, 5]), [0.0, 0.5])
    np.testing.assert_allclose(tv_from_global([[0, 3]], [3, 0]), [1.0])
