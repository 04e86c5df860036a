"""The Slurm launcher's pure parts: settings checks, sbatch options, squeue/scontrol parsing, the batch script."""

import subprocess
from pathlib import Path

import pytest

from helpers.core.config import job_config
from helpers.core.errors import ConfigError
from helpers.core.slurm_settings import cpus_per_node, sbatch_options, slurm_problem, too_few_cpus
from helpers.job.slurm_queue import (JobState, node_trouble, parse_node, parse_partition_cpus, parse_sbatch,
                                     parse_squeue, place_in, queue_line, reason_words)
from helpers.job.slurm_script import LEASE_S, batch_script, node_command


def test_slurm_settings_are_checked_by_field():
    assert job_config("ci", launcher="slurm", slurm=dict(nodes=2, partition="gpu")).local_workers == 8
    for bad, text in ((dict(nodes=3), "must divide world_size=8"), (dict(node=2), "unknown keys ['node']"),
                      (dict(partition="a b"), "plain word"), (dict(time_limit="1h"), "Slurm's format"),
                      (dict(extra_args="--exclusive"), "list of sbatch options"),
                      (dict(cpus_per_node=0), "cpus_per_node must be a positive int"),
                      (dict(exclusive="yes"), "exclusive must be True or False")):
        with pytest.raises(ConfigError) as info:
            job_config("ci", launcher="slurm", slurm=bad)
        assert info.value.fields == ["slurm"] and text in str(info.value), str(info.value)
    with pytest.raises(ConfigError) as info:
        job_config("ci", launcher="kubernetes")
    assert info.value.fields == ["launcher"]
    assert slurm_problem({}, 8) is None


def test_sbatch_options_in_a_fixed_order():
    assert sbatch_options(dict(nodes=2, gres="gpu:8", partition="p", time_limit="00:10:00", account="a",
                               extra_args=["--qos=w"])) == [
        "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "--partition=p", "--gres=gpu:8", "--time=00:10:00",
        "--account=a", "--qos=w"]


def test_sbatch_asks_each_nodes_cpus_its_cards_and_whole_nodes_only_when_told():
    """CPUs per node = ranks per node x threads per rank (one task holding them), so jobs sharing a partition do not
    overbook a node; on GPU one card per rank unless gres says otherwise; --exclusive is opt-in."""
    assert sbatch_options(dict(nodes=2), 4, 2) == ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=8"]
    assert sbatch_options({}, 8, 8, "GPU") == ["--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=64",
                                               "--gres=gpu:8"]
    assert "--gres=gpu:4" in sbatch_options(dict(gres="gpu:4"), 8, 1, "GPU")
    assert not any(o.startswith("--gres") for o in sbatch_options({}, 8, 1, "Ascend"))
    assert sbatch_options(dict(cpus_per_node=2), 8, 1)[2] == "--cpus-per-task=2"   # 8 ranks sharing 2 CPUs, as asked
    assert sbatch_options(dict(exclusive=True), 2)[-1] == "--exclusive"
    assert "--exclusive" not in sbatch_options(dict(exclusive=False), 2)
    assert cpus_per_node({}, 4, 3) == 12 and cpus_per_node(dict(cpus_per_node=5), 4, 3) == 5


def test_a_job_no_node_has_the_cpus_for_is_refused_in_one_line_naming_the_setting():
    rows = "n1|4|course*\nn2|8|course*\nn1|4|one\nn3|64|big\n"
    assert parse_partition_cpus(rows, None) == ("course", [4, 8])
    assert parse_partition_cpus(rows, "big") == ("big", [64]) and parse_partition_cpus("", "x") == ("x", [])
    assert too_few_cpus(8, "course", [4, 8], 1) is None
    why = too_few_cpus(8, "course", [4, 8], 2)
    assert "\n" not in why and "asks 8 CPUs on each of 2 node(s)" in why and "at most 8" in why
    assert "threads_per_rank" in why and "slurm['cpus_per_node']" in why
    assert "Slurm refused it" in too_few_cpus(8, "p", [], 1)


def test_squeue_sbatch_and_scontrol_outputs_parse():
    assert parse_sbatch("42\n") == "42" and parse_sbatch("42;cluster\n") == "42"
    with pytest.raises(ValueError):
        parse_sbatch("sbatch: error: Batch job submission failed")
    rows = parse_squeue("7|PENDING|Resources|(Resources)|one\n8|RUNNING|None|n[1-2]|course\n")
    assert rows["7"] == JobState("7", "PENDING", "Resources", "(Resources)", "one") and rows["7"].pending
    assert rows["8"].running and rows["8"].active and not JobState("9", "COMPLETED", "", "", "").active
    assert place_in(["5", "7", "9"], "7") == (2, 3) and place_in(["5"], "7") is None
    node = parse_node("NodeName=n2 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.251.2.2 State=IDLE+NOT_RESPONDING "
                      "ThreadsPerCore=1")
    assert node["NodeAddr"] == "10.251.2.2" and node_trouble(node) == "IDLE+NOT_RESPONDING"
    assert node_trouble({"State": "ALLOCATED"}) is None and node_trouble({"State": "DOWN*"}) == "DOWN*"


def test_a_pending_job_shows_its_place_and_why_it_waits_in_words():
    queue = parse_squeue("5|PENDING|Priority|(Priority)|one\n7|PENDING|None|(None)|one\n9|PENDING|Resources||one\n")
    assert queue_line("7", queue) == "Slurm job 7: PENDING, place 2 of 3 in partition one: not yet looked at by " \
        "the scheduler"
    assert queue_line("9", queue).endswith("place 3 of 3 in partition one: waiting for free CPUs or nodes (Resources)")
    assert queue_line("8", queue) is None and "None" not in queue_line("7", queue)
    assert reason_words("Priority") == "jobs ahead of it in the queue (Priority)"
    assert reason_words("PartitionConfig").startswith("asks more than the partition's nodes hold")
    assert reason_words("QOSMaxJobsPerUserLimit") == "over a limit of its QOS (QOSMaxJobsPerUserLimit)"
    assert reason_words("SomethingNew") == "Slurm's reason: SomethingNew" and reason_words("") == reason_words("None")


def test_a_batch_script_whose_lease_is_old_when_it_starts_runs_no_rank(tmp_path):
    """The notebook died while its job was pending: the script's first check ends it (exit 0, one line)."""
    import os
    import time

    _, script = script_for(tmp_path)
    assert script.index("no rank started") < script.index("scancel") < script.index("\nsrun ")
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "lease").touch()
    os.utime(tmp_path / "slurm" / "lease", (time.time() - LEASE_S - 5,) * 2)
    (tmp_path / "batch.sh").write_text(script)
    out = subprocess.run(["bash", str(tmp_path / "batch.sh")], capture_output=True, text=True, timeout=30,
                         env={"PATH": "/nonexistent:/usr/bin:/bin", "SLURM_JOB_ID": "1"})
    assert out.returncode == 0 and out.stdout.count("\n") == 1 and "no rank started" in out.stdout, out
    assert (tmp_path / "slurm" / "lease_expired").exists() and not list((tmp_path / "slurm").glob("node_*"))


def script_for(tmp_path: Path, **slurm):
    cfg = job_config("ci", launcher="slurm", slurm=dict(nodes=2, **slurm)).replace(local_world_size=4)
    return cfg, batch_script(cfg, tmp_path, tmp_path / "config.json", "/venv/bin/msrun", "/venv/bin/python",
                             "TOKEN123")


def test_each_node_runs_msrun_with_its_slurm_node_id_and_the_first_nodes_address(tmp_path):
    cfg, script = script_for(tmp_path, partition="one", gres="gpu:8")
    line = node_command(cfg, tmp_path, tmp_path / "config.json", "/venv/bin/msrun", ())
    assert "--node_rank=$SLURM_NODEID" in line and "--master_addr=$MASTER_ADDR" in line
    assert "--master_port=$MASTER_PORT" in line and "--worker_num=8" in line and "--local_worker_num=4" in line
    assert "helpers.job.rank_guard" in line and f"--log_dir={tmp_path}/logs/node$SLURM_NODEID" in line
    assert "#SBATCH --nodes=2" in script and "#SBATCH --partition=one" in script and "#SBATCH --gres=gpu:8" in script
    assert "NodeAddr=" in script and "SLURM_JOB_NODELIST" in script and "scancel \"$SLURM_JOB_ID\"" in script
    assert f'-gt {LEASE_S} ]' in script and "TOKEN123" in script
    assert "srun --nodes=2 --ntasks-per-node=1 --cpus-per-task=4" in script and "#SBATCH --cpus-per-task=4" in script


def test_a_clean_batch_script_ends_by_itself_and_cancels_only_on_an_expired_lease(tmp_path):
    _, script = script_for(tmp_path)
    assert script.count("scancel") == 1 and script.index("scancel") < script.index("srun ")
    assert script.rstrip().endswith("exit $code") and "wait $LEASE_WATCH" in script


def test_the_batch_script_is_valid_bash(tmp_path):
    _, script = script_for(tmp_path, extra_args=["--exclusive"])
    path = tmp_path / "batch.sh"
    path.write_text(script)
    out = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_a_rooms_launcher_comes_from_the_environment_and_a_notebooks_own_setting_wins(monkeypatch):
    from helpers.core.config_table import config_table

    monkeypatch.setenv("COURSE_LAUNCHER", "slurm")
    monkeypatch.setenv("COURSE_SLURM", '{"nodes": 1, "partition": "workshop", "gres": "gpu:8"}')
    cfg = job_config("ci")
    assert cfg.launcher == "slurm" and cfg.slurm == {"nodes": 1, "partition": "workshop", "gres": "gpu:8"}
    assert dict(config_table(cfg))["launcher"].startswith("slurm {'nodes': 1")
    assert job_config("ci", launcher="local").launcher == "local"
    monkeypatch.setenv("COURSE_SLURM", "{nodes: 2}")
    with pytest.raises(ConfigError) as info:
        job_config("ci")
    assert "COURSE_SLURM must be JSON" in str(info.value)
    monkeypatch.delenv("COURSE_LAUNCHER")
    monkeypatch.delenv("COURSE_SLURM")
    assert job_config("ci").launcher == "local" and "launcher" not in dict(config_table(job_config("ci")))


def test_course_command_line_sets_the_launcher_for_every_notebook(monkeypatch):
    from helpers.course import parser, use_launcher

    monkeypatch.setenv("COURSE_LAUNCHER", "")      # recorded, so what use_launcher sets is undone after the test
    monkeypatch.setenv("COURSE_SLURM", "")
    args = parser().parse_args(["run", "--launcher", "slurm", "--slurm", '{"nodes": 2}'])
    use_launcher(args.launcher, args.slurm)
    assert job_config("ci").slurm == {"nodes": 2} and job_config("ci").launcher == "slurm"
    with pytest.raises(ConfigError):
        use_launcher(None, "not json")


def test_a_slurm_job_left_by_a_dead_launcher_is_cancelled_by_the_next_run(tmp_path, monkeypatch):
    import json
    import sys

    from helpers.job.rank_guard import process_start
    from helpers.job.registry import REGISTRY, reap_orphans, register

    monkeypatch.setenv("COURSE_HOME", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start(dead.pid)
    dead.wait()
    path = register("left", tmp_path / "runs/x", slurm_job_id="77")
    rec = json.loads(path.read_text())
    assert rec["slurm_job_id"] == "77"
    path.write_text(json.dumps({**rec, "launcher_pid": dead.pid, "launcher_start": start}))
    register("alive", tmp_path / "runs/y", slurm_job_id="78")        # this process: still running
    cancelled = []
    cleaned = reap_orphans(lambda job_id: 0, cancelled.append)
    assert [c["slurm_job_id"] for c in cancelled] == ["77"] and len(cleaned) == 1
    assert [p.stem for p in (tmp_path / REGISTRY).glob("*.json")] == ["alive"]
