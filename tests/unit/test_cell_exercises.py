"""The exercises that edit a chapter's ``%%ranks`` cell: each checker reads the cell's run (``on_ranks``: its
``returns`` and the ``cell.py`` that ran), says "not attempted yet" until the edit ran, accepts the worked solution
for the edited run, rejects typical wrong answers with a hint naming the mistake, and never raises."""

import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import numpy as np
import pytest

from helpers import exercises as ex
from tests.unit.test_exercises import ODD, solution

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CHAPTER_NOTEBOOK = {"00": "00_environment_setup", "01": "01_load_imbalance", "02": "02_oom_gradient_accumulation", "03": "03_hybrid_parallel", "04": "04_profiling"}


def rank_cell(chapter: str) -> str:
    """The chapter's ``%%ranks`` cell as the notebook holds it (its first line the magic)."""
    nb = nbformat.read(NOTEBOOKS / f"{CHAPTER_NOTEBOOK[chapter]}.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith("%%ranks"))


def edited(chapter: str, source: str) -> str:
    """The exercise's edit applied to the chapter's cell (asserting the cell still has what the prompt names)."""
    if chapter == "00":
        assert "self.opt(self.reduce_grads(grads))" in source
        return source.replace("self.opt(self.reduce_grads(grads))", "self.opt(grads)")
    if chapter == "01":
        assert "order[self.shard_id::self.num_shards]" in source
        return source.replace("order[self.shard_id::self.num_shards]",
                              "order[self.shard_id * per_rank:(self.shard_id + 1) * per_rank]")
    if chapter == "02":
        assert source.startswith("%%ranks ch.code_cfg ")
        return source.replace("%%ranks ch.code_cfg ", "%%ranks ch.code_cfg.replace(micro_batch=2, accumulation_steps=8) ", 1)
    if chapter == "03":
        assert "ops.cross_entropy(logits, y) / mp" in source
        return source.replace("ops.cross_entropy(logits, y) / mp", "ops.cross_entropy(logits, y)")
    new, n = re.subn(r"^fusion = \{.*?\}(?=\s*(#|$))", "fusion = {}", source, count=1, flags=re.M)
    assert n == 1, "the 04 cell sets no `fusion = {...}` on a line of its own"
    return new


class FakeRun:
    """What the checkers read of a JobResult: ``returns``, ``run_dir`` (with the cell's ``cell.py``), ``config``."""

    def __init__(self, folder: Path, source: str | None, returns: dict, device: str = "CPU"):
        self.run_dir = folder / "20261206-000000-cell"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if source is not None:
            (self.run_dir / "cell.py").write_text(f"# {source}" if source.startswith("%%ranks") else source)
        self.returns = returns
        self.config = SimpleNamespace(device_target=device)


def returns_00(sums) -> dict:
    return {r: {"get_rank()": r, "get_group_size()": len(sums), "last loss": 2.3, "sum of weights": s}
            for r, s in enumerate(sums)}


def returns_01(counts) -> dict:
    return {r: {"classes in my shard": c, "stratified": 2.25, "DistributedSampler(shuffle=False)": 1.25,
                "contiguous": 1.0} for r, c in enumerate(counts)}


def returns_02(micro_k: str, peaks) -> dict:
    return {r: {"micro-batch x K": micro_k, "peak RSS MB": p} for r, p in enumerate(peaks)}


def returns_03(ratio, mp: int = 2, ranks: int = 8) -> dict:
    ratios = ratio if isinstance(ratio, list) else [ratio] * ranks
    return {r: {"data shard": r // mp, "model shard": r % mp, "my slice of W": [64, 1000 // mp],
                "loss - reference": 0.0, "max |gradient - reference|": 0.0, "gradient / reference": q}
            for r, q in enumerate(ratios)}


def returns_04(calls, ranks: int = 8) -> dict:
    counts = calls if isinstance(calls, list) else [calls] * ranks
    return {r: {"AllReduce calls per step": c, "communication share": 0.9} for r, c in enumerate(counts)}


DRIFTED = [616.758056640625, 615.6087036132812, 616.3076782226562, 616.5567626953125, 616.2223510742188,
           617.2194213867188, 615.2615966796875, 615.8270263671875]     # the ci run of the edited 00 cell
SAME = [616.1182250976562] * 8                                          # the ci run as shipped
BLOCKS = [1, 2, 2, 3, 2, 2, 3, 3]        # the ci run of the edited 01 cell: classes in each rank's block
PEAKS_2x8 = [754, 754, 758, 758, 754, 755, 754, 757]    # the ci run of the 02 cell at 2 x 8 (MB per rank)
PEAKS_4x4 = [780, 783, 783, 783, 783, 781, 780, 780]    # and as shipped, 4 x 4
RETURNS = {"00": (returns_00(DRIFTED), returns_00(SAME)), "02": (returns_02("2 x 8", PEAKS_2x8),
                                                                 returns_02("4 x 4", PEAKS_4x4)), "01": (returns_01(BLOCKS), returns_01([10] * 8)), "03": (returns_03(2.0), returns_03(1.0)),
           "04": (returns_04(62), returns_04(1))}     # (after the edit, as shipped), measured at ci

# checker, chapter, the solution's attribute, typical wrong answers with a word their hint must contain
CASES = [
    (ex.check_00_without_reducer, "00", "WITHOUT_REDUCER_SAME_SUMS", [
        (True, "8 different sums"), ("False", "without quotes"), ("false", "without quotes"), ("True", "bool"),
        (0, "write False"), (1, "write True"), (0.0, "bool"), ([False], "bool"), ("no", "without quotes")]),
    (ex.check_01_block_shard, "01", "BLOCK_SHARD_CLASSES", [
        (10, "dealing"), (2, "not 2"), ("1", "string"), (True, "bool"), (1.0, "float")]),
    (ex.check_02_micro_memory, "02", "MICRO_MEMORY_MB", [
        (300, "less than half"), (1000, "off"), (700, "off"), ("755", "number of MB"), (True, "number of MB")]),
    (ex.check_03_without_mp_division, "03", "WITHOUT_MP_DIVISION_FACTOR", [
        (1, "unchanged"), (0.5, "reference over the gradient"), (2.0, "write 2"), (2.1, "float"),
        (8, "number of ranks"), (4, "data-parallel groups"), (3, "2, not 3"), ("2", "string"), (True, "bool")]),
    (ex.check_04_unfused_calls, "04", "UNFUSED_CALLS", [
        (1, "fused count"), (496, "all 8 ranks"), (8, "number of ranks"), (61, "not 61"), (62.0, "float"),
        ("62", "string"), (True, "bool"), ([62], "whole number")]),
]
IDS = [c[0].__name__ for c in CASES]
WRONG = [pytest.param(c[0], c[1], answer, word, id=f"{c[0].__name__}-{answer!r}") for c in CASES
         for answer, word in c[3]]


def run_of(tmp_path, chapter: str, edit: bool = True, **kw) -> FakeRun:
    """A fake run of the chapter's notebook cell, edited or as shipped, with what such a run returned at ci."""
    source = rank_cell(chapter)
    return FakeRun(tmp_path, edited(chapter, source) if edit else source, RETURNS[chapter][0 if edit else 1], **kw)


def verdict(checker, answer, run, capsys) -> tuple[bool, str]:
    ok = checker(answer, run)
    return ok, capsys.readouterr().out


@pytest.mark.parametrize("checker, chapter, attr, wrong", CASES, ids=IDS)
def test_the_solution_is_right_for_the_edited_run(checker, chapter, attr, wrong, tmp_path, capsys):
    ok, out = verdict(checker, getattr(solution(chapter), attr), run_of(tmp_path, chapter), capsys)
    assert ok is True and out.startswith("right: "), out


@pytest.mark.parametrize("checker, chapter, answer, word", WRONG)
def test_wrong_answer_is_rejected_with_a_hint_naming_the_mistake(checker, chapter, answer, word, tmp_path, capsys):
    ok, out = verdict(checker, answer, run_of(tmp_path, chapter), capsys)
    assert ok is False and out.startswith("wrong, because "), out
    assert word.lower() in out.lower(), (word, out)
    assert "could not read" not in out, out


@pytest.mark.parametrize("checker, chapter, attr, wrong", CASES, ids=IDS)
def test_the_unedited_cell_is_not_attempted_whatever_the_answer(checker, chapter, attr, wrong, tmp_path, capsys):
    """The cell as the notebook ships it: the checker asks for the edit, even for the right answer."""
    run = run_of(tmp_path, chapter, edit=False)
    for answer in (getattr(solution(chapter), attr), None, wrong[0][0]):
        ok, out = verdict(checker, answer, run, capsys)
        assert ok is False and out.startswith("not attempted yet: "), (answer, out)
        assert "run" in out and "again" in out, out


@pytest.mark.parametrize("checker, chapter, attr, wrong", CASES, ids=IDS)
def test_no_run_or_no_answer_is_not_attempted(checker, chapter, attr, wrong, tmp_path, capsys):
    answer = getattr(solution(chapter), attr)
    for args in ((answer, None), (None, None), (answer,)):         # (answer,): on_ranks forgotten
        ok, out = checker(*args), capsys.readouterr().out
        assert ok is False and out.startswith("not attempted yet: ") and "on_ranks" in out, (args, out)
    ok, out = verdict(checker, None, run_of(tmp_path, chapter), capsys)
    assert ok is False and out.startswith("not attempted yet: set answer"), out


@pytest.mark.parametrize("checker, chapter, attr, wrong", CASES, ids=IDS)
def test_a_run_of_another_chapters_cell_or_not_a_run_is_wrong(checker, chapter, attr, wrong, tmp_path, capsys):
    answer = getattr(solution(chapter), attr)
    other = next(c for c in ("00", "03", "04") if c != chapter)
    ok, out = verdict(checker, answer, run_of(tmp_path / "other", other), capsys)
    assert ok is False and out.startswith("wrong, because ") and "another cell" in out, out
    run = run_of(tmp_path, chapter)
    for bad, word in ((run.returns, "itself"), (5, "JobResult"), ("on_ranks", "JobResult"),
                      (FakeRun(tmp_path / "empty", None, {}), "another cell")):
        ok, out = verdict(checker, answer, bad, capsys)
        assert ok is False and out.startswith("wrong, because ") and word in out, (bad, out)
    (run.run_dir / "cell.py").unlink()
    ok, out = verdict(checker, answer, run, capsys)
    assert ok is False and "not readable" in out, out


@pytest.mark.parametrize("checker, chapter, attr, wrong", CASES, ids=IDS)
def test_checkers_never_raise_and_name_the_problem(checker, chapter, attr, wrong, tmp_path, capsys):
    run = run_of(tmp_path, chapter)
    for answer in ODD:
        ok, out = verdict(checker, answer, run, capsys)
        assert ok is False and out.startswith("wrong, because "), (answer, out)
        assert "could not read" not in out, (answer, out)


def test_every_cell_checker_is_tested():
    assert {c[0] for c in CASES} == {f for fs in ex.CELL_CHECKERS.values() for f in fs}
    assert {f for fs in ex.CELL_CHECKERS.values() for f in fs} <= {f for fs in ex.CHECKERS.values() for f in fs}


def test_each_chapter_cell_returns_what_its_checker_reads():
    for chapter, keys in (("00", [ex.EX00_SUM_KEY]), ("01", [ex.EX01_SHARD_KEY]), ("02", list(ex.EX02_MEMORY_KEYS)), ("03", ["data shard", "model shard"]),
                          ("04", [ex.EX04_CALLS_KEY])):
        assert all(f'"{k}"' in rank_cell(chapter) for k in keys), chapter


def test_numpy_answers_count_as_their_python_type(tmp_path):
    assert ex.check_00_without_reducer(np.bool_(False), run_of(tmp_path / "a", "00")) is True
    assert ex.check_03_without_mp_division(np.int64(2), run_of(tmp_path / "b", "03")) is True
    assert ex.check_01_block_shard(np.int64(1), run_of(tmp_path / "d", "01")) is True
    assert ex.check_04_unfused_calls(np.int32(62), run_of(tmp_path / "c", "04")) is True


CELL_00 = """# %%ranks cfg
reducer = nn.DistributedGradReducer(opt.parameters)

@ms.jit
def train_step(x, y):
    loss, grads = grad_fn(x, y)
    {step}
    return loss
"""


@pytest.mark.parametrize("step, edited_", [
    ("opt(reducer(grads))", False),                         # the reducer under another name
    ("grads = reducer(grads); opt(grads)", False),
    ("opt(grads)  # opt(reduce_grads(grads))", True),       # the old call kept as a comment
    ("opt(grads)", True),
    ("self.opt(self.reducer(grads))", False),               # a Cell's reducer attribute, called
    ("self.opt(grads)", True)])
def test_00_the_edit_is_the_reducer_call_gone(step, edited_, tmp_path, capsys):
    run = FakeRun(tmp_path, CELL_00.format(step=step), returns_00(DRIFTED))
    ok, out = verdict(ex.check_00_without_reducer, False, run, capsys)
    assert ok is edited_ and out.startswith("right: " if edited_ else "not attempted yet: "), out


def test_00_the_truth_is_read_from_the_returns(tmp_path, capsys):
    """Equal sums after the edit (a one-rank job, say): True is right, False wrong; equal to 9 digits is equal."""
    source = edited("00", rank_cell("00"))
    run = FakeRun(tmp_path, source, returns_00([1.0000000001, 1.0000000002]))
    assert verdict(ex.check_00_without_reducer, True, run, capsys)[0] is True
    ok, out = verdict(ex.check_00_without_reducer, False, run, capsys)
    assert ok is False and "same sum of weights" in out, out
    one = FakeRun(tmp_path / "one", source, returns_00([616.1]))
    ok, out = verdict(ex.check_00_without_reducer, True, one, capsys)
    assert ok is True and "one-rank job" in out, out


def test_03_the_factor_is_whatever_the_run_shows(tmp_path, capsys):
    """mp = 4 in the edited cell: the factor is 4, and 2 (the shipped mp) is wrong."""
    run = FakeRun(tmp_path, edited("03", rank_cell("03")).replace("mp = 2 ", "mp = 4 "), returns_03(4.0, mp=4))
    ok, out = verdict(ex.check_03_without_mp_division, 4, run, capsys)
    assert ok is True and "mp = 4" in out, out
    assert verdict(ex.check_03_without_mp_division, 2, run, capsys)[0] is False


def test_03_needs_a_cpu_run_with_the_ratio_that_agrees(tmp_path, capsys):
    source = edited("03", rank_cell("03"))
    cards = FakeRun(tmp_path / "gpu", source, returns_03(1.0), device="GPU")
    ok, out = verdict(ex.check_03_without_mp_division, 2, cards, capsys)
    assert ok is False and out.startswith("not attempted yet: ") and "CPU" in out, out
    old = FakeRun(tmp_path / "old", source, {r: {k: v for k, v in d.items() if k != ex.EX03_RATIO_KEY}
                                             for r, d in returns_03(2.0).items()})
    ok, out = verdict(ex.check_03_without_mp_division, 2, old, capsys)
    assert ok is False and ex.EX03_RATIO_KEY in out and "another cell" not in out, out
    for ratios in ([2.0] * 7 + [3.0], [float("nan")] * 8):
        ok, out = verdict(ex.check_03_without_mp_division, 2, FakeRun(tmp_path, source, returns_03(ratios)), capsys)
        assert ok is False and "do not agree" in out, out


@pytest.mark.parametrize("fusion, calls, edited_", [
    ('{"allreduce": {"mode": "auto", "config": None}}', 1, False),
    ('{"allreduce": {"mode": "size", "config": 1}}', 3, False),   # fused into 3 buckets: not the edit asked for
    ("dict()", 1, False),                                          # not a literal: the returns decide
    ("dict()", 62, True),
    ("{}", 62, True)])
def test_04_the_edit_is_read_from_the_cell_and_the_returns(fusion, calls, edited_, tmp_path, capsys):
    source = re.sub(r"^fusion = \{.*?\}(?=\s*(#|$))", f"fusion = {fusion}", rank_cell("04"), count=1, flags=re.M)
    ok, out = verdict(ex.check_04_unfused_calls, calls, FakeRun(tmp_path, source, returns_04(calls)), capsys)
    assert ok is edited_ and out.startswith("right: " if edited_ else "not attempted yet: "), out


def test_04_comm_fusion_left_out_is_mindspores_default(tmp_path, capsys):
    source = re.sub(r", comm_fusion=fusion", "", rank_cell("04"))
    assert "comm_fusion" not in source
    assert verdict(ex.check_04_unfused_calls, 62, FakeRun(tmp_path, source, returns_04(62)), capsys)[0] is True


def test_04_ranks_must_agree_and_see_some_allreduce(tmp_path, capsys):
    source = edited("04", rank_cell("04"))
    ok, out = verdict(ex.check_04_unfused_calls, 62, FakeRun(tmp_path, source, returns_04([62] * 7 + [61])), capsys)
    assert ok is False and "different AllReduce calls" in out, out
    ok, out = verdict(ex.check_04_unfused_calls, 0, FakeRun(tmp_path, source, returns_04(0, ranks=1)), capsys)
    assert ok is False and out.startswith("not attempted yet: ") and "no AllReduce" in out, out
