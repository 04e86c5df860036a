"""A notebook cell made into a rank program (helpers.cells): what is checked before launch, what a rank reports."""

import json
import pickle
import sys
import threading

import numpy as np
import pytest

from helpers.cells.magic import parse_magic_line, returns_table
from helpers.cells.program import (CELL_FILE, VALUES_FILE, CellError, cell_program, cell_text, free_names)
from helpers.cells.rank_main import failure_text, notebook_values
from helpers.cells import reporting
from helpers.core.config import JobConfig
from helpers.core.metrics import MetricsWriter, metrics_path, read_records


def test_the_file_keeps_the_cells_line_numbers():
    text = cell_text("%%ranks cfg", "a = 1\nb = 2\n")
    assert text.splitlines()[0] == "# %%ranks cfg" and text.splitlines()[2] == "b = 2"


def test_a_syntax_error_names_the_cell_line_before_launch():
    with pytest.raises(CellError, match=r"line 3.*\n.*for i in range\(3\)\n.*nothing was launched"):
        cell_program("%%ranks cfg", "x = 1\nfor i in range(3)\n    pass\n", {})


def test_free_names_are_what_the_cell_reads_and_never_binds():
    src = ("import numpy as np\nfrom mindspore import nn\nk = steps * 2\n"
           "def f(x):\n    global done\n    done = x + scale\n    return np.sum(x)\n"
           "class C(nn.Cell):\n    def construct(self, x):\n        return x * factor\n"
           "for i in range(k):\n    print(i, cfg)\n")
    assert free_names(src) == {"steps", "scale", "factor", "cfg"}


def test_notebook_values_go_by_value_and_modules_by_name(tmp_path):
    import numpy

    ns = {"scale": 3.0, "table": {"a": [1, 2]}, "np": numpy, "unused": object()}
    program = cell_program("%%ranks cfg", "y = np.ones(2) * scale\nz = table['a']\nprint(cfg)\n", ns, {"cfg"})
    assert set(program.values) == {"scale", "table"} and program.modules == {"np": "numpy"}
    for name, data in program.files().items():
        (tmp_path / name).write_bytes(data)
    assert (tmp_path / CELL_FILE).read_text().startswith("# %%ranks")
    values = notebook_values(tmp_path)
    assert values["scale"] == 3.0 and values["table"] == {"a": [1, 2]} and values["np"] is numpy


def test_an_undefined_name_is_named_before_launch():
    with pytest.raises(CellError, match="reads stepz, defined neither"):
        cell_program("%%ranks cfg", "for i in range(stepz):\n    pass\n", {"steps": 3}, {"cfg"})


def test_an_unpicklable_value_is_named_before_launch():
    with pytest.raises(CellError, match=r"lock \(lock: cannot pickle"):
        cell_program("%%ranks cfg", "with lock:\n    pass\n", {"lock": threading.Lock()}, {"cfg"})


def test_a_function_or_class_defined_in_the_notebook_must_move_into_the_cell():
    main = type(sys)("__main__")
    exec("def helper(x):\n    return x\nclass Net:\n    pass\n", main.__dict__)
    for name in ("helper", "Net"):
        with pytest.raises(CellError, match=rf"{name} \(a .* defined in the notebook.*MindSpore needs its source"):
            cell_program("%%ranks cfg", f"{name}(1)\n", {name: main.__dict__[name]}, {"cfg"})


def test_the_magic_line_is_read_or_refused_with_its_usage():
    args = parse_magic_line("cfg --out first --name smoke")
    assert (args.cfg, args.out, args.name) == ("cfg", "first", "smoke")
    assert parse_magic_line("job").out == "cell_result" and not parse_magic_line("job").same_graph
    assert parse_magic_line("ch.base --name x --same-graph").same_graph
    args = parse_magic_line("ch.code_cfg.replace(micro_batch=2, accumulation_steps=8) --out x")
    assert (args.cfg, args.out) == ("ch.code_cfg.replace(micro_batch=2, accumulation_steps=8)", "x")
    for bad in ("", "--out x", "cfg --outt x", "cfg --out 1x", "cfg --name 'x"):
        with pytest.raises(CellError):
            parse_magic_line(bad)


def test_then_names_a_follow_on_in_the_notebook_or_none():
    from helpers.cells.magic import follow_on
    from helpers.cells.run import FollowOn, follow_on_config
    from helpers.core.metrics import THEN_ENV
    from helpers.core.config import JobConfig

    assert parse_magic_line("base --then experiment").then == "experiment" and parse_magic_line("b").then is None
    job = FollowOn(JobConfig(world_size=8, global_batch=64, name="samplers", phase_samplers=["contiguous"]))
    assert follow_on("experiment", {"experiment": job}, "l") is job and follow_on("x", {"x": None}, "l") is None
    assert follow_on(None, {}, "l") is None
    for name, ns in (("missing", {}), ("x", {"x": 3}), ("a.b", {"a.b": job})):
        with pytest.raises(CellError, match="--then"):
            follow_on(name, ns, "l")
    cell = JobConfig(world_size=8, global_batch=64, name="code", env={"A": "1"})
    launched = follow_on_config(cell, job)
    assert (launched.name, launched.phase_samplers, launched.env) == ("code", ("contiguous",), {"A": "1", THEN_ENV: "1"})
    with pytest.raises(CellError, match="world_size"):
        follow_on_config(cell.replace(world_size=4, global_batch=32), job)


def test_report_writes_step_records_and_finish_keeps_plain_values(tmp_path):
    out = MetricsWriter(tmp_path, 2)
    reporting.attach(out, host="node1")
    assert read_records(metrics_path(tmp_path, 2)) == [], "no record before the cell's first report (init() first)"
    reporting.report(step=0, loss=np.float32(2.5), classes=np.array([1, 2]))
    reporting.report(step=1, loss=None, data_s=0.01)
    reporting.finish({"w": np.arange(3), "n": np.int64(4), 5: "x"})
    out.close()
    records = read_records(metrics_path(tmp_path, 2))
    assert records[0]["event"] == "start" and records[0]["host"] == "node1"
    assert [r["event"] for r in records].count("start") == 1
    steps = [r for r in records if r["event"] == "step"]
    assert [s["step"] for s in steps] == [0, 1] and steps[0]["loss"] == 2.5 and steps[0]["classes"] == [1, 2]
    assert steps[1]["loss"] is None and steps[1]["data_s"] == 0.01 and all(s["step_s"] >= 0 for s in steps)
    assert reporting.result() == {"w": [0, 1, 2], "n": 4, "5": "x"}
    json.dumps(reporting.result())


def test_report_outside_a_job_does_nothing():
    reporting._state["out"] = None
    reporting.report(step=0, loss=1.0)


def test_a_ranks_error_names_the_cell_line_and_shows_only_the_cells_frames(tmp_path):
    cell = tmp_path / CELL_FILE
    cell.write_text("# %%ranks cfg\ndef f(x):\n    return 1 / x\n\nf(0)\n")
    try:
        exec(compile(cell.read_text(), str(cell), "exec"), {})
    except ZeroDivisionError as exc:
        error, tb = failure_text(exc, str(cell))
    assert error == "ZeroDivisionError: division by zero (cell line 3: return 1 / x)"
    assert f'"{cell}", line 5' in tb and f'"{cell}", line 3' in tb and "test_cells.py" not in tb


def test_the_returns_table_lists_each_rank_with_a_column_per_key():
    class Result:
        returns, wall_s = {0: {"a": 1, "w": 616.1182250976562}, 1: {"a": 2, "w": [1, 2]}}, 3.0
    text = returns_table(Result(), "first")
    assert "`first.returns`" in text and "| rank | a | w |" in text
    assert "| 0 | 1 | 616.118225 |" in text and "| 1 | 2 | [1, 2] |" in text
    Result.returns = {0: {"max |g|": 1.0}}
    assert "| rank | max \\|g\\| |" in returns_table(Result(), "x"), "a | in a key would split the column"
    Result.returns = {0: 5, 1: {"a": 1}}
    assert "| rank | result |" in returns_table(Result(), "x") and "| 1 | {'a': 1} |" in returns_table(Result(), "x")


def test_values_file_is_a_pickle_of_values_and_modules():
    program = cell_program("%%ranks cfg", "x = k\n", {"k": 1}, {"cfg"})
    packed = pickle.loads(program.files()[VALUES_FILE])
    assert pickle.loads(packed["values"]["k"]) == 1 and packed["modules"] == {}


def test_the_heartbeat_and_start_record_begin_when_the_cells_init_returns(tmp_path, monkeypatch):
    """A Python thread alive during init() slowed msrun's registration 4-8x: the runner starts the heartbeat from
    a wrapper of ``mindspore.communication.init``, which the cell's own ``from ... import init`` then gets."""
    from mindspore import communication
    from mindspore.communication import management

    from helpers.cells.rank_main import after_init
    from helpers.train.heartbeat import Heartbeat, beat_path

    calls = []
    monkeypatch.setattr(management, "init", lambda *a, **k: calls.append(a) or "joined")
    monkeypatch.setattr(communication, "init", management.init)
    beat = Heartbeat(tmp_path, 3, every_s=60)
    after_init(beat.start)
    assert not beat_path(tmp_path, 3).exists(), "no beat before init() returns"
    from mindspore.communication import init
    assert init("mccl") == "joined" and calls == [("mccl",)]
    assert beat_path(tmp_path, 3).exists()
    init()                                  # a second init() does not start a second thread
    beat.stop()


def test_a_cell_job_can_be_launched_again_from_its_run_folder(tmp_path):
    """``cell_job``: the same program (cell file and notebook values) for another launch, e.g. on two nodes."""
    from helpers.cells.run import RANK_MAIN, cell_config, cell_job
    from helpers.core.config import job_config
    from helpers.job.launch import JobResult

    (tmp_path / CELL_FILE).write_text("# %%ranks cfg\nx = 1\n")
    (tmp_path / VALUES_FILE).write_bytes(b"values")
    cfg = job_config("ci")
    job = cell_job(JobResult(tmp_path, cfg, 0, 1.0))
    assert job["worker"] == (*RANK_MAIN, CELL_FILE, "cfg")
    assert job["files"] == {CELL_FILE: b"# %%ranks cfg\nx = 1\n", VALUES_FILE: b"values"}
    again = cell_config(cfg)
    assert again.compile_cache is False and again.data_dir.startswith("/")


def test_a_cells_graphs_are_cached_in_a_folder_of_its_own_unless_it_uses_jit():
    """``cell_config``: the cache folder changes with the cell's text and values; a ``jit`` cell compiles afresh
    (MindSpore's cache loaded a ``@ms.jit`` step without its closure's parameters: NaN losses)."""
    from helpers.cells.program import uses_jit
    from helpers.cells.run import cell_config
    from helpers.core.config import job_config
    from helpers.job.compile_cache import CACHE_ENV

    cfg = job_config("ci")
    files = {CELL_FILE: b"# %%ranks cfg\nx = 1\n", VALUES_FILE: b"values"}
    edited = {**files, CELL_FILE: b"# %%ranks cfg\nx = 2\n"}
    folder = cell_config(cfg, files).env[CACHE_ENV]
    assert cell_config(cfg, files).compile_cache and folder == cell_config(cfg, dict(files)).env[CACHE_ENV]
    assert folder != cell_config(cfg, edited).env[CACHE_ENV]
    assert folder != cell_config(cfg, {**files, VALUES_FILE: b"other"}).env[CACHE_ENV]
    assert not cell_config(cfg.replace(compile_cache=False), files).compile_cache
    for text in ("@ms.jit\ndef f(): pass", "from mindspore import jit", "step = mindspore.jit(f)"):
        assert uses_jit(text), text
        assert not cell_config(cfg, {**files, CELL_FILE: text.encode()}).compile_cache
    assert not uses_jit("class Step(nn.Cell):\n    def construct(self, x):\n        return x  # jit in a comment")


def test_a_follow_on_starts_without_the_cells_parallel_settings_and_objects(tmp_path, monkeypatch):
    import sys

    import mindspore as ms

    from helpers.cells import rank_main
    from helpers.cells.program import MODULE_NAME
    from helpers.train import worker

    seen = {}
    monkeypatch.setattr(worker, "run_task", lambda *a: seen.update(
        fusion=ms.get_auto_parallel_context("comm_fusion")["allreduce"], mode=ms.get_auto_parallel_context(
            "parallel_mode"), cell=MODULE_NAME in sys.modules, graph=ms.get_context("mode")) or {"trained": True})
    module = type(sys)(MODULE_NAME)
    module.net = held = [1, 2, 3]
    monkeypatch.setitem(sys.modules, MODULE_NAME, module)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 comm_fusion={"allreduce": {"mode": "size", "config": 7}})
    ms.set_context(mode=ms.PYNATIVE_MODE)                       # a PyNative cell (chapter 03's hybrid step)
    try:
        rank_main.release_cell()
        out = MetricsWriter(tmp_path, 0)
        assert rank_main.follow_on(JobConfig(), tmp_path, 0, 1, out) == {"trained": True}
    finally:
        ms.reset_auto_parallel_context()
    assert seen == {"fusion": {"mode": "auto", "config": None}, "mode": "stand_alone", "cell": False,
                    "graph": ms.GRAPH_MODE}
    assert not hasattr(module, "net") and held == [1, 2, 3]
