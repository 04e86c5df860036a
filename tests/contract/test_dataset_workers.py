"""MindSpore's dataset refuses more workers than CPUs: the bound helpers.core.config fits dataset_workers to,
pinned to the wheel's mindspore/dataset/core/validator_helpers.py."""

from helpers.core.config import DATASET_WORKERS_BOUND
from tests.contract.wheel import assert_pinned

VALIDATORS = "dataset/core/validator_helpers.py"


def test_the_bound_is_the_cpu_count():
    assert_pinned(DATASET_WORKERS_BOUND, VALIDATORS)
    assert_pinned("from multiprocessing import cpu_count", VALIDATORS)     # multiprocessing.cpu_count is os.cpu_count
    assert_pinned("def check_num_parallel_workers(value):", VALIDATORS)
    assert_pinned("if param_name == 'num_parallel_workers':", VALIDATORS)   # every dataset's parameters pass through it
