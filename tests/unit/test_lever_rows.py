"""Chapter 02's levers table: fits of measured runs, planner rows, and the two set side by side."""

from __future__ import annotations

import pytest

from helpers.core.config import job_config
from helpers.topics import memory_levers as topic


def _run(batch, peak, step_s, losses=(2.0, 1.9)):
    return {"batch": batch, "steady_peak_rss_mb": peak, "step_s": step_s, "losses": list(losses)}


def _measured(conv_impl="im2col"):
    runs = {"plain": [_run(32, 500 + 3 * 32, 1.0), _run(64, 500 + 3 * 64, 2.0)],
            "recompute_block": [_run(32, 520 + 4 * 32, 1.5), _run(64, 520 + 4 * 64, 2.6)],
            "amp_o2": [_run(32, 510 + 2.5 * 32, 1.2, (2.0, 1.8)), _run(64, 510 + 2.5 * 64, 2.4)]}
    return {"model": {"arch": "resnet18", "width": 0.125, "stem": "small", "image_size": 32},
            "conv_impl": conv_impl, "levers": topic.fit_levers(runs)}


def test_fit_levers_slopes_and_ratios_against_plain():
    fit = _measured()["levers"]
    assert fit["plain"]["slope_mib_per_image"] == pytest.approx(3.0)
    rec = fit["recompute_block"]
    assert rec["slope_mib_per_image"] == pytest.approx(4.0) and rec["intercept_mb"] == pytest.approx(520)
    assert rec["slope_ratio_vs_plain"] == pytest.approx(4 / 3)
    assert rec["step_time_ratio_vs_plain"] == pytest.approx(1.4)          # median of 1.5 and 1.3
    assert rec["max_loss_diff_vs_plain"] == 0.0
    assert fit["amp_o2"]["max_loss_diff_vs_plain"] == pytest.approx(0.1)
    assert "slope_ratio_vs_plain" not in fit["plain"]


def test_lever_rows_set_the_planner_against_the_measured_slope():
    cfg = job_config("ci", conv_impl="im2col")
    measured = _measured()
    rows = {r.lever: r for r in topic.lever_rows(cfg, measured)}
    plan = topic.planned_per_image("resnet18", 32, 10, 0.125, "small", "im2col")
    plain = rows["plain step (fp32)"]
    assert plain.planned == plan["plain"] and plain.measured == pytest.approx(3.0)
    assert plain.ratio == pytest.approx(plan["plain"] / 3.0) and plain.where == "CPU: measured"
    rec = rows["recompute each residual block (CPU's order)"]
    assert rec.planned == plan["recompute_block_eager"] and rec.time_ratio == pytest.approx(1.4)
    once = rows["recompute each residual block (one at a time)"]
    assert once.measured is None and once.planned == plan["recompute_block_interleaved"] < plain.planned
    assert rows["recompute each stage (CPU's order)"].measured is None          # not in this measurement
    amp = rows["AMP O2"]
    assert amp.measured == pytest.approx(2.5) and amp.planned == plan["amp_o2"] < plain.planned
    assert "float32 between Casts" in amp.where
    shards = [r for r in rows.values() if r.unit == "MiB/rank"]
    assert [r.lever for r in shards] == ["optimizer not sharded", "optimizer sharded over 2 ranks (level1)",
                                         "optimizer sharded over 8 ranks (level1)"]
    assert shards[2].planned < shards[0].planned and all(r.measured is None for r in shards)
    assert "Invalid communication backend: CPU" in shards[1].where


def test_lever_rows_plan_only_and_refuse_another_models_measurement():
    rows = topic.lever_rows(job_config("gpu8"))
    assert all(r.measured is None and r.ratio is None for r in rows)
    assert rows[0].where == "planned" and rows[0].planned == pytest.approx(80.4, abs=0.1)   # ResNet-50, 224 px
    with pytest.raises(ValueError, match="another model"):
        topic.lever_rows(job_config("cpu"), _measured())
