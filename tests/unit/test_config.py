import pytest

from helpers.core.config import PRESETS, JobConfig, config_table, job_config
from helpers.core.errors import ConfigError


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_is_valid(preset):
    cfg = job_config(preset)
    assert cfg.world_size * cfg.batch_per_rank == cfg.global_batch


def test_none_overrides_leave_the_preset_value():
    assert job_config("ci", arch=None).arch == PRESETS["ci"]["arch"]
    assert job_config("ci", arch="resnet50").arch == "resnet50"


def test_gpu8_preset_uses_the_native_kernel_and_cpu_presets_measure_it():
    assert job_config("gpu8").conv_impl == "native"
    assert job_config("ci").conv_impl == job_config("cpu").conv_impl == "auto"


@pytest.mark.parametrize("overrides, field", [
    (dict(global_batch=60), "global_batch"),       # does not divide over 8 ranks
    (dict(device_target="TPU"), "device_target"),
    (dict(world_size=0), "world_size"),
    (dict(local_world_size=9), "local_world_size"),
    (dict(fail_rank=8), "fail_rank"),
    (dict(sampler="random"), "sampler"),
])
def test_bad_values_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        job_config("ci", **overrides)


def test_unknown_field_and_preset_are_rejected():
    with pytest.raises(ConfigError, match="batchsize"):
        job_config("ci", batchsize=3)
    with pytest.raises(ConfigError, match="preset"):
        job_config("tpu")


def test_json_round_trip(tmp_path):
    cfg = job_config("ci", env={"X": "1"}, comm_fusion={"allreduce": {"mode": "size", "config": 32}})
    assert JobConfig.load(cfg.save(tmp_path / "c.json")) == cfg


def test_config_table_shows_batch_per_rank():
    rows = dict(config_table(job_config("ci")))
    assert rows["batch_per_rank"] == 8


def test_accumulation_refuses_mixed_precision():
    with pytest.raises(ConfigError, match="amp_level"):
        job_config("ci", micro_batch=2, accumulation_steps=4, amp_level="O2")


def test_gpu8_rehearsal_keeps_the_recipe_and_shrinks_the_size():
    real, rehearsal = job_config("gpu8"), job_config("gpu8", rehearse=True)
    for field in ("arch", "image_size", "stem", "lr", "lr_batch", "lr_schedule", "label_smoothing",
                  "decay_norm_and_bias", "amp_level", "loss_scale", "momentum", "comm_fusion"):
        assert getattr(rehearsal, field) == getattr(real, field), field
    assert (rehearsal.device_target, rehearsal.world_size, rehearsal.rehearsal) == ("CPU", 2, True)
    assert rehearsal.scaled_lr == pytest.approx(0.1 * rehearsal.global_batch / 256)
    assert job_config("gpu8", rehearse=True, world_size=4, global_batch=8).world_size == 4   # overrides still win
    with pytest.raises(ConfigError, match="rehearse"):
        job_config("ci", rehearse=True)


# --------------------------------------------------------------- issue 19.5: every bad field, one error

import dataclasses  # noqa: E402
import math  # noqa: E402

from helpers.core.config import FUSE_ALL, comm_fusion_problem  # noqa: E402


def errors_of(**changes) -> ConfigError:
    """The ConfigError of the ci preset with ``changes`` applied without validating, then validated."""
    cfg = dataclasses.replace(job_config("ci"), **changes)
    with pytest.raises(ConfigError) as info:
        cfg.validate()
    return info.value


BAD_ONE = [   # (changes, the one field named): each was accepted before, or raised on the first field only
    (dict(steps=2.5), "steps"),
    (dict(global_batch=64.0), "global_batch"),
    (dict(world_size=True), "world_size"),
    (dict(micro_batch=2.0), "micro_batch"),
    (dict(accumulation_steps="2"), "accumulation_steps"),
    (dict(image_size=32.0), "image_size"),
    (dict(seed=1.5), "seed"),
    (dict(fail_step=1.5), "fail_step"),
    (dict(dataset_workers=0), "dataset_workers"),
    (dict(threads_per_rank=0), "threads_per_rank"),
    (dict(threads_per_rank=2.0), "threads_per_rank"),
    (dict(node_rank=1), "node_rank"),                                   # one node: only node 0
    (dict(node_rank=-1, local_world_size=4), "node_rank"),
    (dict(node_rank=2, local_world_size=4), "node_rank"),               # 8 / 4 = 2 nodes: 0 and 1
    (dict(local_world_size=3), "local_world_size"),                     # 8 ranks do not split into nodes of 3
    (dict(master_port=80), "master_port"),
    (dict(master_port=1023), "master_port"),
    (dict(master_port=65536), "master_port"),
    (dict(master_port=8080.0), "master_port"),
    (dict(profile_skip_steps=-1), "profile_skip_steps"),
    (dict(timeout_s=math.nan), "timeout_s"),                            # NaN used to disable the timeout
    (dict(timeout_s=math.inf), "timeout_s"),
    (dict(timeout_s=0.0), "timeout_s"),
    (dict(timeout_s=True), "timeout_s"),
    (dict(timeout_s="600"), "timeout_s"),
    (dict(stall_s=math.nan), "stall_s"),
    (dict(compile_stall_s=math.inf), "compile_stall_s"),
    (dict(stall_s=1000.0), "stall_s"),                                  # above compile_stall_s
    (dict(arch="resnet19"), "arch"),
    (dict(stem="tiny"), "stem"),
    (dict(sampler="random"), "sampler"),
    (dict(fail_mode="explode"), "fail_mode"),
    (dict(bad_images="delete"), "bad_images"),
    (dict(comm_fusion="auto"), "comm_fusion"),
    (dict(comm_fusion={"allreduce": {"mode": "fast", "config": None}}), "comm_fusion"),
    (dict(comm_fusion={"allgather": {"mode": "index", "config": [1]}}), "comm_fusion"),   # index: allreduce only
    (dict(comm_fusion={"allreduce": {"mode": "auto"}}), "comm_fusion"),                   # MindSpore needs "config"
    (dict(comm_fusion={"broadcast": {"mode": "auto", "config": None}}), "comm_fusion"),
    (dict(comm_fusion={"allreduce": {"mode": "size", "config": 32.5}}), "comm_fusion"),
    (dict(comm_fusion={"allreduce": {"mode": "index", "config": [5, 1]}}), "comm_fusion"),
    (dict(comm_fusion={"allreduce": {"mode": "index", "config": []}}), "comm_fusion"),
    (dict(comm_fusion={"openstate": "yes"}), "comm_fusion"),
]


@pytest.mark.parametrize("changes, field", BAD_ONE, ids=[f"{f}={list(c.values())[0]!r}" for c, f in BAD_ONE])
def test_one_bad_field_gives_one_line_naming_it(changes, field):
    err = errors_of(**changes)
    assert err.fields == [field]
    (line,) = str(err).splitlines()
    assert line.startswith(f"{field}: ") and line.endswith(f"(got {changes[field]!r})")


def test_every_bad_field_is_listed_in_one_error():
    bad = dict(steps=2.5, global_batch=64.0, timeout_s=math.nan, stall_s=math.inf, master_port=80, node_rank=1,
               threads_per_rank=0, dataset_workers=0, arch="resnet19", stem="tiny", sampler="random",
               comm_fusion={"allreduce": {"mode": "fast", "config": None}}, profile_skip_steps=-1,
               bad_images="delete", fail_mode="explode", device_target="TPU", seed=0.5)
    err = errors_of(**bad)
    assert sorted(err.fields) == sorted(bad)
    lines = str(err).splitlines()
    assert len(lines) == len(bad) == len(err.problems)
    for field, line in zip(err.fields, lines):
        assert line.startswith(f"{field}: ") and line.endswith(f"(got {bad[field]!r})"), line


def test_existing_messages_are_kept():
    assert str(errors_of(device_target="TPU")) == \
        "device_target: must be one of ('CPU', 'GPU', 'Ascend') (got 'TPU')"
    assert str(errors_of(global_batch=60)) == "global_batch: must be a positive multiple of world_size=8 (got 60)"
    assert str(errors_of(conv_impl="fast")) == "conv_impl: must be 'auto', 'native' or 'im2col' (got 'fast')"
    assert str(errors_of(amp_level="O5")) == "amp_level: must be one of 'O0', 'O1', 'O2', 'O3' (got 'O5')"
    assert str(errors_of(fail_rank=8)) == "fail_rank: must be a rank of the job (got 8)"


def test_a_wrong_type_anywhere_is_a_config_error_not_a_type_error():
    for f in dataclasses.fields(JobConfig):
        try:
            dataclasses.replace(job_config("ci"), **{f.name: object()}).validate()
        except ConfigError as e:
            assert f.name in e.fields
        # anything else (TypeError on a comparison) propagates and fails the test


@pytest.mark.parametrize("changes", [
    dict(master_port=0), dict(master_port=1024), dict(master_port=65535),
    dict(local_world_size=4, node_rank=1), dict(local_world_size=2, node_rank=3),
    dict(timeout_s=600), dict(stall_s=900.0, compile_stall_s=900.0), dict(profile_skip_steps=0),
    dict(threads_per_rank=4, dataset_workers=2), dict(bad_images="set_aside"), dict(arch="resnet152", stem="imagenet"),
    dict(comm_fusion=None), dict(comm_fusion={}), dict(comm_fusion=FUSE_ALL),
    dict(comm_fusion={"allreduce": {"mode": "size", "config": 32}}),
    dict(comm_fusion={"allreduce": {"mode": "index", "config": [10, 40]}}),
    dict(comm_fusion={"allgather": {"mode": "size", "config": 8}, "reducescatter": {"mode": "auto", "config": None}}),
    dict(comm_fusion={"openstate": False}),
])
def test_good_values_pass(changes):
    cfg = dataclasses.replace(job_config("ci"), **changes)
    assert cfg.validate() is cfg


def test_bad_images_defaults_to_stop():
    assert job_config("ci").bad_images == "stop" and job_config("gpu8").bad_images == "stop"


def test_a_saved_config_with_nan_timeout_does_not_load(tmp_path):
    path = tmp_path / "config.json"
    dataclasses.replace(job_config("ci"), timeout_s=math.nan, steps=2.5).save(path)
    with pytest.raises(ConfigError) as info:
        JobConfig.load(path)
    assert info.value.fields == ["steps", "timeout_s"]


@pytest.mark.parametrize("value", [
    FUSE_ALL, {"allreduce": {"mode": "size", "config": 16}}, {"allreduce": {"mode": "index", "config": [3, 9]}},
    {"allgather": {"mode": "auto", "config": None}, "reducescatter": {"mode": "size", "config": 4}},
    {"openstate": True, "allreduce": {"mode": "auto", "config": None}},
    {"allgather": {"mode": "index", "config": [1]}}, {"allreduce": {"mode": "auto"}},
    {"allreduce": {"mode": "fast", "config": None}}, {"broadcast": {"mode": "auto", "config": None}},
    {"allreduce": {"mode": "size", "config": 32.5}},
])
def test_comm_fusion_verdict_agrees_with_mindspore(value):
    """What we accept, mindspore.set_auto_parallel_context accepts; these rejections it refuses too."""
    import mindspore as ms

    try:
        ms.set_auto_parallel_context(comm_fusion=value)
        mindspore_ok = True
    except (KeyError, TypeError, ValueError):
        mindspore_ok = False
    finally:
        ms.reset_auto_parallel_context()
    assert (comm_fusion_problem(value) is None) == mindspore_ok


# --------------------------------------------------------------- issue 34.1: a rehearsal knows the card it stands for

def test_a_rehearsal_runs_on_cpu_and_records_the_card_it_stands_for(tmp_path):
    ascend = job_config("gpu8", rehearse=True, device_target="Ascend")
    assert (ascend.device_target, ascend.rehearsed_target, ascend.rehearsal) == ("CPU", "Ascend", True)
    assert "gpu8 for Ascend rehearsed on CPU" in dict(config_table(ascend))["path"]
    assert job_config("gpu8", rehearse=True).rehearsed_target == "GPU"          # the preset's own target
    assert job_config("gpu8", rehearse=True, device_target="GPU").rehearsed_target == "GPU"
    assert JobConfig.load(ascend.save(tmp_path / "c.json")) == ascend
    with pytest.raises(ConfigError, match=r"device_target: with rehearse=True .* \(got 'CPU'\)"):
        job_config("gpu8", rehearse=True, device_target="CPU")
    assert job_config("gpu8", device_target="Ascend").device_target == "Ascend"     # no rehearsal: the real target
    assert job_config("gpu8", device_target="Ascend").rehearsed_target is None


def test_only_a_rehearsal_stands_for_a_card():
    with pytest.raises(ConfigError, match="rehearsed_target"):
        dataclasses.replace(job_config("ci"), rehearsed_target="Ascend").validate()
    with pytest.raises(ConfigError, match="rehearsed_target"):
        dataclasses.replace(job_config("gpu8", rehearse=True), rehearsed_target="CPU").validate()


# --------------------------------------------------------------- issue 28.10: dataset workers fit this machine's CPUs

@pytest.fixture
def two_cpus(monkeypatch):
    import helpers.core.config as config

    monkeypatch.setattr(config.os, "cpu_count", lambda: 2)


def test_the_presets_dataset_workers_are_lowered_to_the_cpu_count_and_shown(two_cpus, caplog):
    with caplog.at_level("WARNING", logger="helpers.core.config"):
        cfg = job_config("gpu8", device_target="CPU", world_size=2, global_batch=4, steps=2)
    assert PRESETS["gpu8"]["dataset_workers"] == 8 and cfg.dataset_workers == 2
    assert "the preset's 8 lowered to this machine's 2 CPUs" in cfg.adjusted["dataset_workers"]
    assert dict(config_table(cfg))["dataset_workers"].startswith("2 (the preset's 8 lowered")
    assert any("dataset_workers" in r.getMessage() for r in caplog.records)
    assert job_config("ci").adjusted == {}                                       # 1 worker: nothing to lower


def test_an_explicit_dataset_workers_above_the_cpu_count_is_refused(two_cpus):
    with pytest.raises(ConfigError, match=r"dataset_workers: at most 2, this machine's CPU count .*\(got 3\)"):
        job_config("ci", dataset_workers=3)
    with pytest.raises(ConfigError, match="dataset_workers: at most 2"):
        job_config("gpu8", dataset_workers=8)
    assert job_config("ci", dataset_workers=2).dataset_workers == 2
