"""Jobs through a real Slurm cluster (two slurmd nodes in network namespaces): the same result as a local job, the
queue, and the faults of a local job with the node named. Each fault test prints its detection time."""

import os
import time

import pytest

from helpers.core.errors import JobFailed
from helpers.job.launch import run_job
from tests.job_marks import left, marker  # noqa: F401 (marker is a fixture)

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]


def on_slurm(cfg, nodes=2, **slurm):
    return cfg.replace(launcher="slurm", slurm=dict(nodes=nodes, **slurm))


def test_two_nodes_of_four_ranks_end_with_the_weights_of_the_local_eight_rank_job(cluster, ci_config, tmp_path,
                                                                                   marker):
    cfg = ci_config.replace(steps=2, conv_impl="im2col")
    local = run_job(cfg, progress="none", run_root=tmp_path / "local")
    t0 = time.monotonic()
    slurm = run_job(on_slurm(cfg), progress="text", run_root=tmp_path / "slurm")
    after_summaries = time.time() - max(x["time"] for x in slurm.summaries.values())
    print(f"2 x 4 ranks through Slurm: {time.monotonic() - t0:.1f} s (local {local.wall_s:.1f} s); returned "
          f"{after_summaries:.1f} s after the last summary, once the job had ended by itself")
    assert slurm.ranks == list(range(8)) and slurm.weights_identical
    assert slurm.summaries[0]["checksum"] == local.summaries[0]["checksum"]
    assert (slurm.metric("loss") == local.metric("loss")).all()
    assert sorted(p.parent.name for p in slurm.log_dir.rglob("worker_*.log")) == ["node0"] * 4 + ["node1"] * 4
    tokens = sorted((slurm.run_dir / "slurm").glob("node_*"))
    assert [t.read_text().split()[1] for t in tokens] == ["n1", "n2"], "each node wrote its token"
    assert not left(marker)
    ended_clean(cluster, slurm.run_dir)


def slurm_job_id(run_dir) -> str:
    """The Slurm job id of a run (its batch log is ``<run_dir>/slurm/batch-<id>.log``)."""
    from pathlib import Path

    return next((Path(run_dir) / "slurm").glob("batch-*.log")).stem.split("-")[1]


def ended_clean(cluster, run_dir) -> dict:
    """A finished job ended by itself: Slurm's completion record (``sacct -c``) and ``scontrol`` say COMPLETED with
    exit 0, and its batch log has no CANCELLED line; returns the completion record."""
    import subprocess
    from pathlib import Path

    job = slurm_job_id(run_dir)
    deadline = time.time() + 10
    while not cluster.completion(job) and time.time() < deadline:
        time.sleep(0.2)
    record = cluster.completion(job)
    shown = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
    batch_log = (Path(run_dir) / "slurm" / f"batch-{job}.log").read_text(errors="replace")
    print(f"Slurm job {job}: sacct -c {record}; scontrol "
          f"{' '.join(w for w in shown.split() if w.startswith(('JobState=', 'ExitCode=')))}")
    assert record.get("State") == "COMPLETED" and record.get("ExitCode") == "0:0", record
    assert "JobState=COMPLETED" in shown and "ExitCode=0:0" in shown, shown
    assert "CANCELLED" not in batch_log and "error" not in batch_log.lower(), batch_log
    return record


def small(ci_config, **changes):
    """4 ranks = 2 nodes x 2, long enough to be hit mid-job."""
    return on_slurm(ci_config.replace(world_size=4, global_batch=32, steps=400, timeout_s=400.0, **changes))


def worker_of(marker: str, rank: int, timeout: float = 240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for p in left(marker):
            try:
                env, cmd = p.environ(), " ".join(p.cmdline())
            except Exception:  # noqa: BLE001 - a process that ended meanwhile
                continue
            if env.get("MS_ROLE") == "MS_WORKER" and env.get("RANK_ID") == str(rank) and "helpers.train.worker" in cmd:
                return p
        time.sleep(0.2)
    raise AssertionError(f"no worker process of rank {rank} appeared")


def steps_of(root, rank: int) -> list:
    from helpers.core.metrics import read_records

    files = list(root.glob(f"*/*/metrics/rank_{rank}.jsonl"))
    return [r for r in read_records(files[0]) if r["event"] == "step"] if files else []


def after_step(root, rank: int, step: int, then, timeout: float = 300):
    """Call ``then()`` from a thread once ``rank`` has recorded ``step`` (the job runs meanwhile)."""
    import threading

    def watch():
        try:   # whatever happens while watching, ``then`` runs (else the job runs to its timeout)
            deadline = time.time() + timeout
            while time.time() < deadline and len(steps_of(root, rank)) <= step:
                time.sleep(0.1)
        finally:
            then()
    threading.Thread(target=watch, daemon=True).start()


def no_leftovers(cluster, marker):
    assert not cluster.our_jobs(), f"still in squeue: {cluster.our_jobs()}"
    assert not left(marker), f"{len(left(marker))} processes of the job left"


def test_a_killed_rank_on_the_second_node_is_named_with_its_node(cluster, ci_config, tmp_path, marker):
    sent = {}

    def kill():
        worker_of(marker, 3).kill()
        sent["at"] = time.time()
    after_step(tmp_path, 3, 1, kill)
    with pytest.raises(JobFailed) as info:
        run_job(small(ci_config), progress="none", run_root=tmp_path)
    took = time.time() - sent["at"]
    err = info.value
    print(f"SIGKILLed rank 3 under Slurm: '{err.kind}' on rank {err.rank} reported {took:.1f} s later\n  "
          f"{str(err).splitlines()[0]}")
    assert err.kind == "killed" and err.rank == 3 and "node n2" in str(err), str(err)
    assert took < 30
    no_leftovers(cluster, marker)


def test_a_hung_rank_is_named_with_its_node(cluster, ci_config, tmp_path, marker):
    with pytest.raises(JobFailed) as info:
        run_job(small(ci_config, fail_rank=2, fail_step=3, fail_mode="hang", stall_s=8.0), progress="none",
                run_root=tmp_path)
    raised = time.time()
    err = info.value
    took = raised - steps_of(tmp_path, 2)[-1]["time"]
    print(f"hung rank 2 under Slurm: named {took:.1f} s after its last step (stall_s 8)\n  {str(err).splitlines()[0]}")
    assert err.kind == "hang" and err.rank == 2 and "node n2" in str(err), str(err)
    assert took < 8 + 20
    no_leftovers(cluster, marker)


def test_interrupt_cancels_the_slurm_job_and_returns_once_it_ended(cluster, ci_config, tmp_path, marker):
    import _thread
    import signal

    sent = {}

    def interrupt():
        sent["at"] = time.time()
        _thread.interrupt_main(signal.SIGINT)
    # what a notebook user's interrupt raises, whatever handler an earlier test left in this process (a CI run's
    # job trained all its 400 steps through the interrupt)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        after_step(tmp_path, 0, 1, interrupt)
        with pytest.raises(JobFailed) as info:
            run_job(small(ci_config), progress="none", run_root=tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    took = time.time() - sent["at"]
    print(f"Ctrl+C under Slurm: job cancelled and ended {took:.1f} s after the interrupt")
    assert info.value.kind == "interrupted"
    no_leftovers(cluster, marker)
    assert took < 30


def test_a_killed_slurmd_is_a_lost_node_named_and_nothing_is_left(cluster, ci_config, tmp_path, marker):
    import signal

    sent = {}

    def kill_slurmd():
        cluster.slurmd["n2"].send_signal(signal.SIGKILL)
        sent["at"] = time.time()
    after_step(tmp_path, 0, 1, kill_slurmd)
    try:
        with pytest.raises(JobFailed) as info:
            run_job(small(ci_config), progress="none", run_root=tmp_path)
        took = time.time() - sent["at"]
        err = info.value
        print(f"slurmd of n2 killed: '{err.kind}' reported {took:.1f} s later\n  {str(err).splitlines()[0]}")
        assert err.kind == "node_lost" and "node n2" in str(err), str(err)
        print("  its log tail: " + " | ".join(err.log_tail.splitlines()[:4]))
        assert "[msrun1.log]" in err.log_tail and "logs/node1/worker_" in err.log_tail, err.log_tail
        assert "msrun0.log" not in err.log_tail and "node0" not in err.log_tail, "the lost node's own words"
        assert took < 60
        no_leftovers(cluster, marker)
    finally:
        cluster.slurmd["n2"].wait()
        cluster.start_slurmd(cluster.nodes[1])           # back for the next test (ReturnToService=2)
        cluster.wait_idle()


KILLED_SUBMITTER = """
import sys
from helpers.core.config import job_config
from helpers.job.launch import run_job
cfg = job_config("ci", name="orphan", chapter="tests", world_size=4, global_batch=32, steps=400, timeout_s=400.0,
                 launcher="slurm", slurm={"nodes": 2}, data_dir=sys.argv[2])
run_job(cfg, progress="none", run_root=sys.argv[1])
"""


def test_a_killed_submitting_kernel_ends_its_job_within_60_s(cluster, standin, tmp_path, marker):
    import subprocess
    import sys
    from pathlib import Path

    # A course home of its own: another run_job in the shared one would end this job as an orphan (by design,
    # helpers.job.registry) before the lease does, which is not what this test measures.
    (tmp_path / "home").mkdir()
    kernel = subprocess.Popen([sys.executable, "-c", KILLED_SUBMITTER, str(tmp_path), str(standin)],
                              cwd=Path(__file__).parents[2], env={**os.environ, "COURSE_HOME": str(tmp_path / "home")})
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not steps_of(tmp_path, 0):
            time.sleep(0.2)
        assert steps_of(tmp_path, 0), "the job never trained"
        kernel.kill()                              # a notebook kernel that dies: nobody calls scancel
        kernel.wait()
        died = time.time()
        while (cluster.our_jobs() or left(marker)) and time.time() - died < 90:
            time.sleep(0.5)
        gone_after = time.time() - died
    finally:
        kernel.kill()
    expired = list(tmp_path.glob("*/*/slurm/lease_expired"))
    print(f"submitting process killed: Slurm job and every rank gone {gone_after:.1f} s later "
          f"({expired[0].read_text().strip() if expired else 'no lease note'})")
    no_leftovers(cluster, marker)
    assert gone_after < 60 and expired


QUEUED_SUBMITTER = """
import json, sys
from helpers.core.config import job_config
from helpers.job.launch import run_job
more = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
cfg = job_config("ci", name=sys.argv[2], chapter="tests", world_size=2, global_batch=16, steps=2, conv_impl="im2col",
                 timeout_s=400.0, launcher="slurm", **{"slurm": {"nodes": 1, "partition": "one"}, **more})
res = run_job(cfg, progress="text", run_root=sys.argv[1])
print("RESULT " + json.dumps(dict(checksum=res.summaries[0]["checksum"], run_dir=str(res.run_dir))))
"""


def test_a_pending_job_whose_submitter_died_never_starts_a_rank(cluster, standin, tmp_path, marker):
    """A job held behind another on partition ``one`` loses its submitter; when its turn comes its batch script
    finds the lease old (aged here instead of waiting LEASE_S) and exits 0 before srun: no node token, no rank log."""
    import subprocess
    import sys
    from pathlib import Path

    from helpers.job.slurm_script import LEASE_S

    blocker = subprocess.run(["sbatch", "--parsable", "-p", "one", "-o", "/dev/null", "--wrap", "sleep 300"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "home").mkdir()
    kernel = subprocess.Popen([sys.executable, "-c", QUEUED_SUBMITTER, str(tmp_path), "orphan"],
                              cwd=Path(__file__).parents[2], env={**os.environ, "COURSE_HOME": str(tmp_path / "home")},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(cluster.our_jobs()) < 2:
            time.sleep(0.2)
        assert len(cluster.our_jobs()) == 2, f"the job was not queued behind the blocker: {cluster.our_jobs()}"
        kernel.kill()                              # the notebook dies while its job waits
        kernel.wait()
        lease = next(tmp_path.glob("*/*/slurm/lease"))
        os.utime(lease, (time.time() - LEASE_S - 5,) * 2)
        t0 = time.time()
        subprocess.run(["scancel", blocker], check=True)
        while cluster.our_jobs() and time.time() - t0 < 60:
            time.sleep(0.3)
        run_dir = lease.parent.parent
        batch = next((run_dir / "slurm").glob("batch-*.log")).read_text()
        print(f"dead submitter's pending job ended {time.time() - t0:.1f} s after its turn came: {batch.strip()}")
        assert batch.strip().endswith("no rank started") and batch.count("\n") == 1, batch
        assert not list((run_dir / "slurm").glob("node_*")) and not (run_dir / "logs").exists()
        assert not list((run_dir / "metrics").glob("*")) if (run_dir / "metrics").exists() else True
        assert ended_clean(cluster, run_dir)["State"] == "COMPLETED"
        no_leftovers(cluster, marker)
    finally:
        kernel.kill()
        subprocess.run(["scancel", blocker])


def run_interval(run_dir) -> tuple[float, float]:
    """When the job's ranks first and last wrote a record."""
    from pathlib import Path

    from helpers.core.metrics import read_records

    times = [r["time"] for f in (Path(run_dir) / "metrics").glob("rank_*.jsonl") for r in read_records(f)]
    return min(times), max(times)


def test_three_participants_at_once_queue_on_a_one_job_server_and_each_sees_its_place(cluster, ci_config, tmp_path,
                                                                                      marker):
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).parents[2]
    procs = [subprocess.Popen([sys.executable, "-c", QUEUED_SUBMITTER, str(tmp_path / f"user{i}"), f"user{i}"],
                              cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(3)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n\n".join(outs)
    results = [json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:]) for out in outs]
    waits = [[line for line in out.splitlines() if "PENDING" in line] for out in outs]
    for out, w in zip(outs, waits):
        print("\n".join(w[:3]) or "(ran at once)")
    assert sum(any("place 2 of 2" in line for line in w) for w in waits) >= 1, "someone waited second in line"
    assert sum(bool(w) and any("(Resources)" in line or "(Priority)" in line for line in w) for w in waits) >= 2
    assert all("place " in line and "(None)" not in line for w in waits for line in w), waits
    spans = sorted(run_interval(r["run_dir"]) for r in results)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"jobs overlapped: {spans}"
    alone = run_job(ci_config.replace(world_size=2, global_batch=16, steps=2, conv_impl="im2col"), progress="none",
                    run_root=tmp_path / "alone")
    assert {r["checksum"] for r in results} == {alone.summaries[0]["checksum"]}
    print(f"three jobs ran one after another: {[(round(b - a, 1)) for a, b in spans]} s each")
    no_leftovers(cluster, marker)


def test_a_node_that_cannot_see_the_run_directory_is_named(cluster, ci_config, tmp_path, marker):
    runs = tmp_path / "runs"
    runs.mkdir()
    cluster.restart_slurmd(cluster.nodes[1], hide=tmp_path)     # n2 sees an empty folder where the runs are
    try:
        t0 = time.time()
        with pytest.raises(JobFailed) as info:
            run_job(small(ci_config), progress="none", run_root=runs)
        err = info.value
        print(f"unshared run directory: reported {time.time() - t0:.1f} s after submitting\n  {err}")
        assert err.kind == "crash" and "n2" in str(err) and "filesystem every node sees" in str(err), str(err)
        assert "cannot see" in str(err), "the node's own words are quoted"
        no_leftovers(cluster, marker)
    finally:
        cluster.restart_slurmd(cluster.nodes[1])


def test_two_jobs_that_together_exceed_a_plain_partitions_node_run_one_after_the_other(cluster, standin, tmp_path,
                                                                                        marker):
    """Partition ``plain`` shares n1 (4 CPUs) between jobs; each job asks 2 ranks x 2 threads = 4 CPUs, so Slurm
    runs the second only once the first has ended (each ends by itself: COMPLETED)."""
    import json
    import subprocess
    import sys
    from datetime import datetime
    from pathlib import Path

    repo = Path(__file__).parents[2]
    more = json.dumps({"threads_per_rank": 2, "slurm": {"nodes": 1, "partition": "plain"}})
    procs = [subprocess.Popen([sys.executable, "-c", QUEUED_SUBMITTER, str(tmp_path / f"user{i}"), f"user{i}", more],
                              cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n\n".join(outs)
    runs = [json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])["run_dir"]
            for out in outs]
    assert all("#SBATCH --cpus-per-task=4" in (Path(r) / "slurm" / "batch.sh").read_text() for r in runs)
    records = [ended_clean(cluster, r) for r in runs]
    slurm_spans = sorted((datetime.fromisoformat(x["Start"]), datetime.fromisoformat(x["End"])) for x in records)
    rank_spans = sorted(run_interval(r) for r in runs)
    print("Slurm start-end: " + ", ".join(f"{a:%H:%M:%S}-{b:%H:%M:%S}" for a, b in slurm_spans)
          + "; ranks' records: " + ", ".join(f"{a:.1f}-{b:.1f}" for a, b in rank_spans))
    print("\n".join(line for out in outs for line in out.splitlines() if "PENDING" in line)[:600])
    assert slurm_spans[0][1] <= slurm_spans[1][0], f"Slurm ran them together: {slurm_spans}"
    assert rank_spans[0][1] <= rank_spans[1][0], f"their ranks overlapped: {rank_spans}"
    assert any("waiting for free CPUs or nodes (Resources)" in out for out in outs), "the second waited for CPUs"
    no_leftovers(cluster, marker)


def test_a_job_asking_more_cpus_than_a_node_has_is_refused_in_one_line(cluster, ci_config, tmp_path, marker):
    from helpers.core.errors import ConfigError

    cfg = ci_config.replace(world_size=2, global_batch=16, threads_per_rank=4, conv_impl="im2col", launcher="slurm",
                            slurm={"nodes": 1, "partition": "plain"})
    with pytest.raises(ConfigError) as info:
        run_job(cfg, progress="none", run_root=tmp_path)
    print(f"8 CPUs asked of a 4-CPU node: {info.value}")
    assert "\n" not in str(info.value) and "asks 8 CPUs" in str(info.value) and "at most 4" in str(info.value)
    assert "slurm['cpus_per_node']" in str(info.value)
    no_leftovers(cluster, marker)
