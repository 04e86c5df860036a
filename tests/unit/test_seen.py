import numpy as np

from helpers.seen import global_step_classes, global_step_entropy, rank_histograms, tv_from_global


class FakeResult:
    """Two ranks, two steps, three classes: the shape of JobResult.steps."""

    steps = {0: [{"class_hist": [2, 0, 0]}, {"class_hist": [0, 2, 0]}],
             1: [{"class_hist": [2, 0, 0]}, {"class_hist": [0, 0, 2]}]}


def test_histograms_and_step_coverage_from_records():
    r = FakeResult()
    assert rank_histograms(r).tolist() == [[2, 2, 0], [2, 0, 2]]
    assert global_step_classes(r).tolist() == [1, 2]
    np.testing.assert_allclose(global_step_entropy(r), [0.0, 1.0])


def test_tv_is_zero_for_the_global_mix_and_one_for_disjoint_classes():
    np.testing.assert_allclose(tv_from_global([[1, 1], [2, 0]], [5, 5]), [0.0, 0.5])
    np.testing.assert_allclose(tv_from_global([[0, 3]], [3, 0]), [1.0])
