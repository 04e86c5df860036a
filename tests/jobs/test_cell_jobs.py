"""Notebook cells run on every rank (``helpers.cells.run_cell``) as real msrun jobs: a result per rank, and
the faults (a raising, hung, interrupted or orphaned cell, bad syntax, no memory) named, nothing left."""

import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import psutil
import pytest

from helpers.cells.program import CELL_FILE, SAME_GRAPH_ENV, CellError
from helpers.cells.run import run_cell
from helpers.core.errors import JobFailed
from helpers.core.metrics import metrics_path, read_records
from helpers.job import host_memory as hm
from helpers.job.stall import STEP_FACTOR
from tests.job_marks import interrupted_once, kill_launcher_when, left, marker  # noqa: F401 (marker: a fixture)

pytestmark = pytest.mark.jobs

MAGIC = "%%ranks cfg"

NET_CELL = """\
import numpy as np
import mindspore as ms
from mindspore import nn, ops
from mindspore.communication import get_rank, init
from helpers.cells import finish, report

init()


class Scaled(nn.Cell):
    def __init__(self):
        super().__init__()
        self.total = ops.ReduceSum()

    def construct(self, x):
        return self.total(x * scale)


net = Scaled()
for i in range(cfg.steps):
    out = net(ms.Tensor(np.full(4, get_rank() + i, np.float32)))
    report(step=i, loss=out)
finish({"rank": get_rank(), "out": float(out.asnumpy()), "mode": ms.get_context("mode")})
"""

SECOND_GRAPH = """
class Doubled(nn.Cell):
    def construct(self, x):
        return x * 2


Doubled()(ms.Tensor(np.ones(3, np.float32)))
"""

RAISING_CELL = """\
import time
from mindspore.communication import get_rank, init
from helpers.cells import finish, report

init()
for i in range(cfg.steps):
    report(step=i, loss=1.0 / (i + 1))
    if get_rank() == 3:
        raise RuntimeError("rank 3 gave up")
    time.sleep(0.2)
finish(get_rank())
"""

SPINNING_CELL = """\
import time
from mindspore.communication import get_rank, init
from helpers.cells import finish, report

init()
for i in range(cfg.steps):
    report(step=i, loss=1.0)
    if get_rank() == 1:
        while True:
            pass
    time.sleep(0.2)
finish(get_rank())
"""

ENDLESS_CELL = """\
import time
from mindspore.communication import get_rank, init
from helpers.cells import report

init()
i = 0
while True:
    report(step=i, loss=1.0)
    i += 1
    time.sleep(0.2)
"""


def small(ci_config, **changes):
    """4 ranks of the ci preset, bounded by a timeout well above what a test waits for."""
    return ci_config.replace(**{"world_size": 4, "global_batch": 32, "timeout_s": 300.0, **changes})


def net_returns(cfg, scale: float) -> dict:
    """Each rank's ``finish`` of ``NET_CELL``: its last sum, 4 x (rank + step) x ``scale``, in GRAPH mode."""
    graph_mode = 0                          # ms.GRAPH_MODE
    return {r: {"rank": r, "out": 4 * (r + cfg.steps - 1) * scale, "mode": graph_mode}
            for r in range(cfg.world_size)}


def cell_line(body: str, text: str) -> int:
    """The notebook's line number of the one body line containing ``text`` (line 1 is the magic line)."""
    (k,) = [i for i, line in enumerate(body.splitlines(), 1) if text in line]
    return k + 1


def steps_of(root: Path, rank: int) -> list[dict]:
    """``rank``'s step records so far in the only job under ``root``."""
    files = list(root.glob(f"*/*/metrics/rank_{rank}.jsonl"))
    return [r for r in read_records(files[0]) if r["event"] == "step"] if files else []


def run_dirs(root: Path) -> list[Path]:
    """The run directories under ``root`` (``<chapter>/<run>``)."""
    return [p for p in root.glob("*/*") if p.is_dir()]


def test_a_cell_with_a_graph_mode_net_runs_on_every_rank_and_returns_each_ranks_value(ci_config, tmp_path,
                                                                                       marker):
    """A cell's own nn.Cell runs in GRAPH mode on 4 ranks with a notebook value; every finish() is back."""
    cfg = small(ci_config)
    t0 = time.monotonic()
    notebook = {"scale": 0.5, "unread": threading.Lock()}     # a value the cell does not read is not sent
    res = run_cell(NET_CELL, cfg, notebook, magic_line=MAGIC, progress="text", run_root=tmp_path)
    print(f"cell on {cfg.world_size} ranks: {time.monotonic() - t0:.1f} s (job {res.wall_s:.1f} s)")
    assert res.returns == net_returns(cfg, 0.5), res.returns
    assert sorted(res.steps) == [0, 1, 2, 3]
    for r in range(4):
        assert [s["step"] for s in res.steps[r]] == list(range(cfg.steps))
        assert [s["loss"] for s in res.steps[r]] == [4 * (r + i) * 0.5 for i in range(cfg.steps)]
    text = (res.run_dir / CELL_FILE).read_text()
    assert text.startswith(f"# {MAGIC}\n") and text.splitlines()[1:] == NET_CELL.splitlines()
    assert not left(marker)


def test_same_graph_ranks_load_rank_0s_graphs_and_still_compute_their_own(ci_config, tmp_path, marker):
    """``%%ranks ... --same-graph``: with a cold cache, ranks 1-3 load each graph rank 0 compiled (MindSpore logs
    it), the first and a later one, and each rank still returns what its own inputs give."""
    from helpers.train.shared_compile import LOADED_LOG

    cfg = small(ci_config, glog_v=2)
    cfg = cfg.replace(env={**cfg.env, SAME_GRAPH_ENV: "1"})
    body = NET_CELL + SECOND_GRAPH + f"# a cell never cached before: {uuid.uuid4().hex}\n"   # its own cache folder
    res = run_cell(body, cfg, {"scale": 0.5}, magic_line=MAGIC + " --same-graph", progress="text", run_root=tmp_path)
    assert res.returns == net_returns(cfg, 0.5), res.returns
    shares = {r: [rec["result"] for rec in read_records(metrics_path(res.run_dir, r)) if rec["event"] == "graph_share"]
              for r in range(4)}
    assert shares[0] == [] and all(len(shares[r]) == 2 for r in (1, 2, 3)), shares
    assert all(x.startswith("loaded rank 0's graph") for r in (1, 2, 3) for x in shares[r]), shares
    loaded = {r: (res.run_dir / "logs" / f"worker_{r}.log").read_text().count(LOADED_LOG) for r in range(4)}
    assert loaded == {0: 0, 1: 2, 2: 2, 3: 2}, "MindSpore loaded both copied graphs on ranks 1-3, compiled them on 0"
    assert not left(marker)


def test_a_cell_raising_on_rank_3_of_8_names_the_rank_and_the_cell_line(ci_config, tmp_path, marker):
    """An exception on rank 3 of 8: a crash of rank 3 naming the notebook line; only the cell in the log."""
    cfg = small(ci_config, world_size=8, global_batch=64, steps=400)
    with pytest.raises(JobFailed) as info:
        run_cell(RAISING_CELL, cfg, {}, magic_line=MAGIC, progress="none", run_root=tmp_path)
    raised = time.time()
    err = info.value
    line = cell_line(RAISING_CELL, "raise RuntimeError")
    assert err.kind == "crash" and err.rank == 3, str(err)
    assert f"RuntimeError: rank 3 gave up (cell line {line}: raise RuntimeError" in str(err), str(err)
    assert f'{CELL_FILE}", line {line}, in <module>' in err.log_tail, err.log_tail
    assert "rank_main.py" not in err.log_tail and "helpers/cells" not in err.log_tail, err.log_tail
    (run_dir,) = run_dirs(tmp_path)
    failed = [r for r in read_records(run_dir / "metrics" / "rank_3.jsonl") if r["event"] == "failure"][0]
    assert len(steps_of(tmp_path, 3)) == 1, "rank 3 raised after its first report"
    print(f"rank 3's error raised {raised - failed['time']:.1f} s after it was recorded\n  "
          f"{str(err).splitlines()[0]}")
    assert raised - failed["time"] < 15
    assert not left(marker)


def test_a_syntax_error_is_refused_before_anything_starts(ci_config, tmp_path, marker):
    """A syntax error is a CellError naming the cell line: no run folder, no process."""
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    body = "from helpers.cells import finish\nfor i in range(cfg.steps)\n    finish(i)\n"
    with pytest.raises(CellError) as err:
        run_cell(body, small(ci_config), {}, magic_line=MAGIC, progress="none", run_root=tmp_path / "runs")
    assert f"syntax error in the cell, line {cell_line(body, 'for i')}: expected ':'" in str(err.value)
    assert str(err.value).endswith("nothing was launched")
    assert not (tmp_path / "runs").exists() or not run_dirs(tmp_path / "runs"), "no run directory"
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children, "nothing was started"
    assert not left(marker)


def test_an_endless_loop_on_rank_1_is_a_hang_named_at_its_cell_line(ci_config, tmp_path, marker):
    """Rank 1 spinning in the cell: a hang of rank 1 at its cell.py line, named within stall limit + 30 s."""
    cfg = small(ci_config, stall_s=8.0)
    with pytest.raises(JobFailed) as info:
        run_cell(SPINNING_CELL, cfg, {}, magic_line=MAGIC, progress="none", run_root=tmp_path)
    raised = time.time()
    err = info.value
    assert err.kind == "hang" and err.rank == 1, str(err)
    first = str(err).split("run directory")[0].strip()
    assert "cell.py" in first, "the stuck rank's place is the cell's"
    spin = {cell_line(SPINNING_CELL, "while True"), cell_line(SPINNING_CELL, "pass")}
    assert {int(n) for n in re.findall(r"cell\.py:(\d+)", first)} <= spin, first
    assert len(steps_of(tmp_path, 1)) == 1
    steps = [s["step_s"] for r in range(cfg.world_size) for s in steps_of(tmp_path, r)]
    limit = max(cfg.stall_s, STEP_FACTOR * float(np.median(steps)))
    took = raised - steps_of(tmp_path, 1)[-1]["time"]
    print(f"rank 1's endless loop named {took:.1f} s after its last report (limit {limit:.1f} s)\n  "
          f"{first}")
    assert took < limit + 30, f"detected {took:.0f} s after the stall"
    assert not left(marker)


def test_interrupting_a_cell_ends_its_job_and_is_not_a_success(ci_config, tmp_path, marker):
    """Stop (SIGINT in the kernel) on a running cell: JobFailed 'interrupted' and no process left."""
    cfg = small(ci_config)
    with interrupted_once(lambda: bool(steps_of(tmp_path, 0))) as sent:
        with pytest.raises(JobFailed) as info:
            run_cell(ENDLESS_CELL, cfg, {}, magic_line=MAGIC, progress="text", run_root=tmp_path)
    assert sent, "the cell was running when interrupted"
    took = time.time() - sent[0]
    print(f"interrupted cell ended {took:.1f} s after the interrupt was sent")
    assert info.value.kind == "interrupted"
    assert took < 30, "the launcher's stop: SIGINT to msrun, its 8 s grace, then SIGKILL to the rest"
    assert not left(marker)


KERNEL = """
import sys
from helpers.cells.run import run_cell
from helpers.core.config import job_config
cfg = job_config("ci", name="orphan_cell", chapter="tests", world_size=4, global_batch=32, timeout_s=300.0)
run_cell(sys.argv[2], cfg, {}, magic_line="%%ranks cfg", progress="none", run_root=sys.argv[1])
"""


def test_a_killed_kernel_takes_its_cells_job_with_it_within_10_s(standin, tmp_path, marker):
    """A kernel killed while its cell runs on the ranks: every process of the job gone within 10 s."""
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, str(tmp_path), ENDLESS_CELL],
                              cwd=Path(__file__).parents[2])
    gone_after = kill_launcher_when(kernel, lambda: bool(steps_of(tmp_path, 0)), marker)
    print(f"every process of the cell's job gone {gone_after:.1f} s after the kernel's death")
    assert not left(marker), f"{len(left(marker))} processes outlived the kernel by 30 s"
    assert gone_after < 10, f"the job outlived its kernel by {gone_after:.1f} s"


def test_a_cell_that_does_not_fit_in_host_memory_is_refused_before_anything_starts(ci_config, tmp_path,
                                                                                   monkeypatch, marker):
    """A cell job that does not fit the host's memory (COURSE_AVAILABLE_MB) is refused before any start."""
    monkeypatch.delenv(hm.WAIT_ENV, raising=False)        # tests/conftest.py waits by default
    monkeypatch.setenv(hm.AVAILABLE_ENV, "1500")
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    cfg = small(ci_config)
    with pytest.raises(hm.NotEnoughHostMemory) as err:
        run_cell(NET_CELL, cfg, {"scale": 0.5}, magic_line=MAGIC, progress="none", run_root=tmp_path)
    text = str(err.value)
    assert "not started" in text and re.search(r"needs about \d+ MB \(4 ranks x \d+ MB", text), text
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children, "no msrun was started"
    assert not run_dirs(tmp_path), "no run folder left behind"
    assert not left(marker)


# ------------------------------------------------------------------ --then: the cell's ranks go on to a worker job
CLASS_CELL = """\
import numpy as np
from mindspore.communication import get_rank, init
from helpers.cells import finish, report


class Doubler:
    def twice(self, x):
        return 2 * x


init()
report(step=0, loss=1.0)
finish({"rank": get_rank(), "twice": Doubler().twice(get_rank())})
"""


def test_then_runs_a_training_job_on_the_cells_ranks_in_the_same_launch(ci_config, tmp_path, marker):
    """``--then``: one launch, the cell's ``finish`` values and the follow-on job's steps and summary in its result,
    a file made from the cell's text in the run folder, and the ranks' weights equal after training; the chain's
    ``more`` jobs after it, each read as its own job (its steps, its summary, its folder) and found by the matcher."""
    from helpers.cells.run import FollowOn, chained_job
    from helpers.core.paths import more_dir

    cfg = small(ci_config, steps=2)
    more = (cfg.replace(name="alone", steps=1, grad_reduce=False), cfg.replace(name="again", steps=3, seed=5))
    then = FollowOn(cfg.replace(name="follow"), lambda text: {"class.txt": text.encode()}, more=more)
    res = run_cell(CLASS_CELL, cfg.replace(name="both"), {}, magic_line=MAGIC + " --then then", progress="text",
                   run_root=tmp_path, then=then)
    assert run_dirs(tmp_path) == [res.run_dir] and res.run_dir.name.endswith("-both")
    assert res.returns == {r: {"rank": r, "twice": 2 * r} for r in range(4)}
    assert "class Doubler" in (res.run_dir / "class.txt").read_text()
    for r in range(4):
        recs = read_records(metrics_path(res.run_dir, r))
        events = [x["event"] for x in recs]
        assert events.index("follow_on") > events.index("step") and events[-1] == "summary"
        assert [x["step"] for x in recs if x["event"] == "step"] == [0, 0, 1, 0, 0, 1, 2], \
            "the cell's report, then 2 steps, then the chain's 1 and 3"
    assert res.weights_identical and res.summary("steps") == [2] * 4
    alone, again = res.more
    assert alone.run_dir == more_dir(res.run_dir, 1) and alone.summary("steps") == [1] * 4
    assert again.summary("steps") == [3] * 4 and again.weights_identical and again.metric("loss").shape == (4, 3)
    assert len(set(alone.summary("checksum"))) == 4, "no gradient reduction: each rank trained alone"
    assert again.summary("checksum") != res.summary("checksum"), "another seed, other weights"
    assert chained_job(res, more[1]) is again
    assert res.config.timeout_s == 3 * cfg.timeout_s, "the launch's timeout covers the chain's three jobs"
    assert not left(marker)


def test_a_chained_job_failing_on_rank_2_is_named_and_nothing_is_left(ci_config, tmp_path, marker):
    from helpers.cells.run import FollowOn

    cfg = small(ci_config, steps=20)
    then = FollowOn(cfg.replace(steps=1), more=(cfg.replace(name="later", fail_rank=2, fail_step=1),))
    with pytest.raises(JobFailed) as info:
        run_cell(CLASS_CELL, cfg, {}, magic_line=MAGIC + " --then then", progress="none", run_root=tmp_path, then=then)
    err = info.value
    assert err.kind == "crash" and err.rank == 2 and "injected failure" in str(err), str(err)
    assert "in the chained job 'later'" in str(err), "the chain's job that failed is named"
    assert not left(marker)


def test_a_follow_on_on_other_ranks_is_refused_before_launch(ci_config, tmp_path):
    from helpers.cells.run import FollowOn

    cfg = small(ci_config)
    with pytest.raises(CellError, match="world_size"):
        run_cell(CLASS_CELL, cfg, {}, magic_line=MAGIC, run_root=tmp_path,
                 then=FollowOn(cfg.replace(world_size=2, global_batch=16)))
    assert not run_dirs(tmp_path)
