"""Samplers as phases of one job: state copied and put back exactly, rounds alternated, records read apart."""

import numpy as np
import pytest

from helpers.core.config import JobConfig
from helpers.core.errors import ConfigError
from helpers.core.metrics import MetricsWriter, metrics_path, read_records
from helpers.job.launch import load_result
from helpers.train import phases


def test_rounds_cut_the_steps_into_contiguous_nearly_equal_chunks():
    assert phases.rounds(8, 2) == [range(0, 4), range(4, 8)]
    assert [len(c) for c in phases.rounds(7, 3)] == [2, 3, 2]
    assert phases.rounds(3, 5) == [range(0, 1), range(1, 2), range(2, 3)]     # never an empty round
    assert phases.rounds(5, 1) == [range(0, 5)]


def test_config_accepts_distinct_samplers_and_refuses_the_rest():
    cfg = JobConfig(phase_samplers=["contiguous", "stratified"]).validate()
    assert cfg.phase_samplers == ("contiguous", "stratified")
    for bad, field in ((dict(phase_samplers=["nope"]), "phase_samplers"),
                       (dict(phase_samplers=["stratified", "stratified"]), "phase_samplers"),
                       (dict(phase_samplers=["stratified"], profile=True), "phase_samplers"),
                       (dict(phase_samplers=["stratified"], phase_rounds=5, steps=4), "phase_rounds")):
        with pytest.raises(ConfigError) as err:
            JobConfig(**bad).validate()
        assert err.value.fields == [field]
    assert JobConfig(steps=1).validate().phase_rounds == 2      # phase_rounds is not checked without phases


def _dense_step():
    import mindspore as ms
    from mindspore import nn

    from helpers.train.recipe import build_loss, build_optimizer, build_train_step

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    # the gpu8 recipe's parts: a per-step learning rate (Gather by the optimizer's global_step) and AMP O2 with a
    # dynamic loss scale (its own state)
    cfg = JobConfig(world_size=1, global_batch=4, steps=4, lr_schedule="cosine", warmup_fraction=0.25,
                    amp_level="O2", loss_scale="dynamic")
    net = nn.Dense(3, 2)
    return cfg, build_train_step(cfg, net, build_loss(cfg), build_optimizer(cfg, net.trainable_params()))


def _batches(seed, n=4):
    import mindspore as ms

    rng = np.random.default_rng(seed)
    return [(ms.Tensor(rng.random((4, 3), dtype=np.float32)), ms.Tensor(rng.integers(0, 2, 4), ms.int32))
            for _ in range(n)]


def _loss(out) -> float:
    from helpers.train.recipe import step_loss

    return float(step_loss(out)[0])


def test_a_loaded_state_trains_exactly_as_the_state_it_was_copied_from():
    _, step = _dense_step()
    start = phases.step_state(step)
    assert any("moment" in k for k in start), "the optimizer's momentum must be part of the state"
    first = [_loss(step(*b)) for b in _batches(1)]           # all 4 steps of the 4-entry learning-rate list
    assert int(step.optimizer.global_step.asnumpy()[0]) == 4
    assert phases.state_digest(phases.step_state(step)) != phases.state_digest(start)
    phases.load_state(step, start)
    assert phases.state_digest(phases.step_state(step)) == phases.state_digest(start)
    # the graph must see the step counter put back too, or the next step reads past the learning-rate list
    assert [_loss(step(*b)) for b in _batches(1)] == first
    assert int(step.optimizer.global_step.asnumpy()[0]) == 4


class _FakeData:
    """Stands in for build_dataset: each sampler gets its own fixed batches."""

    def __init__(self, seed):
        self.seed = seed

    def repeat(self):
        return self

    def create_tuple_iterator(self, num_epochs=-1):
        return _FakeIterator(_batches(self.seed))


class _FakeIterator(list):
    """A pipeline's iterator: next() and stop() (called when its seed's phases are done)."""

    def __next__(self):
        return self.pop(0)

    def stop(self):
        self.clear()


def test_phases_alternate_in_rounds_and_each_trains_as_if_alone(tmp_path, monkeypatch):
    from helpers.train import data

    seeds = {"contiguous": 1, "stratified": 2}
    monkeypatch.setattr(data, "build_dataset", lambda cfg, *a, **k: _FakeData(seeds[cfg.sampler]))
    cfg, step = _dense_step()
    cfg = cfg.replace(phase_samplers=list(seeds), phase_rounds=2)
    start = phases.step_state(step)
    out = MetricsWriter(tmp_path, 0)

    def run_steps(stp, it, steps, phase, job_step0):
        for i in steps:
            out.write("step", step=i, job_step=job_step0 + i - steps.start, phase=phase,
                      loss=_loss(stp(*next(it))))

    summary = phases.train_phases(cfg, 0, 1, out, step, run_steps, lambda it: {"accuracy": 0.5},
                                  lambda: {"rss_mb": 1.0})
    out.close()
    recs = read_records(metrics_path(tmp_path, 0))
    steps = [r for r in recs if r["event"] == "step"]
    assert [r["phase"] for r in steps] == (["contiguous"] * 2 + ["stratified"] * 2) * 2     # two rounds
    assert [r["job_step"] for r in steps] == list(range(8))
    assert summary["phases"] == list(seeds) and summary["phase_rounds"] == 2
    closing = [r for r in recs if r["event"] == "phase_summary"]
    assert [r["phase"] for r in closing] == list(seeds) and len({r["start_digest"] for r in closing}) == 1
    for k, seed in seeds.items():       # the same batches from the same start, alone, give the same losses
        phases.load_state(step, start)
        alone = [_loss(step(*b)) for b in _batches(seed)]
        assert [r["loss"] for r in steps if r["phase"] == k] == pytest.approx(alone, rel=1e-6)


def test_a_phase_reads_as_its_own_job(tmp_path):
    cfg = JobConfig(world_size=2, global_batch=4, steps=2, phase_samplers=["contiguous", "stratified"])
    cfg.save(tmp_path / "config.json")
    for r in range(2):
        out = MetricsWriter(tmp_path, r)
        for job_step, (phase, i) in enumerate([("contiguous", 0), ("stratified", 0), ("contiguous", 1),
                                               ("stratified", 1)]):
            out.write("step", step=i, job_step=job_step, phase=phase, loss=float(job_step + r), step_s=0.1)
        for phase, acc in (("contiguous", 0.2), ("stratified", 0.7)):
            out.write("phase_summary", phase=phase, train_s=2.0 + r, finish_s=1.0, accuracy=acc, start_digest="d")
        out.write("summary", phases=["contiguous", "stratified"], num_classes=10)
        out.close()
    job = load_result(tmp_path)
    strat = job.phase("stratified")
    assert strat.config.sampler == "stratified" and strat.config.phase_samplers == ()
    assert strat.metric("loss").tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert strat.summary("accuracy") == [0.7, 0.7] and strat.summary("num_classes") == [10, 10]
    assert strat.wall_s == 4.0                       # the slowest rank's steps + evaluation
    with pytest.raises(KeyError, match="no phase 'distributed'"):
        job.phase("distributed")


def _fresh_dense(seed):
    import mindspore as ms
    from mindspore import nn

    ms.set_seed(seed)
    return {p.name: p.asnumpy() for p in nn.Dense(3, 2).get_parameters()}


def test_seeds_run_seed_after_seed_each_from_its_own_weights(tmp_path, monkeypatch):
    """Issue 32: every sampler once per seed; within a seed one start, the seed's fresh weights (optimizer state
    as at the start), and each phase trains exactly as it would alone from that start."""
    from helpers.train import data

    orders = {"contiguous": 1, "stratified": 2}
    monkeypatch.setattr(data, "build_dataset", lambda cfg, *a, **k: _FakeData(orders[cfg.sampler] + 10 * cfg.seed))
    cfg, step = _dense_step()
    cfg = cfg.replace(phase_samplers=list(orders), phase_rounds=2, phase_seeds=[3, 4])
    start = phases.step_state(step)
    out = MetricsWriter(tmp_path, 0)

    def run_steps(stp, it, steps, phase, job_step0):
        for i in steps:
            out.write("step", step=i, job_step=job_step0 + i - steps.start, phase=phase, loss=_loss(stp(*next(it))))

    summary = phases.train_phases(cfg, 0, 1, out, step, run_steps, lambda it: {"accuracy": 0.5},
                                  lambda: {"rss_mb": 1.0}, _fresh_dense)
    out.close()
    recs = read_records(metrics_path(tmp_path, 0))
    steps = [r for r in recs if r["event"] == "step"]
    names = ["contiguous@3", "stratified@3", "contiguous@4", "stratified@4"]
    assert summary["phases"] == names == phases.phase_names(cfg)
    per_seed = [[n] * 2 for n in names]            # seed 3's two phases in two rounds, then seed 4's
    assert [r["phase"] for r in steps] == [x for a, b in (per_seed[:2], per_seed[2:]) for x in (a + b) * 2]
    assert [r["job_step"] for r in steps] == list(range(16))
    closing = {r["phase"]: r for r in recs if r["event"] == "phase_summary"}
    assert list(closing) == names and closing["stratified@4"]["seed"] == 4
    assert closing["stratified@4"]["sampler"] == "stratified"
    digests = [closing[n]["start_digest"] for n in names]
    assert digests[0] == digests[1] != digests[2] == digests[3], "one start per seed, a different one per seed"
    for seed in (3, 4):
        first = phases.seeded_start(start, _fresh_dense(seed))
        assert all(np.array_equal(first[k], start[k]) for k in start if "moment" in k), "optimizer state kept"
        for k, order in orders.items():
            phases.load_state(step, first)
            alone = [_loss(step(*b)) for b in _batches(order + 10 * seed)]
            assert [r["loss"] for r in steps if r["phase"] == f"{k}@{seed}"] == pytest.approx(alone, rel=1e-6)


def test_seeded_start_refuses_weights_the_step_does_not_have():
    with pytest.raises(KeyError, match="lacks"):
        phases.seeded_start({"w": np.zeros(2)}, {"w": np.ones(2), "extra": np.ones(1)})


def test_config_phase_seeds_are_distinct_and_need_phases():
    assert JobConfig(phase_samplers=["stratified"], phase_seeds=[1, 2]).validate().phase_seeds == (1, 2)
    for bad in (dict(phase_seeds=[1, 2]), dict(phase_samplers=["stratified"], phase_seeds=[1, 1]),
                dict(phase_samplers=["stratified"], phase_seeds=[-1])):
        with pytest.raises(ConfigError) as err:
            JobConfig(**bad).validate()
        assert err.value.fields == ["phase_seeds"]
