"""Several samplers trained as phases of one job, each from the same start, alternated: one launch, not four.

With ``cfg.phase_seeds`` every sampler runs once per seed, seed after seed: a seed's phases all start from the
weights that seed initialises and read in that seed's data order (chapter 01's repeats), named ``sampler@seed``.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext

import numpy as np

from helpers.core.cpu_share import CpuShareUnavailable, OtherWork, join_rank_group
from helpers.core.paths import JOB_ID_ENV, LAUNCHER_PID_ENV

# MindSpore's DistributedSampler takes its shuffle seed from the global dataset seed when it is built (this line of
# the wheel's dataset/engine/samplers.py; tests/contract/test_phase_seeds.py pins it): each seed's datasets are built
# right after ds.config.set_seed(seed).
SAMPLERS_SOURCE = "dataset/engine/samplers.py"
SEED_READ_AT_BUILD = "self.seed = ds.config.get_seed()"
PREFETCH = 1                     # rows each pipeline op queues ahead in a phase (MindSpore's default: 16)

def step_state(step) -> dict:
    """Every parameter of the train step, copied to the host, by name."""
    return {p.name: p.asnumpy().copy() for p in step.get_parameters()}


def load_state(step, state: dict) -> None:
    """Put ``state`` (from ``step_state``) back into the train step's parameters, copied into their memory (the
    graph reads it; ``set_data`` left the optimizer's step counter stale there); no recompilation."""
    for p in step.get_parameters():
        write_param(p, state[p.name])


def write_param(p, value) -> None:
    """``value`` into parameter ``p``'s memory. On CPU ``asnumpy()`` is a view of the memory the compiled graphs read,
    written in place (a phase change's 167 writes: ~1 ms instead of ~250 ms of ``copy_`` op launches); elsewhere, or
    if the view is a copy, ``copy_``."""
    import mindspore as ms

    if ms.get_context("device_target") == "CPU":
        view = p.asnumpy()
        if view.flags.writeable and np.shares_memory(view, p.asnumpy()):
            np.copyto(view, np.asarray(value, view.dtype).reshape(view.shape))
            return
    p.copy_(ms.Tensor(np.asarray(value)))


def rounds(steps: int, n_rounds: int) -> list[range]:
    """``range(steps)`` cut into ``n_rounds`` contiguous, nearly equal chunks (empty ones dropped)."""
    bounds = np.linspace(0, steps, max(1, min(n_rounds, steps)) + 1).round().astype(int)
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def phase_name(sampler: str, seed: int | None) -> str:
    """A phase's name in the records: the sampler, or ``sampler@seed`` when the job repeats it over seeds."""
    return sampler if seed is None else f"{sampler}@{seed}"


def phase_names(cfg) -> list[str]:
    """Every phase of ``cfg`` in the order the job runs them (seed after seed)."""
    return [phase_name(k, s) for s in (cfg.phase_seeds or (None,)) for k in cfg.phase_samplers]


def seeded_start(start: dict, fresh_params: dict) -> dict:
    """``start`` (a train step's host state) with the network's parameters replaced by ``fresh_params`` (name ->
    array, from a network built after ``ms.set_seed(seed)``); optimizer state (zero momentum, step 0) kept."""
    missing = [n for n in fresh_params if n not in start]
    if missing:
        raise KeyError(f"the fresh network has parameters the train step lacks: {missing[:3]}")
    return {n: (fresh_params[n].copy() if n in fresh_params else v) for n, v in start.items()}


def _datasets(cfg, rank: int, world: int, seed: int | None) -> dict:
    """One repeated train dataset per sampler, in ``seed``'s data order (``None``: the config's seed); its
    pipeline starts when an iterator is created."""
    import mindspore.dataset as ds

    from helpers.train.data import build_dataset

    run = cfg.replace(phase_samplers=(), phase_seeds=(), seed=cfg.seed if seed is None else seed)
    ds.config.set_seed(run.seed)     # read when each DistributedSampler is built (SEED_READ_AT_BUILD)
    # a phase is a few steps: MindSpore's default queues (16 rows per op) would decode batches no step reads, on the
    # cores the other ranks train on (or, under a CPU quota, on the rank's own share); one row per op reads least ahead
    ds.config.set_prefetch_size(PREFETCH)
    return {k: build_dataset(run.replace(sampler=k), "train", rank, world, batch_size=cfg.micro_batch_size).repeat()
            for k in cfg.phase_samplers}


def train_phases(cfg, rank: int, world: int, out, step, run_steps, finish, memory_now, fresh_params=None) -> dict:
    """Train ``step`` once per sampler in ``cfg.phase_samplers`` (and per seed in ``cfg.phase_seeds``), the
    samplers of one seed alternating in ``cfg.phase_rounds`` rounds.

    ``run_steps(step, iterator, steps, phase, job_step0)`` runs and records some steps (tagged with the phase
    and numbered from ``job_step0`` across the job, for the progress bar); ``finish(iterator)`` returns a
    phase's closing figures (evaluation, checksum) for the state now loaded, ``iterator`` the phase's own data (the
    batches its rank would read next); ``memory_now()`` the process's memory
    figures for the ``ready`` record; ``fresh_params(seed)`` a network's parameters initialised by ``seed``.
    Writes one ``phase_summary`` record per phase; returns the job's summary (its phases' names and seconds)."""
    seeds = cfg.phase_seeds or (None,)
    start = step_state(step)
    # every seed's weights and datasets before the first step: slow on a loaded machine (a fresh network is built in
    # PyNative), and only before the first step does the launcher's watchdog allow for it (helpers.job.stall)
    starts = {x: start if x is None else seeded_start(start, fresh_params(x)) for x in seeds}
    datasets = {x: _datasets(cfg, rank, world, x) for x in seeds}
    spent, done, total = {}, 0, 0.0
    share, held = rank_cpu_share(cfg, rank)
    launcher = int(os.environ.get(LAUNCHER_PID_ENV) or 0) or None
    other = OtherWork(share, launcher) if share and rank == 0 else None    # rank 0 counts what else the machine ran
    for i, seed in enumerate(seeds):
        built, data = datasets.pop(seed), {}
        if i == 0:
            out.write("ready", **memory_now(), cpu_share=held)    # memory before the first step
        states = dict.fromkeys(cfg.phase_samplers, starts.pop(seed))
        started = {}
        for chunk in rounds(cfg.steps, cfg.phase_rounds):
            for k in cfg.phase_samplers:
                load_state(step, states[k])
                started.setdefault(k, state_digest(step_state(step)))    # what this phase really started from
                t0 = time.perf_counter()
                steps = chunk
                if done == 0 and share:          # the job's first step compiles the graphs: at the whole core
                    data[k] = built[k].create_tuple_iterator(num_epochs=-1)
                    run_steps(step, data[k], steps[:1], phase_name(k, seed), done)
                    steps, done = steps[1:], 1
                with (other.during(phase_name(k, seed)) if other else nullcontext(),    # read at the whole core
                      share.held(cfg.rank_cpu_share) if share else nullcontext()):
                    if k not in data:    # a split's pipeline starts with its steps: none reads ahead meanwhile
                        data[k] = built[k].create_tuple_iterator(num_epochs=-1)
                    run_steps(step, data[k], steps, phase_name(k, seed), done)
                spent[k] = spent.get(k, 0.0) + time.perf_counter() - t0
                states[k] = step_state(step)
                done += len(steps)
        for k in cfg.phase_samplers:
            load_state(step, states[k])
            t0 = time.perf_counter()
            closing = finish(data.get(k))
            trained = spent.pop(k)
            total += trained
            out.write("phase_summary", phase=phase_name(k, seed), sampler=k, seed=seed, train_s=trained,
                      finish_s=time.perf_counter() - t0, start_digest=started[k], **closing)
        for it in data.values():
            it.stop()                        # this seed's pipelines end before the next seed's start
    if other:
        held = dict(held, **other.cores())
    return dict(phases=phase_names(cfg), phase_rounds=len(rounds(cfg.steps, cfg.phase_rounds)),
                train_s=float(total), cpu_share=held)


def rank_cpu_share(cfg, rank: int):
    """This rank's CPU quota group when ``cfg.rank_cpu_share`` asks for one (else None), and what the records
    say of it: the share, whether it holds, and why not."""
    if cfg.rank_cpu_share is None:
        return None, None
    try:
        return join_rank_group(os.environ.get(JOB_ID_ENV, "no-job-id"), rank), dict(share=cfg.rank_cpu_share,
                                                                                     held=True, why=None)
    except CpuShareUnavailable as e:
        return None, dict(share=cfg.rank_cpu_share, held=False, why=str(e))


def state_digest(state: dict) -> str:
    """A short digest of a host state: equal for every phase when they really start from the same one."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(np.ascontiguousarray(state[name]).tobytes())
    return h.hexdigest()[:16]
