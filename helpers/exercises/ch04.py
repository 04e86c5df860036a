"""Chapter 04 exercises: fusion buckets, the communication share, the code cell unfused (public via
``helpers.exercises``)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from helpers.exercises.common import RUN_NAME, as_int, cell_run, checker, kind_of, read_count, say

EX04_GRAD_KB = [64, 64, 256, 256, 512, 512, 1024, 1024, 2048, 2048]   # gradient tensors, in order
EX04_BUCKET_KB = 1024                                                 # a bucket closes at >= 1 MB
# One profiled step per rank: (rank, wall step time s, time inside communication kernels s)
EX04_PROFILE = [(0, 1.00, 0.60), (1, 1.00, 0.70), (2, 0.95, 0.50), (3, 1.05, 0.65)]
EX04_SHARE_TOL = 0.0005   # the share to 3 decimals (0.611) or 0.1 % (61.1): coarser cannot tell the
                          # per-rank mean (0.6113) from the pooled ratio (0.6125)
EX04_CALLS_KEY = "AllReduce calls per step"   # in the code cell's finish(...): one profiled step of the rank


def _capped_buckets(sizes_kb, cap_kb) -> int:
    """Buckets when one is closed *before* it would exceed ``cap_kb`` (the usual misreading of the rule)."""
    count, held = 1, 0
    for kb in sizes_kb:
        if held and held + kb > cap_kb:
            count, held = count + 1, 0
        held += kb
    return count


@checker
def check_04_allreduce_calls(answer) -> bool:
    """AllReduce calls per step for ``EX04_GRAD_KB`` cut into buckets that close at >= ``EX04_BUCKET_KB``."""
    got, verdict = read_count(answer, "the number of AllReduce calls per step after fusion")
    if got is None:
        return verdict
    from helpers.topics.comm_fusion import fusion_split_indices

    split = fusion_split_indices([kb * 1024 for kb in EX04_GRAD_KB], EX04_BUCKET_KB * 1024)
    want = len(split) + 1
    if got == want:
        return say(True, f"{want} calls: split points {split} (the 'index' fusion config); without fusion it "
                          f"would be {len(EX04_GRAD_KB)}")
    hints = {
        len(EX04_GRAD_KB): f"{got} is one call per tensor, i.e. no fusion; with {EX04_BUCKET_KB} KB "
                           f"buckets: {want}",
        len(split): f"off by one: {got} is the number of split points {split}; n split points cut the tensors "
                    "into n + 1 buckets, one AllReduce each",
        _capped_buckets(EX04_GRAD_KB, EX04_BUCKET_KB): f"{got} closes a bucket before it would exceed "
        f"{EX04_BUCKET_KB} KB; the rule closes it once it holds at least {EX04_BUCKET_KB} KB",
    }
    return say(False, hints.get(got, f"walk the tensors in order, closing a bucket once it holds >= "
                                      f"{EX04_BUCKET_KB} KB: the split points are {split}, so {want} calls, "
                                      f"not {got}"))


def ex04_job_profile():
    """``EX04_PROFILE`` as a ``helpers.topics.profiling.JobProfile`` (one profiled step per rank)."""
    from helpers.topics.kernel_trace import StepBreakdown
    from helpers.topics.profiling import JobProfile
    from helpers.topics.rank_profile import RankProfile

    ranks, step_s = {}, []
    for rank, step, comm in EX04_PROFILE:
        bd = StepBreakdown(0.0, step * 1e6, step - comm, comm, 0.0, 1, 1, 2)
        ranks[rank] = RankProfile(rank, Path("."), [bd], [[]])
        step_s.append([step])
    step = np.array(step_s, dtype=float)
    return JobProfile(Path("."), ranks, [0], step, np.zeros_like(step))


def _comm_share_hint(got: float, jp) -> str:
    """Why ``got`` (a fraction) is not the job's communication share, naming the usual confusion."""
    want, shares = jp.comm_share, [float(s) for s in jp.comm_share_per_rank]
    pooled = float(jp.comm_s.sum() / jp.step_s.sum())
    near = lambda x: abs(got - x) <= EX04_SHARE_TOL + 1e-9   # noqa: E731
    listed = ", ".join(f"{s:.3f}" for s in shares)
    if near(pooled):
        return (f"{pooled:.4f} pools the times of all ranks (sum of comm / sum of step); the course reports the "
                f"mean of each rank's share ({listed}): {want:.3f}")
    if abs(got - round(want, 2)) < 1e-9 or abs(got - round(want, 1)) < 1e-9:
        return (f"{got} is rounded too coarsely to tell the per-rank mean ({want:.4f}) from the pooled ratio "
                f"({pooled:.4f}): give 3 decimals ({want:.3f}) or a percentage to 0.1 ({want:.1%})")
    if near(1.0 - want):
        return f"{got:.3f} is the compute share (1 - communication); the communication share is {want:.3f}"
    if near(max(shares)):
        return f"{got:.3f} is the largest rank's share; the job's share is the mean over ranks ({listed})"
    if any(near(s) for s in shares):
        return f"{got:.3f} is one rank's share; the job's share is the mean over all ranks ({listed})"
    if near(float(np.median(shares))):
        return f"{got:.4f} is the median of the ranks' shares; the course reports their mean"
    return f"per rank, comm / step = {listed}; their mean is {want:.3f} ({want:.1%}), not {got:.3f}"


@checker
def check_04_comm_share(answer) -> bool:
    """The job's communication share (mean over ranks of comm / step) from ``EX04_PROFILE``: a fraction to 3
    decimals (0.611) or a percentage to 0.1 (61.1), within ``EX04_SHARE_TOL`` of the mean of per-rank shares."""
    if answer is None:
        return say(None, "set answer = the communication share, a fraction to 3 decimals (0.123) or a "
                          "percentage to 0.1 (12.3)")
    if isinstance(answer, (bool, np.bool_)) or not isinstance(answer, (int, float, np.integer, np.floating)):
        return say(False, f"the exercise asks for a number, got {kind_of(answer)}")
    got = float(answer)
    if not np.isfinite(got) or not 0.0 <= got <= 100.0:
        return say(False, f"a share lies between 0 and 1 (or 0 and 100 %), got {answer!r}")
    got = got / 100.0 if got > 1.0 else got
    jp = ex04_job_profile()
    if abs(got - jp.comm_share) <= EX04_SHARE_TOL:
        return say(True, f"{jp.comm_share:.1%}: the mean of the ranks' shares "
                          f"{', '.join(f'{s:.1%}' for s in jp.comm_share_per_rank)} (what JobProfile.comm_share "
                          f"reports); pooling the times would give "
                          f"{float(jp.comm_s.sum() / jp.step_s.sum()):.2%}")
    return say(False, _comm_share_hint(got, jp))


def _cell_fusion(tree: ast.AST):
    """The ``comm_fusion`` the cell passes to ``set_auto_parallel_context`` ({} when none), or None when it is not
    a literal (directly or through the name it was assigned to)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "attr", getattr(n.func, "id", None)) == "set_auto_parallel_context"]
    value = next((k.value for c in calls[::-1] for k in c.keywords if k.arg == "comm_fusion"), None)
    if value is None:
        return {}
    if isinstance(value, ast.Name):
        bound = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)]
        value = max(bound, key=lambda n: (n.lineno, n.col_offset), default=None)
    try:
        return ast.literal_eval(value) if value is not None else None
    except (ValueError, TypeError, SyntaxError):
        return None


def _unfused_calls(run, todo: str):
    """``(AllReduce calls per step, None)`` from a run of the cell with ``fusion = {}``; else ``(None, verdict)``
    once the reason is said."""
    returns, tree, verdict = cell_run(run, (EX04_CALLS_KEY,), todo)
    if returns is None:
        return None, verdict
    counts = [as_int(v[EX04_CALLS_KEY]) for v in returns.values()]
    if None in counts or len(set(counts)) != 1:
        return None, say(False, f"the ranks counted different AllReduce calls per step ({counts}): run the code "
                                "cell again")
    fusion, calls = _cell_fusion(tree), counts[0]
    if fusion or (fusion is None and calls == 1):
        still = f"passes comm_fusion = {fusion!r}" if fusion else "shows 1 AllReduce call per step"
        return None, say(None, f"the cell that made {RUN_NAME} still {still} (fused): {todo}, then answer")
    if calls == 0:
        return None, say(None, f"{RUN_NAME} shows no AllReduce in the profiled step: a one-rank job reduces "
                               "nothing; run the code cell on the chapter's ranks")
    return calls, None


@checker
def check_04_unfused_calls(answer, run=None) -> bool:
    """AllReduce calls per step once the code cell sets ``fusion = {}``, read from ``run``: the cell's
    ``JobResult`` (``on_ranks``)."""
    want, verdict = _unfused_calls(run, "set fusion = {} in the code cell and run it again")
    if want is None:
        return verdict
    got, verdict = read_count(answer, "the number of AllReduce calls one step makes with fusion = {}")
    if got is None:
        return verdict
    ranks = len(run.returns)
    if got == want:
        return say(True, f"{want}: with fusion = {{}} (MindSpore's default) each trainable parameter's "
                          f"gradient goes in an AllReduce of its own: {want} gradient tensors, {want} calls per "
                          "step; fusion packs them into a few buckets")
    hints = {
        1: f"1 is the fused count (fusion packs the gradients into buckets); with fusion = {{}} "
           f"{RUN_NAME}.returns shows {want}",
        want * ranks: f"{got} counts the calls of all {ranks} ranks; one step of one rank makes {want}",
        ranks: f"{got} is the number of ranks; the count is per rank and step: {want}",
    }
    return say(False, hints.get(got, f"{RUN_NAME}.returns shows {want} AllReduce calls per step on every rank, "
                                     f"not {got}"))
