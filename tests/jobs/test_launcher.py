"""Real msrun jobs through the launcher: success, a failing rank, a timeout, an interrupt, two at once.

After every failure no process of the job may be left: checked by the job's MS_SCHED_PORT (msrun puts it in
every rank's environment; ``helpers.job.processes.processes_with_env`` finds them) and by the launcher's own job id
(what ``helpers.job.launch`` ends a job by, see its module docstring).
"""

import json
import time
from pathlib import Path

import pytest

from helpers.core.errors import JobFailed
from helpers.job.processes import processes_with_env
from helpers.job.launch import run_job
from helpers.core.metrics import metrics_path, read_records
from helpers.train.shared_compile import LOADED_LOG
from tests.job_marks import interrupted_once

pytestmark = pytest.mark.jobs


def processes_with_port(port: int) -> list[int]:
    return [p.pid for p in processes_with_env("MS_SCHED_PORT", str(port))]


def only_run_dir(root: Path) -> Path:
    (run_dir,) = [p for p in root.glob("*/*") if p.is_dir()]
    return run_dir


def port_of(run_dir: Path) -> int:
    return json.loads((run_dir / "config.json").read_text())["master_port"]


def test_eight_ranks_train_and_end_with_identical_weights(ci_config, tmp_path):
    """Also: with a cold compile cache ranks 1-7 load rank 0's compiled graphs, the train step's and precise BN's and
    evaluation's after it (``helpers.train.shared_graphs``), and train and evaluate exactly as ranks that each
    compiled their own (a job without the cache)."""
    cold = {"MS_COMPILER_CACHE_PATH": str(tmp_path / "cold_cache")}
    ci_config = ci_config.replace(evaluate=True, bn_recalibration_batches=1)
    res = run_job(ci_config.replace(steps=2, glog_v=2, env=cold), progress="text", run_root=tmp_path / "shared")
    assert res.ranks == list(range(8))
    assert res.metric("loss").shape == (8, 2)
    assert res.weights_identical
    assert len(set(res.metric("loss")[:, 0])) > 1, "ranks saw different data"
    assert res.returncode == 0 and res.wall_s > 0
    assert not processes_with_port(res.config.master_port)
    shares = {r: [rec["result"] for rec in read_records(metrics_path(res.run_dir, r)) if rec["event"] == "graph_share"]
              for r in range(8)}
    graphs = len(list((res.run_dir / "graph_share").glob("*.key")))
    assert graphs >= 3, "the train step, precise BN's forward and the evaluation graph"
    assert shares[0] == ["not applicable"]
    assert all(len(shares[r]) == graphs and all(s.startswith("loaded rank 0's graph") for s in shares[r])
               for r in range(1, 8)), shares
    loaded = {r: (res.run_dir / "logs" / f"worker_{r}.log").read_text().count(LOADED_LOG) for r in range(8)}
    assert loaded == {0: 0, **dict.fromkeys(range(1, 8), graphs)}, "MindSpore loaded every copied graph on 1-7"
    alone = run_job(ci_config.replace(steps=2, compile_cache=False), progress="none", run_root=tmp_path / "alone")
    assert (alone.metric("loss") == res.metric("loss")).all() and alone.summary("checksum") == res.summary("checksum")
    assert alone.summary("accuracy") == res.summary("accuracy")


def test_a_failing_rank_is_named_within_15_s_and_nothing_is_left(ci_config, tmp_path):
    cfg = ci_config.replace(steps=50, fail_rank=3, fail_step=1, world_size=4, global_batch=32)
    with pytest.raises(JobFailed) as info:
        run_job(cfg, progress="text", run_root=tmp_path)
    raised_at = time.time()
    err = info.value
    assert err.kind == "crash" and err.rank == 3
    assert "injected failure" in str(err) and "Traceback" in err.log_tail
    run_dir = only_run_dir(tmp_path)
    failed_at = [r for r in read_records(run_dir / "metrics" / "rank_3.jsonl") if r["event"] == "failure"][0]["time"]
    assert raised_at - failed_at < 15
    assert not processes_with_port(port_of(run_dir))
    assert (run_dir / "logs" / "worker_3.log").exists(), "logs are kept"


def test_timeout_ends_the_job(ci_config, tmp_path):
    cfg = ci_config.replace(steps=100_000, timeout_s=25.0, world_size=4, global_batch=32)
    with pytest.raises(JobFailed) as info:
        run_job(cfg, progress="text", run_root=tmp_path)
    assert info.value.kind == "timeout"
    assert not processes_with_port(port_of(only_run_dir(tmp_path)))


def test_interrupt_ends_the_job_and_is_not_a_success(ci_config, tmp_path):
    # the timeout only bounds what a lost interrupt costs (it would fail the kind assertion below anyway)
    cfg = ci_config.replace(steps=100_000, world_size=4, global_batch=32, timeout_s=300.0)

    def training():
        files = list(tmp_path.glob("*/*/metrics/rank_0.jsonl"))
        return bool(files) and any(r["event"] == "step" for r in read_records(files[0]))

    with interrupted_once(training) as sent:
        with pytest.raises(JobFailed) as info:
            run_job(cfg, progress="text", run_root=tmp_path)
    assert sent, "the job was training when interrupted"
    assert info.value.kind == "interrupted"
    assert not processes_with_port(port_of(only_run_dir(tmp_path)))
