"""benchmarks.vs_pytorch without torch or MindSpore: the cases, the torch command line, the summaries."""

import ast
from pathlib import Path

import pytest

from benchmarks import vs_pytorch as vp
from helpers.core.config import job_config
from helpers.core.resnet_layout import ARCHS, stage_widths


def test_cases_cover_the_ci_and_cpu_models_and_batch_128():
    cases = vp.cases()
    assert set(cases) == {"ci", "cpu", "cpu_b128"}
    for name, preset in (("ci", "ci"), ("cpu", "cpu")):
        cfg = job_config(preset)
        assert cases[name]["width"] == cfg.width
        assert cases[name]["batch"] == cfg.batch_per_rank
        assert cases[name]["image_size"] == cfg.image_size
    assert cases["cpu_b128"]["batch"] == 128 and cases["cpu_b128"]["width"] == job_config("cpu").width
    assert (cases["ci"]["batch"], cases["cpu"]["batch"]) == (8, 16)


def test_widths_passed_to_torch_are_the_course_layout():
    for case in vp.cases().values():
        assert case["widths"] == stage_widths(case["width"])
        assert tuple(case["depths"]) == ARCHS[vp.ARCH][1]
    assert vp.cases()["ci"]["widths"] == [8, 16, 32, 64]
    assert vp.cases()["cpu"]["widths"] == [16, 32, 64, 128]


def test_torch_command_carries_the_case():
    case = vp.cases()["cpu"]
    cmd = vp.torch_command("/x/python", case, 1, 4)
    assert cmd[:2] == ["/x/python", str(vp.TORCH_STEP)]
    i = cmd.index("--widths")
    assert cmd[i + 1:i + 5] == ["16", "32", "64", "128"]
    assert cmd[cmd.index("--batch") + 1] == "16" and cmd[cmd.index("--threads") + 1] == "1"
    assert cmd[cmd.index("--steps") + 1] == "4" and cmd[cmd.index("--classes") + 1] == str(vp.CLASSES)
    assert "--channels-last" not in cmd
    assert vp.torch_command("p", case, 1, 4, channels_last=True)[-1] == "--channels-last"


def test_torch_step_is_standalone():
    tree = ast.parse(Path(vp.TORCH_STEP).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not names & {"mindspore", "helpers", "benchmarks"}


def test_summary_takes_median_min_max_of_run_medians():
    runs = [{"median_s": 0.3, "load_avg_1min": 2.0}, {"median_s": 0.1, "load_avg_1min": 3.0},
            {"median_s": 0.2, "load_avg_1min": None}]
    s = vp.summary(runs)
    assert (s["median_s"], s["min_s"], s["max_s"], s["n"]) == (0.2, 0.1, 0.3, 3)
    assert s["loads_1min"] == [2.0, 3.0, None]
    assert vp.summary([]) is None


def test_ratios_are_mindspore_over_each_pytorch_reference():
    sums = {"mindspore": {"median_s": 0.3}, "mindspore_native": {"median_s": 0.6},
            "pytorch": {"median_s": 0.1}, "pytorch_channels_last": {"median_s": 0.05},
            "mindspore_dispatch_threads_1": None}
    r = vp.ratios(sums)
    assert r["mindspore_over_pytorch"] == pytest.approx(3.0)
    assert r["mindspore_native_over_pytorch"] == pytest.approx(6.0)
    assert r["mindspore_over_pytorch_channels_last"] == pytest.approx(6.0)
    assert not any(k.startswith("pytorch") for k in r)
    assert vp.ratios({"mindspore": {"median_s": 1.0}}) == {}


def test_alternate_runs_a_b_a_b_and_records_a_failure_once():
    order = []

    def ok(name):
        def fn():
            order.append(name)
            return {"median_s": 1.0, "wall_s": 0.0, "load_avg_1min": 0.0}
        return fn

    def bad():
        order.append("bad")
        raise RuntimeError("boom")

    runs = vp.alternate({"a": ok("a"), "b": ok("b"), "bad": bad}, 2)
    assert order == ["a", "b", "bad", "a", "b"]
    assert len(runs["a"]) == 2 and runs["bad"] == [] and "boom" in runs["_failed"]["bad"]


def test_given_torch_python_is_used_as_is(tmp_path):
    assert vp.ensure_torch_env(str(tmp_path / "py")) == str(tmp_path / "py")
    assert not (tmp_path / "py").exists()


def test_table_rows_judge_the_ratio_against_1_5x():
    from benchmarks import result_rows as table

    summary = {"mindspore": {"median_s": 0.05, "loads_1min": [1.0]},
               "pytorch": {"median_s": 0.02, "loads_1min": [2.0]}}
    case = {"width": 0.125, "batch": 8, "ratio": 2.5, "summary": summary}
    rows = table.Rows({"vs_pytorch": {"cases": {"ci": case}}})
    table.pytorch_rows(rows)
    assert rows and rows[0].measured == pytest.approx(2.5) and rows[0].goal == "<= 1.5"


def test_best_ratio_is_fastest_run_over_fastest_run():
    sums = {"mindspore": {"median_s": 0.4, "min_s": 0.2}, "pytorch": {"median_s": 0.1, "min_s": 0.08}}
    assert vp.best_ratio(sums) == pytest.approx(2.5)
    assert vp.best_ratio({"mindspore": sums["mindspore"], "pytorch": None}) is None


def test_conv_breakdown_sums_each_op_types_kernel_time_per_step(tmp_path):
    import json

    from benchmarks.conv_breakdown import per_type_ms

    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "CPU OP"}},
          {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "Host"}},
          {"ph": "X", "pid": 1, "name": "Default/network/conv1-Im2ColConv2d/Im2Col-op3", "ts": 0, "dur": 3000},
          {"ph": "X", "pid": 1, "name": "Default/network/conv1-Im2ColConv2d/Im2Col-op3", "ts": 9000, "dur": 1000},
          {"ph": "X", "pid": 1, "name": "Gradients/Default/Col2Im-op9", "ts": 4000, "dur": 2000},
          {"ph": "X", "pid": 2, "name": "step", "ts": 0, "dur": 99000}]
    (tmp_path / "rank" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (tmp_path / "rank" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(ev))
    assert per_type_ms(tmp_path, steps=2) == {"Im2Col": 2.0, "Col2Im": 1.0}


def test_the_b128_row_takes_its_reason_from_the_breakdown():
    from benchmarks import result_rows as table

    summary = {"mindspore": {"median_s": 0.8}, "pytorch": {"median_s": 0.4}}
    results = {"vs_pytorch": {"cases": {"cpu_b128": {"width": 0.25, "batch": 128, "ratio": 2.0, "summary": summary}}},
               "conv_breakdown": {"kernel_ms_per_step": 780.0, "parts_ms": {"unfold": 200.0, "fold": 190.0,
                                                                             "matmul": 220.0}}}
    rows = table.Rows(results)
    table.pytorch_rows(rows)
    assert "unfold 200 ms and fold 190 ms of 780 ms" in rows[0].note and "matmuls 220 ms" in rows[0].note
