import pytest

from helpers.config import PRESETS, JobConfig, config_table, job_config
from helpers.errors import ConfigError


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
