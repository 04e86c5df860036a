"""Each exercise checker accepts the worked solution in solutions/, rejects the typical wrong answers with a
hint that names the mistake, and never raises (papermill runs the notebooks through them)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from helpers import exercises as ex

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


def solution(chapter: str):
    spec = importlib.util.spec_from_file_location(f"solutions_ch{chapter}", SOLUTIONS / f"ch{chapter}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verdict(checker, answer, capsys) -> tuple[bool, str]:
    ok = checker(answer)
    return ok, capsys.readouterr().out


NODES = {"worker_num": 8, "local_worker_num": 4, "node_rank": 1}

# checker, the solution's attribute, typical wrong answers with a word their hint must contain
CASES = [
    ("00", ex.check_00_rank_and_size, "RANK_AND_SIZE", [
        ((6, 8), "off by one"), ((8, 5), "swapped"), ((5, 4), "whole job"), ((4, 8), "not 4"),
        ((5.0, 8), "float"), (("5", "8"), "string"), ("(5, 8)", "string"), ((True, 8), "bool"),
        ([5, 8], "tuple"), ((5,), "2 items")]),
    ("00", ex.check_00_two_nodes, "TWO_NODES_SERVER_B", [
        ({**NODES, "worker_num": 4}, "whole job"), ({**NODES, "local_worker_num": 8}, "this server's cards"),
        ({**NODES, "worker_num": 4, "local_worker_num": 8}, "swapped"), ({**NODES, "node_rank": 2}, "off by one"),
        ({**NODES, "node_rank": 0}, "server A"), ({**NODES, "worker_num": "8"}, "string"),
        ({**NODES, "node_rank": 1.0}, "float"), ({**NODES, "node_rank": True}, "bool"),
        ({"worker_num": 8}, "lacks"), ([8, 4, 1], "dict")]),
    ("01", ex.check_01_rank3_histogram, "RANK3_HISTOGRAM", [
        ([0, 0, 20, 30, 0, 0, 0, 0, 0, 0], "rank 2's row"), ([0, 0, 0, 0, 0, 40, 10, 0, 0, 0], "rank 4's row"),
        ([0, 0, 0, 0.2, 0.8, 0, 0, 0, 0, 0], "shares"), ([0, 0, 0, 10, 41, 0, 0, 0, 0, 0], "add up to"),
        ([0, 0, 0, 0, 50, 0, 0, 0, 0, 0], "consecutive"), ([0, 0, 0, 10, 40, 0, 0, 0, 0], "10 items"),
        ([0, 0, 0, 10.0, 40.0, 0, 0, 0, 0, 0], "float"), ("0001040000", "string"),
        ((0, 0, 0, 10, 40, 0, 0, 0, 0, 0), "list"), ([0, 0, 0, True, 40, 0, 0, 0, 0, 0], "bool")]),
    ("01", ex.check_01_worst_step_classes, "WORST_STEP_CLASSES", [
        (10, "epoch"), (8, "one class per rank"), (5, "images per rank"), (2, "holds 1 class"),
        (1.0, "float"), ("1", "string"), (True, "bool"), ([1], "whole number")]),
    ("02", ex.check_02_accumulation, "MICRO_BATCH_AND_STEPS", [
        ((256, 1), "more than 16 GiB"), ((64, 4), "largest"), ((1, 256), "largest"), ((2, 128), "swapped"),
        ((128, 16), "global batch"), ((256, 8), "global batch"), ((185, 1), "per-card batch"),
        ((0, 256), "at least 1"), ((128.0, 2), "float"), (("128", "2"), "string"), ((True, 256), "bool"),
        ([128, 2], "tuple")]),
    ("03", ex.check_03_layout_bytes, "LAYOUT_AND_BYTES", [
        (("4x2", 204_900_000), "swapped"), (("8x1", 204_900_000), "groups of"),
        (("2x4", 819_600_000), "whole layer"), (("2x4", 102_450_000), "all 8 ranks"),
        (("2x4", 409_800_000), "data-parallel degree"), (("2x4", 204_800_000), "bias"),
        (("2x4", 51_225_000), "parameter count"), (("2x4", 195), "MiB"), (("2x4", 205), "MB"),
        (("2x4", 204_900_000.0), "float"), (("2x4", "204900000"), "string"), (["2x4", 204_900_000], "tuple"),
        ((2, 4), "string"), (("two by four", 1), "must look like")]),
    ("03", ex.check_03_same_slice, "SAME_SLICE_AS_RANK5", [
        ("15", "string"), ((1.9, 5.2), "float"), ((1.0, 5.0), "float"), ([1, 5], "tuple"), ({1, 5}, "tuple"),
        ((True, 5), "bool"), (5, "tuple"), ((4, 5, 6, 7), "model-parallel group"), ((1,), "itself"),
        ((0, 4), "mp index 0"), ((1, 5, 5), "each rank once"), ((1, 5, 9), "0..7")]),
    ("04", ex.check_04_allreduce_calls, "ALLREDUCE_CALLS", [
        (10, "no fusion"), (4, "off by one"), (6, "at least 1024"), (2, "split points are"),
        (5.0, "float"), ("5", "string"), (True, "bool")]),
    ("04", ex.check_04_comm_share, "COMM_SHARE", [
        (0.6125, "pools"), (0.612, "pools"), (0.613, "pools"), (61.25, "pools"), (0.61, "coarsely"),
        (61, "coarsely"), (0.389, "compute share"), (0.7, "largest rank"), (0.526, "one rank"),
        (0.6095, "median"), ("0.611", "string"), ("61%", "string"), (True, "bool"), ([0.611], "number"),
        (-0.611, "between 0 and 1"), (150, "between 0 and 1"), (float("nan"), "between 0 and 1")]),
]
IDS = [c[1].__name__ for c in CASES]
WRONG = [pytest.param(c[1], answer, word, id=f"{c[1].__name__}-{answer!r}") for c in CASES for answer, word in c[3]]


@pytest.mark.parametrize("chapter, checker, attr, wrong", CASES, ids=IDS)
def test_checker_accepts_the_solution(chapter, checker, attr, wrong, capsys):
    ok, out = verdict(checker, getattr(solution(chapter), attr), capsys)
    assert ok is True and out.startswith("right: "), out


@pytest.mark.parametrize("checker, answer, word", WRONG)
def test_wrong_answer_is_rejected_with_a_hint_naming_the_mistake(checker, answer, word, capsys):
    ok, out = verdict(checker, answer, capsys)
    assert ok is False, out
    assert out.startswith("wrong, because "), out
    assert word.lower() in out.lower(), (word, out)
    assert "could not read" not in out, out            # a named hint, not the guard against exceptions


@pytest.mark.parametrize("checker", [c[1] for c in CASES], ids=IDS)
def test_none_is_not_attempted(checker, capsys):
    assert checker(None) is False
    assert capsys.readouterr().out.startswith("not attempted yet: ")


ODD = [object(), b"5", 5j, 1e300, -1, 0, (), [], {}, set(), np.array([1, 5]), np.float64("nan"), (None, None),
       {"worker_num": None, "local_worker_num": [], "node_rank": {}}, [[0] * 10] * 10, ("2x4", None), "x" * 1000]


@pytest.mark.parametrize("checker", [c[1] for c in CASES], ids=IDS)
def test_checkers_never_raise_and_name_the_problem(checker, capsys):
    for answer in ODD:
        ok, out = verdict(checker, answer, capsys)
        assert ok is False and out.startswith("wrong, because "), (answer, out)
        assert "could not read" not in out, (answer, out)


def test_the_guard_turns_an_exception_into_a_wrong_verdict(capsys):
    from helpers.exercises.common import checker

    @checker
    def broken(answer):
        raise KeyError(answer)

    assert broken(3) is False
    assert capsys.readouterr().out.startswith("wrong, because the checker could not read 3")


def test_every_chapter_has_a_checked_exercise():
    """CASES hold every checker of an answer alone; those of an edited %%ranks cell (answer, on_ranks) are in
    CELL_CHECKERS, tested in test_cell_exercises.py."""
    assert sorted(ex.CHECKERS) == ["00", "01", "02", "03", "04"]
    cell = {f for fs in ex.CELL_CHECKERS.values() for f in fs}
    assert {c[1] for c in CASES} == {f for fs in ex.CHECKERS.values() for f in fs} - cell
    assert not {c[1] for c in CASES} & cell


def test_issue_16_examples_are_rejected():
    """The three answers the issue found accepted: pooled share, a split that fits, '15' and (1.9, 5.2)."""
    jp = ex.ex04_job_profile()
    assert ex.check_04_comm_share(float(jp.comm_s.sum() / jp.step_s.sum())) is False
    assert ex.check_02_accumulation((64, 4)) is False
    assert ex.check_03_same_slice("15") is False
    assert ex.check_03_same_slice((1.9, 5.2)) is False


def test_equivalent_forms_of_the_right_answer_are_accepted():
    """Numpy integers (what the helpers return), any order of ranks, a percentage, the layout's spelling."""
    from helpers.topics import shard_stats
    from helpers.train.sampler import shard_indices

    labels = ex.ex01_labels()
    row = shard_stats.class_histograms(shard_indices("contiguous", labels, 8), labels, 10)[3]
    assert ex.check_01_rank3_histogram(row) is True
    assert ex.check_01_worst_step_classes(np.int64(1)) is True
    assert ex.check_00_rank_and_size((np.int64(5), 8)) is True
    assert ex.check_03_same_slice((5, 1)) is True
    assert ex.check_03_layout_bytes(("2X4", 204_900_000)) is True
    for share in (0.611, 61.1, 0.6113, np.float64(0.61134)):
        assert ex.check_04_comm_share(share) is True, share


def test_comm_share_tolerance_separates_the_mean_from_the_pooled_ratio():
    jp = ex.ex04_job_profile()
    want, pooled, tol = jp.comm_share, float(jp.comm_s.sum() / jp.step_s.sum()), ex.EX04_SHARE_TOL
    assert want == pytest.approx(np.mean([0.6, 0.7, 0.5 / 0.95, 0.65 / 1.05]))
    assert abs(pooled - want) > tol                     # the tolerance can tell them apart
    assert ex.check_04_comm_share(want + 0.8 * tol) is True
    assert ex.check_04_comm_share(want - 0.8 * tol) is True
    assert ex.check_04_comm_share(want + 1.2 * tol) is False
    assert ex.check_04_comm_share(want - 1.2 * tol) is False


def test_accumulation_wants_the_planners_split_and_nothing_else():
    """Only the largest micro-batch that divides the per-card batch and fits is right; twice it does not fit."""
    from helpers.core.memory_planner import estimate, plan_accumulation

    micro, steps = solution("02").MICRO_BATCH_AND_STEPS
    assert (micro, steps) == plan_accumulation("resnet50", 2048, 8, 16)
    assert not estimate("resnet50", 2 * micro, 224, accumulation_steps=max(steps // 2, 1)).fits(16)
    for m in (d for d in range(1, 257) if 256 % d == 0 and d != micro):
        assert ex.check_02_accumulation((m, 256 // m)) is False, m
