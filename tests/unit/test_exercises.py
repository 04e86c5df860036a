"""Each exercise checker accepts the worked solution in solutions/ and rejects wrong answers, never raising."""

import importlib.util
from pathlib import Path

import pytest

from helpers import exercises as ex

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


def solution(chapter: str):
    spec = importlib.util.spec_from_file_location(f"solutions_ch{chapter}", SOLUTIONS / f"ch{chapter}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# checker, the solution's attribute, wrong answers (each must be rejected with a "wrong, because" line)
CASES = [
    ("00", ex.check_00_rank_and_size, "RANK_AND_SIZE", [(6, 8), (5, 6), (5,), "5", (True, 8)]),
    ("00", ex.check_00_two_nodes, "TWO_NODES_SERVER_B",
     [{"worker_num": 4, "local_worker_num": 4, "node_rank": 1},
      {"worker_num": 8, "local_worker_num": 4, "node_rank": 2}, {"worker_num": 8}, [8, 4, 1]]),
    ("01", ex.check_01_rank3_histogram, "RANK3_HISTOGRAM",
     [[0, 0, 0, 0, 50, 0, 0, 0, 0, 0], [0, 0, 0, 0.2, 0.8, 0, 0, 0, 0, 0], [10, 40], "abc"]),
    ("01", ex.check_01_worst_step_classes, "WORST_STEP_CLASSES", [8, 10, 1.5, "one"]),
    ("02", ex.check_02_accumulation, "MICRO_BATCH_AND_STEPS", [(256, 1), (128, 4), (0, 256), (64, "4")]),
    ("03", ex.check_03_layout_bytes, "LAYOUT_AND_BYTES",
     [("4x2", 204_900_000), ("2x4", 819_600_000), ("2x4", 204_800_000), ("8", 1), (2, 4)]),
    ("03", ex.check_03_same_slice, "SAME_SLICE_AS_RANK5", [(4, 5, 6, 7), (5,), (1, 3, 5, 7), "x", 5]),
    ("04", ex.check_04_allreduce_calls, "ALLREDUCE_CALLS", [10, 4, 1, "five"]),
    ("04", ex.check_04_comm_share, "COMM_SHARE", [0.65, 0.5, 70, "61%"]),
]
IDS = [c[1].__name__ for c in CASES]


@pytest.mark.parametrize("chapter, checker, attr, wrong", CASES, ids=IDS)
def test_checker_accepts_the_solution(chapter, checker, attr, wrong, capsys):
    assert checker(getattr(solution(chapter), attr)) is True
    out = capsys.readouterr().out
    assert out.startswith("right: "), out


@pytest.mark.parametrize("chapter, checker, attr, wrong", CASES, ids=IDS)
def test_checker_rejects_wrong_answers(chapter, checker, attr, wrong, capsys):
    for answer in wrong:
        assert checker(answer) is False, answer
        out = capsys.readouterr().out
        assert out.startswith("wrong, because "), (answer, out)


@pytest.mark.parametrize("checker", [c[1] for c in CASES], ids=IDS)
def test_none_is_not_attempted(checker, capsys):
    assert checker(None) is False
    assert capsys.readouterr().out.startswith("not attempted yet: ")


def test_every_chapter_has_a_checked_exercise():
    assert sorted(ex.CHECKERS) == ["00", "01", "02", "03", "04"]
    assert {c[1] for c in CASES} == {f for fs in ex.CHECKERS.values() for f in fs}


def test_solutions_agree_with_the_planner_and_percent_answers():
    """The chapter 02 solution is the planner's pick; chapter 04 accepts a percentage as well."""
    from helpers.memory import plan_accumulation

    assert solution("02").MICRO_BATCH_AND_STEPS == plan_accumulation("resnet50", 2048, 8, 16)
    assert ex.check_04_comm_share(61.1) is True
    assert ex.check_02_accumulation((64, 4)) is True      # fits too: right, with the planner's better pick named
