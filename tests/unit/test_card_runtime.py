"""The worker's card settings before init() (float32 kept, deterministic kernels) and what a rank records, run
through ``helpers.train.worker.main`` on a recording stand-in for ``mindspore``; the profiler's analysis announced
before it runs, through the wheel's own schedule and action controller."""

import sys
import types

import numpy as np
import pytest

from helpers.core.card_settings import (ASCEND_910A_WHY, ASCEND_FP16_MATMUL, ASCEND_KEEP_DTYPE, NOT_APPLICABLE,
                                        ascend_float32_calls, card_record, card_rows, float32_kept)
from helpers.core.config import config_table, job_config
from helpers.core.errors import ConfigError
from helpers.core.metrics import MetricsWriter, metrics_path, read_records
from helpers.train import card_runtime, worker


class Recorder(types.ModuleType):
    """Any attribute is another recorder; a call is logged as (dotted path, args) and returns ``returns[path]``."""

    def __init__(self, path, calls, returns):
        super().__init__(path or "mindspore")
        self._path, self._calls, self._returns = path, calls, returns

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Recorder(f"{self._path}.{name}".lstrip("."), self._calls, self._returns)

    def __call__(self, *args, **kwargs):
        self._calls.append((self._path, args))
        return self._returns.get(self._path, Recorder(self._path, self._calls, self._returns))


SUBMODULES = ("communication", "device_context", "device_context.cpu", "device_context.cpu.op_tuning",
              "_c_expression")


class Calls(list):
    """The recorder's call log; ``returns`` is what its calls return (a test may change the chip there)."""

    returns: dict


SOC = "_c_expression.MSContext.get_instance.get_ascend_soc_version"


@pytest.fixture
def fake_ms(monkeypatch):
    """``mindspore`` (and the submodules the worker imports) replaced by one recorder; returns its call log."""
    calls = Calls()
    returns = calls.returns = {"communication.get_rank": 0, "communication.get_group_size": 1, "get_context": "CPU",
                               SOC: "ascend910"}
    monkeypatch.setitem(sys.modules, "mindspore", Recorder("", calls, returns))
    for sub in SUBMODULES:
        monkeypatch.setitem(sys.modules, f"mindspore.{sub}", Recorder(sub, calls, returns))
    monkeypatch.delenv("MS_ROLE", raising=False)
    return calls


def run_worker(tmp_path, **overrides):
    """``worker.main`` on a one-rank ``noop`` job of ``overrides``; its start and summary records."""
    cfg = job_config("ci", world_size=1, global_batch=8, task="noop", **overrides)
    assert worker.main([str(cfg.save(tmp_path / "config.json"))]) == 0
    recs = {r["event"]: r for r in read_records(metrics_path(tmp_path, 0))}
    return recs["start"], recs["summary"]


def names(calls):
    return [path for path, _ in calls]


def test_ascend_910b_keeps_float32_with_hf32_off_and_is_deterministic_before_init(tmp_path, fake_ms):
    fake_ms.returns[SOC] = "ascend910b"
    start, summary = run_worker(tmp_path, device_target="Ascend", deterministic=True)
    order = names(fake_ms)
    op = "device_context.ascend.op_precision."
    for call in ((op + "precision_mode", (ASCEND_KEEP_DTYPE,)), (op + "conv_allow_hf32", (False,)),
                 (op + "matmul_allow_hf32", (False,))):
        assert call in fake_ms
        assert order.index("set_device") < order.index(call[0]) < order.index("communication.init")
    assert order.index(op + "precision_mode") < order.index("set_deterministic") < order.index("communication.init")
    for rec in (start, summary):
        assert rec["chip"] == "ascend910b" and rec["precision_mode"] == ASCEND_KEEP_DTYPE and rec["deterministic"]
        assert rec["float32"] is True and "HF32 off for Conv and MatMul" in rec["float32_note"]


def test_ascend_910a_sets_no_precision_and_records_float32_as_not_kept(tmp_path, fake_ms):
    start, summary = run_worker(tmp_path, device_target="Ascend", deterministic=True)
    assert not any(path.startswith("device_context.ascend.op_precision") for path in names(fake_ms))
    assert ("set_deterministic", (True,)) in fake_ms
    for rec in (start, summary):
        assert rec["chip"] == "ascend910" and rec["precision_mode"].startswith(ASCEND_FP16_MATMUL)
        assert rec["float32"] is False and rec["float32_note"] == ASCEND_910A_WHY


def test_the_float32_verdict_per_chip_and_setting():
    every = dict(ascend_float32_calls("ascend910b"))
    assert ascend_float32_calls("ascend910") == [] and list(every) == ["precision_mode", "conv_allow_hf32",
                                                                       "matmul_allow_hf32"]
    assert ascend_float32_calls("") == ascend_float32_calls("ascend910_93")         # chip not read: the calls
    assert float32_kept("Ascend", every, "ascend910b")[0] is True
    assert float32_kept("Ascend", every, "")[0] == "unknown"
    assert float32_kept("Ascend", every, "ascend910") == (False, ASCEND_910A_WHY)    # set before the chip was known
    no_hf32_off = {"precision_mode": ASCEND_KEEP_DTYPE}
    assert float32_kept("Ascend", no_hf32_off, "ascend910b")[0] is False
    assert "HF32" in float32_kept("Ascend", {}, "ascend910b")[1]
    assert float32_kept("GPU", {"conv_allow_tf32": False}) == (True, "conv_allow_tf32=False")
    assert float32_kept("CPU", {}) == (NOT_APPLICABLE, NOT_APPLICABLE)


def test_gpu_pins_deterministic_convolutions_and_turns_tf32_off(tmp_path, fake_ms):
    start, _ = run_worker(tmp_path, device_target="GPU", deterministic=True)
    order = names(fake_ms)
    for call in (("device_context.gpu.op_precision.conv_allow_tf32", (False,)), ("set_deterministic", (True,)),
                 ("device_context.gpu.op_tuning.conv_wgrad_algo", ("algo_1",)),
                 ("device_context.gpu.op_tuning.conv_dgrad_algo", ("algo_1",))):
        assert call in fake_ms and order.index(call[0]) < order.index("communication.init")
    assert start["precision_mode"] == "conv_allow_tf32=False" and start["chip"] == NOT_APPLICABLE


def test_cpu_sets_nothing_even_with_the_switch_on(tmp_path, fake_ms):
    start, summary = run_worker(tmp_path, device_target="CPU", deterministic=True)
    assert "set_deterministic" not in names(fake_ms)
    assert not any(path.startswith(("device_context.ascend", "device_context.gpu")) for path in names(fake_ms))
    assert ("device_context.cpu.op_tuning.threads_num", (1,)) in fake_ms
    assert start["chip"] == start["precision_mode"] == start["deterministic"] == start["float32"] == NOT_APPLICABLE
    assert summary["deterministic"] == NOT_APPLICABLE


def test_a_card_job_without_the_switches_leaves_mindspore_defaults(tmp_path, fake_ms):
    start, _ = run_worker(tmp_path, device_target="Ascend", keep_fp32=False)
    assert "set_deterministic" not in names(fake_ms)
    assert "device_context.ascend.op_precision.precision_mode" not in names(fake_ms)
    assert start["precision_mode"] == f"{ASCEND_FP16_MATMUL} (MindSpore's default on ascend910)"
    assert start["deterministic"] is False and start["float32"] is False


def test_msrun_scheduler_sets_nothing_on_a_card(monkeypatch):
    calls = []
    cfg = job_config("ci", device_target="Ascend", deterministic=True)
    assert card_runtime.prepare_card(cfg, Recorder("", calls, {}), environ={"MS_ROLE": "MS_SCHED"}) == {}
    assert calls == []


def test_card_record_reads_mindspore_default_per_chip():
    assert card_record("Ascend", {}, "ascend910b")["precision_mode"].startswith(ASCEND_KEEP_DTYPE)
    assert card_record("Ascend", {}, "ascend910")["precision_mode"].startswith(ASCEND_FP16_MATMUL)
    assert card_record("GPU", {})["precision_mode"].startswith("conv_allow_tf32=True")


def test_setup_table_shows_the_card_settings():
    cpu = dict(config_table(job_config("ci", deterministic=True)))
    assert cpu["float32 on the card"] == cpu["deterministic"] == NOT_APPLICABLE
    asc = dict(config_table(job_config("ci", device_target="Ascend", deterministic=True)))
    assert asc["float32 on the card"].startswith(f"precision_mode {ASCEND_KEEP_DTYPE}, conv_allow_hf32/")
    assert asc["deterministic"].startswith("set_deterministic(True) before init()")
    gpu = dict(card_rows(job_config("ci", device_target="GPU", keep_fp32=False)))
    assert "TF32" in gpu["float32 on the card"] and gpu["deterministic"].startswith("off")
    pinned = dict(card_rows(job_config("ci", device_target="GPU", deterministic=True)))["deterministic"]
    assert "only the backward convolutions are pinned (cuDNN algo_1)" in pinned


def test_the_switches_are_booleans():
    with pytest.raises(ConfigError) as err:
        job_config("ci", deterministic="yes", keep_fp32=1)
    assert set(err.value.fields) == {"deterministic", "keep_fp32"}


# ------------------------------------------------------------------------------------------ profiler
class Labels:
    def __init__(self, n):
        self.a = np.arange(n) % 3

    def asnumpy(self):
        return self.a


def fake_profile(monkeypatch, seen, out):
    """``mindspore.profiler.profile`` driven by the wheel's own schedule and ProfilerActionController over a stub
    profiler; the trace handler (the analysis) notes which records the rank had written when it ran."""
    import mindspore.profiler as mp
    from mindspore.profiler.profiler_action_controller import ProfilerActionController
    from mindspore.profiler.schedule import ProfilerAction

    stub = types.SimpleNamespace(**{k: lambda: None for k in ("init", "start", "stop", "finalize", "clear",
                                                               "delete_dir")})

    class Profile:
        def __init__(self, activities, schedule, on_trace_ready):
            self.schedule, self.step_num = schedule, 0
            self.action = schedule(0)
            self.ctl = ProfilerActionController(stub, on_trace_ready)

        def __enter__(self):
            self.ctl.transit_action(ProfilerAction.NONE, self.action)
            return self

        def step(self):
            prev, self.step_num = self.action, self.step_num + 1
            self.action = self.schedule(self.step_num)
            self.ctl.transit_action(prev, self.action)

        def __exit__(self, *exc):
            self.ctl.transit_action(self.action, None)

    def handler(_dir):
        return lambda _prof: seen.append([(r["event"], r.get("step")) for r in read_records(out)])

    monkeypatch.setattr(mp, "profile", Profile)
    monkeypatch.setattr(mp, "tensorboard_trace_handler", handler)


def test_the_rank_records_the_profile_analysis_before_it_runs(tmp_path, monkeypatch):
    cfg = job_config("ci", world_size=1, global_batch=8, steps=3, profile=True, profile_skip_steps=1)
    seen = []
    fake_profile(monkeypatch, seen, metrics_path(tmp_path, 0))
    out = MetricsWriter(tmp_path, 0)
    batches = iter([(np.zeros(1), Labels(8))] * 3)
    times = worker.profiled_loop(cfg, tmp_path, 0, lambda images, labels: np.float32(1.0), batches, out)
    out.close()
    assert len(times) == 3 and len(seen) == 1, "one analysis, in the last step's prof.step()"
    assert seen[0] == [("step", 0), ("step", 1), ("step", 2), ("profile_analysis", None)]


def test_the_watchdog_gives_the_analysis_the_compile_allowance():
    from helpers.job.stall import RankProgress, stall_limit
    from helpers.job.watch import PROGRESS_EVENTS
    from helpers.train.profiler_session import ANALYSIS_EVENT

    assert ANALYSIS_EVENT in PROGRESS_EVENTS
    assert stall_limit(60.0, 900.0, RankProgress(0.0, ANALYSIS_EVENT, 2), [0.5, 0.5]) == 900.0
    assert stall_limit(60.0, 900.0, RankProgress(0.0, "step", 2), [0.5, 0.5]) == 60.0
