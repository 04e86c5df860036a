"""Without a Slurm controller, the chapter says so in one line of its own, never scontrol's raw stderr."""

import subprocess

from helpers.job import slurm_queue


def test_a_missing_controller_is_one_plain_line(monkeypatch):
    monkeypatch.setattr(slurm_queue.shutil, "which", lambda c: f"/usr/bin/{c}")
    err = "scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\nslurm_load_ctl_conf error"
    monkeypatch.setattr(slurm_queue, "_call", lambda *a: subprocess.CompletedProcess(a, 1, "", err))
    reason = slurm_queue.slurm_unreachable()
    assert "no controller answers" in reason and "error" not in reason and "\n" not in reason
