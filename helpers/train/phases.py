"""Several samplers trained as phases of one job, each from the same start, alternated: one launch, not four."""

from __future__ import annotations

import time

import numpy as np


def step_state(step) -> dict:
    """Every parameter of the train step, copied to the host, by name."""
    return {p.name: p.asnumpy().copy() for p in step.get_parameters()}


def load_state(step, state: dict) -> None:
    """Put ``state`` (from ``step_state``) back into the train step's parameters, copied into their memory (the
    graph reads it; ``set_data`` left the optimizer's step counter stale there); no recompilation."""
    import mindspore as ms

    for p in step.get_parameters():
        p.copy_(ms.Tensor(state[p.name]))


def rounds(steps: int, n_rounds: int) -> list[range]:
    """``range(steps)`` cut into ``n_rounds`` contiguous, nearly equal chunks (empty ones dropped)."""
    bounds = np.linspace(0, steps, max(1, min(n_rounds, steps)) + 1).round().astype(int)
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def train_phases(cfg, rank: int, world: int, out, step, run_steps, finish, memory_now) -> dict:
    """Train ``step`` once per sampler in ``cfg.phase_samplers``, alternating in ``cfg.phase_rounds`` rounds.

    ``run_steps(step, iterator, steps, phase, job_step0)`` runs and records some steps (tagged with the phase
    and numbered from ``job_step0`` across the job, for the progress bar); ``finish()`` returns a phase's
    closing figures (evaluation, checksum) for the state now loaded; ``memory_now()`` the process's memory
    figures for the ``ready`` record.
    Writes one ``phase_summary`` record per phase; returns the job's summary (its phases' names and seconds)."""
    from helpers.train.data import build_dataset

    phases = list(cfg.phase_samplers)
    start = step_state(step)
    states = dict.fromkeys(phases, start)
    data = {k: build_dataset(cfg.replace(sampler=k, phase_samplers=()), "train", rank, world,
                             batch_size=cfg.micro_batch_size).repeat().create_tuple_iterator(num_epochs=-1)
            for k in phases}
    out.write("ready", **memory_now())    # memory before the first step, the phases' pipelines running
    spent = dict.fromkeys(phases, 0.0)
    started = {}
    done = 0
    for chunk in rounds(cfg.steps, cfg.phase_rounds):
        for k in phases:
            load_state(step, states[k])
            started.setdefault(k, state_digest(step_state(step)))    # what this phase really started from
            t0 = time.perf_counter()
            run_steps(step, data[k], chunk, k, done)
            spent[k] += time.perf_counter() - t0
            states[k] = step_state(step)
            done += len(chunk)
    for k in phases:
        load_state(step, states[k])
        t0 = time.perf_counter()
        closing = finish()
        out.write("phase_summary", phase=k, train_s=spent[k], finish_s=time.perf_counter() - t0,
                  start_digest=started[k], **closing)
    return dict(phases=phases, phase_rounds=len(rounds(cfg.steps, cfg.phase_rounds)),
                train_s=float(sum(spent.values())))


def state_digest(state: dict) -> str:
    """A short digest of a host state: equal for every phase when they really start from the same one."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(np.ascontiguousarray(state[name]).tobytes())
    return h.hexdigest()[:16]
