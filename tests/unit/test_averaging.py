"""The arithmetic of chapter 00's averaging proof (``helpers.topics.averaging``), without launching a job."""

import numpy as np
import pytest

from helpers.topics.averaging import momentum_step


def test_the_first_momentum_update_is_sgd_with_the_mean_or_the_sum_of_the_gradients():
    w0 = np.array([1.0, -2.0, 0.5])
    grads = [np.array([1.0, 0.0, 2.0]), np.array([3.0, 4.0, -2.0])]
    assert np.allclose(momentum_step(w0, grads, 0.1, "mean"), w0 - 0.1 * np.array([2.0, 2.0, 0.0]))
    assert np.allclose(momentum_step(w0, grads, 0.1, "sum"), w0 - 0.1 * np.array([4.0, 4.0, 0.0]))
    mean, total = momentum_step(w0, grads, 0.1, "mean"), momentum_step(w0, grads, 0.1, "sum")
    assert np.linalg.norm(total - mean) / np.linalg.norm(mean - w0) == pytest.approx(len(grads) - 1)


def test_the_worst_parameter_is_the_one_that_took_another_gradient():
    from helpers.topics.averaging import worst_parameter

    w0 = np.zeros(5)
    mean = np.array([1.0, 1.0, 2.0, 2.0, 2.0])
    ranks = np.array([1.0, 1.0, 2.0, 2.0, 2.0])
    assert worst_parameter(["a", "b"], [2, 3], ranks, mean, w0)[1] == 0.0
    ranks[2:] = [1.0, 1.0, 1.0]                      # b received a's values: half its update missing
    name, gap = worst_parameter(["a", "b"], [2, 3], ranks, mean, w0)
    assert name == "b" and gap == pytest.approx(0.5)
