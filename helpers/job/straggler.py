"""Which rank held the others back, why, and what it cost: a verdict from the ranks' step records (no MindSpore).

In data parallel every rank waits in the gradient AllReduce for the last one to arrive. On the sampled steps of
``helpers.train.time_split`` each rank records ``reduce_s``, the AllReduce including that wait, so the rank with the
shortest ``reduce_s`` arrived last, and ``reduce_s[r] - reduce_s[last]`` is what rank ``r`` waited for it. The
cause is where the last rank spent its extra time before the AllReduce: its data wait (``data_s``) or its
forward and backward (``grad_s``), each against the other ranks' median. Jobs without sampled steps (loss-scale
cells, gradient accumulation, the hybrid step) get a verdict from the data wait alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

SHARE = 0.10          # a straggler costs the other ranks at least 10 % of their step time...
MIN_WAIT_S = 0.002    # ...and at least 2 ms per step
MOST_STEPS = 0.5      # ...and is the last to arrive in at least half of the sampled steps
LIVE_STEPS = 3        # the live display marks a rank that has been the straggler for this many judged steps


@dataclass(frozen=True)
class StragglerVerdict:
    """The rank (and node) the others waited for, the cause and the cost; ``rank`` None: no straggler."""

    rank: int | None
    node: str | None
    cause: str | None            # "data" or "compute"
    wait_s: float                # seconds per step the other ranks waited for it (their mean)
    wait_share: float            # that wait over the other ranks' step time
    lead_s: float                # per step (median), how much later it arrived than the next-latest rank
    last_share: float            # of the sampled steps, the share in which this rank arrived last
    spread_s: float              # per step, the mean wait for whichever rank arrived last (the spread measured)
    spread_share: float          # that spread over the step time
    steps: int                   # steps the verdict read
    method: str                  # "split" (sampled steps), "data wait" (no sampled steps) or "none"

    def line(self) -> str:
        """The one line shown at the end of a job."""
        if self.method == "none":
            return "straggler: no steps to judge"
        how = f"{self.steps} {'sampled ' if self.method == 'split' else ''}steps"
        if self.rank is None:
            return (f"no straggler: the ranks waited {1e3 * self.spread_s:.1f} ms per step for the last to arrive "
                    f"({self.spread_share:.1%} of a step; {how})")
        where = f" on {self.node}" if self.node else ""
        return (f"straggler: rank {self.rank}{where}, cause {self.cause}: the other ranks waited "
                f"{1e3 * self.wait_s:.1f} ms per step for it ({self.wait_share:.1%} of their time; last in "
                f"{self.last_share:.0%} of {how})")

    def as_dict(self) -> dict:
        return asdict(self)


def _key(rec: dict):
    return rec.get("phase"), rec.get("job_step", rec["step"])


def _aligned(steps: dict[int, list[dict]], need: str) -> tuple[list[int], dict[str, np.ndarray]]:
    """Ranks and (ranks x steps) arrays of the steps every rank recorded with field ``need``. Left out: step 0 (it
    compiles) and, for the sampled steps, the first one (the split graphs' first run initialises their kernels:
    measured 4 s of waiting on a ci job whose steps take 0.5 s)."""
    ranks = sorted(steps)
    by_rank = []
    for r in ranks:
        recs = [x for x in steps[r][1:] if x.get(need) is not None]
        by_rank.append({_key(x): x for x in (recs[1:] if need == "reduce_s" else recs)})
    keys = [k for k in by_rank[0] if all(k in b for b in by_rank[1:])] if by_rank else []
    fields = ("step_s", "data_s", "grad_s", "reduce_s")
    arrays = {f: np.array([[b[k].get(f, np.nan) for k in keys] for b in by_rank], float) for f in fields}
    return ranks, arrays


def _others(a: np.ndarray, i: int) -> np.ndarray:
    return np.delete(a, i, axis=0)


NOTHING = dict(rank=None, node=None, cause=None, wait_s=0.0, wait_share=0.0, lead_s=0.0, last_share=0.0)


def straggler_verdict(steps: dict[int, list[dict]], hosts: dict[int, str] | None = None) -> StragglerVerdict:
    """The job's verdict from ``steps`` (rank -> its step records) and ``hosts`` (rank -> node, from the start
    records): on the sampled steps when there are any, else on the data wait of every step after the first.

    A rank's lateness per step is how much less it waited in the AllReduce than the others (sampled steps) or how
    much longer it waited for data. The straggler is the rank whose median lead over the next-latest rank is at
    least ``SHARE`` of a step: fixing it alone would save that much. A group of equally slow ranks (e.g. those
    sharing a busy core) leads by little, so it is no single straggler; the spread then says what was waited."""
    hosts = hosts or {}
    ranks, a = _aligned(steps, "reduce_s") if len(steps) > 1 else ([], {})
    method = "split"
    if ranks and not a["reduce_s"].shape[1]:
        (ranks, a), method = _aligned(steps, "data_s"), "data wait"
    if not ranks or not a["data_s"].shape[1]:
        return StragglerVerdict(**NOTHING, spread_s=0.0, spread_share=0.0, steps=0, method="none")
    late = -a["reduce_s"] if method == "split" else a["data_s"]     # the shortest reduction arrived last
    n = late.shape[1]
    lead = np.array([np.median(late[i] - _others(late, i).max(axis=0)) for i in range(len(ranks))])
    last = late.argmax(axis=0)
    spread = float(np.mean([np.mean(late[i, j] - _others(late, i)[:, j]) for j, i in enumerate(last)]))
    top = int(lead.argmax())
    other_step = float(np.mean(_others(a["step_s"], top)))
    spread_share = spread / float(np.mean(a["step_s"]))
    if lead[top] < max(MIN_WAIT_S, SHARE * other_step):
        return StragglerVerdict(**NOTHING, spread_s=spread, spread_share=spread_share, steps=n, method=method)
    wait = float(np.mean(late[top] - _others(late, top)))
    rank = ranks[top]
    return StragglerVerdict(rank, hosts.get(rank), _cause(a, top, method), wait, wait / other_step, float(lead[top]),
                            float(np.mean(last == top)), spread, spread_share, n, method)


def _cause(a: dict[str, np.ndarray], i: int, method: str) -> str:
    """Where the last rank's extra time went before the AllReduce: its data wait or its forward and backward."""
    if method != "split":
        return "data"
    extra = {f: float(np.median(a[f][i] - np.median(_others(a[f], i), axis=0))) for f in ("data_s", "grad_s")}
    return "data" if extra["data_s"] >= extra["grad_s"] else "compute"


def step_straggler(records: list[dict]) -> tuple[int | None, str | None] | None:
    """One step's straggler from every rank's record of it: ``(rank, cause)``, ``(None, None)`` for none, or None
    when the step says nothing (a fused step whose data waits are even: a slow compute would not show there)."""
    if len(records) < 2 or any(x.get("data_s") is None for x in records):
        return None     # one rank waits for nobody; a cell's report() without its data wait: nothing to judge
    step_s = np.array([x["step_s"] for x in records], float)
    bar = max(MIN_WAIT_S, SHARE * float(np.median(step_s)))
    data = np.array([x["data_s"] for x in records], float)
    if all(x.get("reduce_s") is not None for x in records):
        red = np.array([x["reduce_s"] for x in records], float)
        i = int(red.argmin())
        if np.mean(np.delete(red, i) - red[i]) < bar:
            return None, None
        grad = np.array([x["grad_s"] for x in records], float)
        data_extra, grad_extra = data[i] - np.median(np.delete(data, i)), grad[i] - np.median(np.delete(grad, i))
        return records[i]["rank"], "data" if data_extra >= grad_extra else "compute"
    i = int(data.argmax())
    if np.mean(data[i] - np.delete(data, i)) >= bar:
        return records[i]["rank"], "data"
    return None


class LiveStraggler:
    """Fed every rank's step records as they arrive; names the rank that was the straggler in each of the last
    ``LIVE_STEPS`` judged steps (steps that say nothing, see ``step_straggler``, are skipped)."""

    def __init__(self, world: int, streak: int = LIVE_STEPS):
        self.world, self.streak = world, streak
        self.pending: dict = {}
        self.judged: list[tuple[int | None, str | None]] = []
        self.records: dict[int, list[dict]] = {}

    def feed(self, rec: dict) -> None:
        self.records.setdefault(rec["rank"], []).append(rec)
        if rec.get("step", rec.get("job_step")) == 0 and rec.get("phase") is None:
            return                                      # the first step compiles: nothing to judge
        group = self.pending.setdefault(_key(rec), {})
        group[rec["rank"]] = rec
        if len(group) == self.world:
            del self.pending[_key(rec)]
            said = step_straggler(list(group.values()))
            if said is not None:
                self.judged.append(said)

    def marked(self) -> tuple[int, str] | None:
        """``(rank, cause)`` of the straggler of the last ``streak`` judged steps, else None."""
        tail = self.judged[-self.streak:]
        if len(tail) < self.streak or tail[0][0] is None or any(t[0] != tail[0][0] for t in tail):
            return None
        return tail[-1][0], tail[-1][1]


SPLIT_PARTS = ("data", "compute", "communication", "other")


def rank_time_split(steps: dict[int, list[dict]]) -> tuple[list[int], np.ndarray, bool]:
    """Per rank, mean seconds per step in data wait, compute, communication and the rest (``SPLIT_PARTS``), over
    the sampled steps the verdict reads; ``split`` False when the job has none: then "compute" is the whole fused
    step call (compute and communication together) and "communication" is 0."""
    ranks, a = _aligned(steps, "reduce_s") if len(steps) > 1 else ([], {})
    split = bool(ranks) and a["reduce_s"].shape[1] > 0
    if not split:
        ranks, a = _aligned(steps, "data_s") if steps else ([], {})
        if not ranks:
            return [], np.zeros((0, 4)), False
        a["grad_s"] = a["step_s"] - a["data_s"]
        a["reduce_s"] = np.zeros_like(a["step_s"])
    parts = [a["data_s"], a["grad_s"], a["reduce_s"]]
    rest = np.clip(a["step_s"] - sum(parts), 0.0, None)
    return ranks, np.stack([p.mean(axis=1) for p in parts + [rest]], axis=1), split


def _split_arrays(steps: dict[int, list[dict]]) -> dict[str, np.ndarray] | None:
    """The (ranks x steps) arrays of the sampled split steps every rank recorded; None when there are none."""
    ranks, a = _aligned(steps, "reduce_s") if len(steps) > 1 else ([], {})
    return a if ranks and a["reduce_s"].shape[1] else None


def step_comm_shares(steps: dict[int, list[dict]]) -> np.ndarray:
    """Per sampled split step, the ranks' mean communication share of the step: its step-to-step spread is the
    noise any comparison of the share must allow for. Empty when the job has no split steps."""
    a = _split_arrays(steps)
    return np.zeros(0) if a is None else np.nanmean(a["reduce_s"] / a["step_s"], axis=0)


def comm_wait_split(steps: dict[int, list[dict]]) -> dict | None:
    """The gradient AllReduce's time per sampled step split into waiting and the collective itself: the rank that
    arrives last waits for no one, so its time is the collective's own (at most: launch and transfer); every other
    rank's excess over it is waiting for that rank. Means over the steps, seconds; None without split steps."""
    a = _split_arrays(steps)
    if a is None:
        return None
    reduce_s = a["reduce_s"]
    own = reduce_s.min(axis=0)
    return dict(comm_s=float(reduce_s.mean()), collective_s=float(own.mean()),
                wait_s=float((reduce_s - own).mean()), steps=int(reduce_s.shape[1]))
