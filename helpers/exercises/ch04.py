"""Chapter 04 exercises: fusion buckets and the communication share (public via ``helpers.exercises``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers.exercises.common import checker, read_count, kind_of, say

EX04_GRAD_KB = [64, 64, 256, 256, 512, 512, 1024, 1024, 2048, 2048]   # gradient tensors, in order
EX04_BUCKET_KB = 1024                                                 # a bucket closes at >= 1 MB
# One profiled step per rank: (rank, wall step time s, time inside communication kernels s)
EX04_PROFILE = [(0, 1.00, 0.60), (1, 1.00, 0.70), (2, 0.95, 0.50), (3, 1.05, 0.65)]
EX04_SHARE_TOL = 0.0005   # the share to 3 decimals (0.611) or 0.1 % (61.1): coarser cannot tell the
                          # per-rank mean (0.6113) from the pooled ratio (0.6125)


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
