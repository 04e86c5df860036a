"""The pre-flight on the command line (``python -m helpers.job.envcheck``) and the machine checks it starts with."""

import subprocess
import sys

from helpers.job.envcheck import main
from helpers.job.machine_checks import environment_checks


def test_rehearsal_preflight_exits_zero(capsys):
    assert main(["--preset", "gpu8", "--rehearse"]) == 0
    assert "0 failed" in capsys.readouterr().out


def test_a_failing_check_prints_its_fix_and_exits_one(capsys):
    assert main(["--preset", "gpu8", "--data-dir", "/no/such/imagenet", "--device-target", "GPU"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  device GPU" in out and "fix: " in out


def test_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "helpers.job.envcheck", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "--data-dir" in proc.stdout


def test_machine_checks_name_mindspore_and_every_device_target():
    names = [c.name for c in environment_checks()]
    assert "mindspore" in names and "msrun" in names
    assert {"device CPU", "device GPU", "device Ascend"} <= set(names)
