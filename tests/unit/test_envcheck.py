"""The pre-flight on the command line (``python -m helpers.preflight.envcheck``) and its machine checks."""

import subprocess
import sys

from helpers.preflight.envcheck import main, report_line
from helpers.preflight.machine_checks import Check, environment_checks


def test_rehearsal_preflight_exits_zero(capsys):
    assert main(["--preset", "gpu8", "--rehearse"]) == 0
    assert "0 failed" in capsys.readouterr().out


def test_a_failing_check_prints_its_fix_and_exits_one(capsys):
    assert main(["--preset", "gpu8", "--data-dir", "/no/such/imagenet", "--device-target", "GPU"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  device GPU" in out and "fix: " in out


def test_gpu_report_on_this_cpu_machine_names_cuda_home_and_cupti(capsys, monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    assert main(["--preset", "gpu8", "--device-target", "GPU"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  CUDA_HOME" in out and "fix: export CUDA_HOME=<a CUDA 11.x toolkit with bin/nvcc>" in out
    assert "FAIL  CUPTI (chapter 04)" in out          # none here, or /usr/local/cuda's of another CUDA (RPATH)
    assert "LD_LIBRARY_PATH=$CUDA_HOME/extras/CUPTI/lib64:$LD_LIBRARY_PATH" in out


def test_ascend_report_on_this_cpu_machine_names_each_missing_prerequisite(capsys, monkeypatch):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    assert main(["--preset", "gpu8", "--device-target", "Ascend"]) == 1
    out = capsys.readouterr().out
    for line in ("FAIL  ASCEND_HOME_PATH", "FAIL  CANN version", "FAIL  npu-smi", "FAIL  MindSpore Ascend plugin"):
        assert line in out, line
    assert "fix: source <CANN install>/set_env.sh" in out


def test_report_lines():
    assert report_line(Check("a", "1", True, "fine"), 3) == "PASS  a    1"
    assert report_line(Check("b", "2", False, "do this"), 3) == "FAIL  b    2\n      fix: do this"
    assert report_line(Check("c", "3", True, "watch this", warn=True), 3) == "WARN  c    3\n      warning: watch this"


def test_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "helpers.preflight.envcheck", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "--data-dir" in proc.stdout


def test_machine_checks_name_mindspore_and_every_device_target():
    names = [c.name for c in environment_checks()]
    assert "mindspore" in names and "msrun" in names
    assert {"device CPU", "device GPU", "device Ascend"} <= set(names)
