"""The pre-flight report: a device the run needs but MindSpore cannot use fails; data and memory lines."""

import os

from helpers.core.config import job_config
from helpers.preflight.preflight import memory_checks, preflight


def test_gpu_run_on_this_machine_fails_on_the_device_and_names_the_fix(monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    checks = {c.name: c for c in preflight("gpu8", data_dir="/no/such/imagenet", device_target="GPU")}
    assert not checks["device GPU"].ok and not checks["NVIDIA driver"].ok
    assert not checks["CUDA_HOME"].ok and checks["CUDA_HOME"].note.startswith("export CUDA_HOME=")
    assert "CUPTI (chapter 04)" in checks
    assert not checks["data: data_dir"].ok and "train/" in checks["data: data_dir"].note


def test_ascend_run_on_this_machine_fails_on_each_missing_prerequisite(monkeypatch):
    for var in ("ASCEND_HOME_PATH", "ASCEND_OPP_PATH"):
        monkeypatch.delenv(var, raising=False)
    checks = {c.name: c for c in preflight("gpu8", data_dir="/no/such/imagenet", device_target="Ascend")}
    for name in ("device Ascend", "ASCEND_HOME_PATH", "CANN version", "Ascend plugin libraries",
                 "MindSpore Ascend plugin", "npu-smi"):
        assert not checks[name].ok, name
    assert "set_env.sh" in checks["ASCEND_HOME_PATH"].note
    assert "libge_runner.so" in checks["MindSpore Ascend plugin"].note
    assert "GPU plugin choice" not in checks and "CUDA_HOME" not in checks


def test_ascend_memory_plan_uses_the_smallest_chips_free_hbm(tmp_path, monkeypatch):
    (tmp_path / "npu-smi").write_text("#!/bin/sh\ncat <<'EOF'\n"
                                      "| NPU   Name   | Health | Power(W) Temp(C) Hugepages-Usage(page) |\n"
                                      "| Chip         | Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB) |\n"
                                      "| 0     910B3  | OK     | 93.2  40  0 / 0 |\n"
                                      "| 0            | 0000:C1:00.0 | 0  0 / 0  3400 / 65536 |\n"
                                      "| 1     910B3  | OK     | 93.2  40  0 / 0 |\n"
                                      "| 0            | 0000:C2:00.0 | 0  0 / 0  57344 / 65536 |\n"
                                      "EOF\n")
    (tmp_path / "npu-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    rows = {c.name: c for c in preflight("gpu8", data_dir="/no/such/imagenet", device_target="Ascend")}
    full = rows["memory plan: 02: full batch"]              # ResNet-152 x 64 fp32: 11.5 GiB > 8 GiB
    assert not full.ok and full.value.endswith("of 8 GiB free HBM (smallest chip)")


def test_rehearsal_preflight_passes():
    assert all(c.ok for c in preflight("gpu8", rehearse=True))


def test_memory_plan_against_a_small_card():
    cfg = job_config("gpu8")
    rows = {c.name: c for c in memory_checks(cfg, "gpu8", card_gib=8.0)}
    assert rows["memory plan: 00, 01, 03: training"].ok          # 128 x ResNet-50 in O2: 5.7 GiB
    assert not rows["memory plan: 02: full batch"].ok             # ResNet-152 x 64 fp32: 11.5 GiB
