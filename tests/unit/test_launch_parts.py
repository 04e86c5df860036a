"""Launcher pieces that need no process: command line, environment, metrics tailing, errors, display."""

import io
import json
import os
import time
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.core.config import job_config
from helpers.core.errors import ConfigError, JobFailed
from helpers.job.rank_guard import exit_record_path
from helpers.job.compile_cache import compile_cache_dir
from helpers.job.launch import bind_core_map, find_msrun, free_port, job_env, msrun_command
from helpers.core.metrics import MetricsTail, MetricsWriter, read_records
from helpers.job.progress import TextProgress
from helpers.output.tables import md_table
from helpers.output.records import load_results, record_results
from helpers.core.errors import failure_kind


def test_msrun_command_carries_the_job_contract(tmp_path):
    cfg = job_config("ci", master_port=4242, world_size=8, local_world_size=4, node_rank=1, master_addr="10.0.0.1")
    cmd = msrun_command(cfg, tmp_path / "config.json", tmp_path / "logs")
    for flag in ("--worker_num=8", "--local_worker_num=4", "--master_port=4242", "--node_rank=1",
                 "--master_addr=10.0.0.1", "--join=True", f"--log_dir={tmp_path / 'logs'}"):
        assert flag in cmd
    assert cmd[-3:] == ["-m", "helpers.job.rank_guard", str(tmp_path / "config.json")]
    assert cmd[cmd.index("python") - 1].startswith(("--join=True", "--bind_core=")), "msrun flags, then the worker"


def test_another_worker_runs_under_the_rank_guard(tmp_path):
    cfg = job_config("ci", master_port=4242)
    worker = ("-m", "benchmarks.model_train_worker", "--sink", "0")
    cmd = msrun_command(cfg, tmp_path / "config.json", tmp_path / "logs", worker=worker)
    assert cmd[-7:] == ["-m", "helpers.job.rank_guard", str(tmp_path / "config.json"), *worker]
    cfg_path = cfg.save(tmp_path / "config.json")           # the guard runs it and records its bad exit
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MS_", "RANK_", "COURSE_LAUNCHER"))}
    done = subprocess.run([sys.executable, "-m", "helpers.job.rank_guard", str(cfg_path), "-c",
                           "import sys; sys.exit(3 if sys.argv[-1].endswith('config.json') else 4)"],
                          env={**clean, "RANK_ID": "5"}, capture_output=True, timeout=60)
    assert done.returncode == 3
    assert json.loads(exit_record_path(tmp_path, "5").read_text())["returncode"] == 3


def test_another_environment_comes_first_on_path_and_its_msrun_is_used(tmp_path):
    env = job_env(job_config("ci"), "job-1", base={"PATH": "/usr/bin", "VIRTUAL_ENV": "/ours"}, bin_dir=tmp_path)
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path) and "VIRTUAL_ENV" not in env
    with pytest.raises(ConfigError, match="msrun not found"):
        find_msrun(tmp_path)                                 # only that environment's msrun, never ours
    (tmp_path / "msrun").write_text("#!/bin/sh\n")
    (tmp_path / "msrun").chmod(0o755)
    assert find_msrun(tmp_path) == str(tmp_path / "msrun")


def test_env_puts_this_interpreter_first_and_quiets_glog():
    env = job_env(job_config("ci", env={"EXTRA": 5}), "job-1", base={"PATH": "/usr/bin"})
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert env["GLOG_v"] == "3" and env["EXTRA"] == "5" and env["COURSE_JOB_ID"] == "job-1"
    assert env["MS_COMPILER_CACHE_ENABLE"] == "1"


def test_env_shortens_the_cluster_retry_interval_unless_the_user_set_it():
    env = job_env(job_config("ci"), "job-1", base={"PATH": "/usr/bin"})
    assert (env["MS_RETRY_INTERVAL_LOWER"], env["MS_RETRY_INTERVAL_UPPER"]) == ("1", "1")
    env = job_env(job_config("ci"), "job-1", base={"PATH": "/usr/bin", "MS_RETRY_INTERVAL_LOWER": "5"})
    assert env["MS_RETRY_INTERVAL_LOWER"] == "5"


def test_msrun_is_found_next_to_the_interpreter():
    assert Path(find_msrun()).name == "msrun"


def test_free_ports_differ():
    assert len({free_port() for _ in range(5)}) >= 4


def test_metrics_tail_returns_only_new_complete_lines(tmp_path):
    w = MetricsWriter(tmp_path, 0)
    tail = MetricsTail(tmp_path, [0, 1])
    w.write("step", step=0, loss=1.0)
    assert [r["step"] for r in tail.poll()] == [0]
    assert tail.poll() == []
    w.write("summary", steps=1)
    with open(tmp_path / "metrics" / "rank_0.jsonl", "a") as f:
        f.write('{"event": "step", "half')          # a line still being written
    assert [r["event"] for r in tail.poll()] == ["summary"]
    assert len(read_records(tmp_path / "metrics" / "rank_0.jsonl")) == 2


def test_job_failed_names_kind_rank_and_log():
    err = JobFailed("oom", "RuntimeError: Memory not enough", rank=3, log_tail="line a\nline b", run_dir="/r")
    text = str(err)
    assert "oom" in text and "rank 3" in text and "line b" in text and "/r" in text
    with pytest.raises(ValueError):
        JobFailed("melted", "x")


@pytest.mark.parametrize("text, kind", [("RuntimeError: ... Memory not enough", "oom"),
                                        ("could not create a primitive", "oom"),
                                        # the GPU/Ascend allocators' texts, as the 2.10 wheel's libraries word them
                                        ("RuntimeError: Device(id:0) memory isn't enough and alloc failed, kernel "
                                         "name: Default/Conv2D-op1, alloc size: 524288B", "oom"),
                                        ("Allocate device memory failed!", "oom"),
                                        ("CUBLAS_STATUS_ALLOC_FAILED: Resource allocation failed", "oom"),
                                        ("Malloc Mem From Mem Pool failed, size: 1024", "oom"),
                                        ("ValueError: bad shape", "crash")])
def test_failure_kind(text, kind):
    assert failure_kind(text) == kind


def test_text_progress_prints_rank_steps_and_loss():
    out = io.StringIO()
    p = TextProgress("job", range(2), 3, every_s=0, stream=out)
    p.update(0, 1, 2.5)
    p.close("finished")
    text = out.getvalue()
    assert "2 ranks" in text and "2.500" in text and "finished" in text


def test_text_progress_names_each_job_of_a_launch_and_counts_its_own_steps():
    out = io.StringIO()
    p = TextProgress("code", range(2), 1, every_s=0, stream=out)
    p.update(0, 1, 2.5)
    p.update(1, 1, 2.5)
    p.job(0, "baseline", 5)
    p.update(0, 2, 1.5)
    assert out.getvalue().splitlines()[-1].split("] ")[1].startswith("baseline: steps done per rank 2 1 (all >= 1/1)")
    p.job(1, "baseline", 5)
    p.update(1, 1, 1.5)
    assert "baseline: steps done per rank 2 1 (all >= 1/5)" in out.getvalue().splitlines()[-1]


def test_results_are_plain_json_and_refuse_nan(tmp_path):
    import numpy as np

    data = record_results(tmp_path / "r.json", show=False, a=np.float32(1.5), b={"x": np.int64(2)}, c=(1, 2))
    assert load_results(tmp_path / "r.json") == data == {"a": 1.5, "b": {"x": 2}, "c": [1, 2]}
    with pytest.raises(ValueError):
        record_results(tmp_path / "bad.json", show=False, v=float("nan"))
    json.loads((tmp_path / "r.json").read_text())


def test_md_table():
    assert md_table([(1, 0.123456)], ["a", "b"]).splitlines()[-1] == "| 1 | 0.1235 |"


def test_compile_cache_folder_differs_for_every_graph_shape():
    # A full-batch job, its accumulated twin and a grad_check job of the same model build different graphs;
    # sharing one folder made MindSpore load the wrong graph (seen: labels read as -134217584).
    full = job_config("ci", conv_impl="native")
    variants = [full, full.replace(micro_batch=2, accumulation_steps=4),
                full.replace(micro_batch=2, accumulation_steps=4, task="grad_check"),
                full.replace(conv_impl="im2col"), full.replace(amp_level="O2")]
    assert len({compile_cache_dir(c) for c in variants}) == len(variants)
    assert compile_cache_dir(full) == compile_cache_dir(full.replace(steps=9, lr=0.5, name="other"))


def test_bind_cores_pins_local_rank_r_to_core_r_mod_cores(tmp_path, monkeypatch):
    assert bind_core_map(4, 2) == {"device0": ["0"], "device1": ["1"], "device2": ["0"], "device3": ["1"]}
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    cfg = job_config("ci")
    assert cfg.bind_cores, "the CPU presets pin ranks (measured 1.4x on 2 cores)"
    cmd = msrun_command(cfg, tmp_path / "c.json", tmp_path / "logs")
    (flag,) = [a for a in cmd if a.startswith("--bind_core=")]
    assert json.loads(flag.split("=", 1)[1]) == bind_core_map(8, 2)
    assert cmd.index(flag) < cmd.index("python"), "an msrun flag, before the worker command"
    for no_pin in (cfg.replace(bind_cores=False), cfg.replace(device_target="GPU")):
        assert not any(a.startswith("--bind_core") for a in msrun_command(no_pin, tmp_path, tmp_path))
    monkeypatch.setattr(os, "cpu_count", lambda: 64)   # a big shared server: leave placement to the OS
    assert not any(a.startswith("--bind_core") for a in msrun_command(cfg, tmp_path, tmp_path))


def test_the_compile_cache_is_keyed_by_the_classifier_size(tmp_path):
    # a 4-class job and a 10-class job with otherwise equal settings once shared a cached graph (a label-range crash)
    from helpers.core.config import job_config
    from helpers.job.compile_cache import compile_cache_dir

    for n in (4, 10):
        for c in range(n):
            (tmp_path / f"d{n}" / "train" / f"c{c}").mkdir(parents=True)
    four, ten = (job_config("ci", data_dir=str(tmp_path / f"d{n}")) for n in (4, 10))
    assert compile_cache_dir(four) != compile_cache_dir(ten)
    assert compile_cache_dir(four) != compile_cache_dir(four.replace(num_classes=10))


def test_the_compile_cache_follows_the_helpers_source(monkeypatch):
    # MindSpore's cache checks only the entry script: an edit to the model code must not load an old graph
    import helpers.job.compile_cache as L
    from helpers.core.config import job_config

    cfg = job_config("ci")
    before = L.compile_cache_dir(cfg)
    monkeypatch.setattr(L, "code_fingerprint", lambda: "edited")
    assert L.compile_cache_dir(cfg) != before


def test_a_second_job_of_the_same_graph_at_once_compiles_into_its_own_folder(tmp_path):
    from helpers.job.compile_cache import CACHE_ENV, claim_compile_cache

    env = {"MS_COMPILER_CACHE_ENABLE": "1", CACHE_ENV: str(tmp_path / "cache" / "abc")}
    with claim_compile_cache(env, tmp_path / "run1") as first:
        assert first[CACHE_ENV] == env[CACHE_ENV]
        with claim_compile_cache(env, tmp_path / "run2") as second:
            assert second[CACHE_ENV] == str(tmp_path / "run2" / "compile_cache")
    with claim_compile_cache(env, tmp_path / "run3") as third:    # released when the first job ended
        assert third[CACHE_ENV] == env[CACHE_ENV]


def test_the_compile_cache_claim_is_released_when_the_job_fails(tmp_path):
    from helpers.job.compile_cache import CACHE_ENV, claim_compile_cache

    env = {"MS_COMPILER_CACHE_ENABLE": "1", CACHE_ENV: str(tmp_path / "c")}
    with pytest.raises(RuntimeError):
        with claim_compile_cache(env, tmp_path):
            raise RuntimeError("rank 3 died")
    with claim_compile_cache(env, tmp_path / "next") as again:
        assert again[CACHE_ENV] == env[CACHE_ENV]
    assert claim_compile_cache({"MS_COMPILER_CACHE_ENABLE": "0"}, tmp_path).__enter__() == {"MS_COMPILER_CACHE_ENABLE": "0"}


def test_job_workers_are_the_ranks_not_the_scheduler_or_other_jobs():
    # after every summary the launcher waits only for these, then ends msrun and the scheduler
    import subprocess
    import sys
    import uuid

    from helpers.job.processes import JOB_ID_ENV, job_workers

    job = f"unit-{uuid.uuid4().hex[:8]}"
    roles = {"rank": ("MS_WORKER", job), "scheduler": ("MS_SCHED", job), "other_job": ("MS_WORKER", job + "-x")}
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    procs = {k: subprocess.Popen(sleeper, env={**os.environ, "MS_ROLE": role, JOB_ID_ENV: jid})
             for k, (role, jid) in roles.items()}
    try:
        deadline = time.time() + 10
        while time.time() < deadline and not job_workers(job):
            time.sleep(0.05)
        assert [p.pid for p in job_workers(job)] == [procs["rank"].pid]
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    assert job_workers(job) == []


def test_cpu_collectives_wait_as_long_as_the_compile_allowance_unless_the_user_set_it():
    env = job_env(job_config("ci", compile_stall_s=450.0), "job-1", base={"PATH": "/usr/bin"})
    assert env["MS_CPU_COMM_OP_TIMEOUT"] == "450"
    env = job_env(job_config("ci"), "job-1", base={"PATH": "/usr/bin", "MS_CPU_COMM_OP_TIMEOUT": "60"})
    assert env["MS_CPU_COMM_OP_TIMEOUT"] == "60"
    assert "MS_CPU_COMM_OP_TIMEOUT" not in job_env(job_config("gpu8"), "job-1", base={"PATH": "/usr/bin"})


def test_a_killed_process_is_ended_once_it_is_a_zombie_without_waiting_for_its_reap():
    import psutil

    from helpers.job.processes import ended, wait_ended

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc = psutil.Process(child.pid)
    assert not ended(proc)
    t0 = time.monotonic()
    wait_ended([proc], 0.3)
    assert time.monotonic() - t0 >= 0.3, "a running process is waited for until the timeout"
    proc.kill()
    t0 = time.monotonic()
    wait_ended([proc], 10.0)                 # nobody has reaped it: a zombie, ended
    assert time.monotonic() - t0 < 2 and proc.status() == psutil.STATUS_ZOMBIE and ended(proc)
    child.wait()
    assert ended(proc), "gone"


def test_a_follow_on_jobs_steps_are_read_apart_from_its_cells():
    from helpers.job.launch import chain_parts, split_follow_on

    recs = [{"event": "start"}, {"event": "step", "step": 0, "cell": 1}, {"event": "step", "step": 1, "cell": 1},
            {"event": "follow_on", "task": "train"}, {"event": "step", "step": 0}, {"event": "summary"}]
    job, cell = split_follow_on(chain_parts(recs))
    assert [x.get("cell") for x in cell] == [1, 1] and [x["step"] for x in job] == [0] and "cell" not in job[0]
    assert split_follow_on(chain_parts(recs[:3])) == (recs[1:3], [])     # no follow-on: the steps are the job's
