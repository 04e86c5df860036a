"""The pre-flight report: a device the run needs but MindSpore cannot use fails; data and memory lines."""

from helpers.core.config import job_config
from helpers.job.preflight import memory_checks, preflight


def test_gpu_run_on_this_machine_fails_on_the_device_and_names_the_fix():
    checks = {c.name: c for c in preflight("gpu8", data_dir="/no/such/imagenet", device_target="GPU")}
    assert not checks["device GPU"].ok and not checks["NVIDIA driver"].ok
    assert not checks["data: data_dir"].ok and "train/" in checks["data: data_dir"].note


def test_rehearsal_preflight_passes():
    assert all(c.ok for c in preflight("gpu8", rehearse=True))


def test_memory_plan_against_a_small_card():
    cfg = job_config("gpu8")
    rows = {c.name: c for c in memory_checks(cfg, "gpu8", card_gib=8.0)}
    assert rows["memory plan: 00, 01, 03: training with the preset"].ok          # 128 x ResNet-50 in O2: 5.7 GiB
    assert not rows["memory plan: 02: the full batch (float32)"].ok             # ResNet-152 x 64 fp32: 11.5 GiB
