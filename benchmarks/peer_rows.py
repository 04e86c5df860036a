"""RESULTS.md rows that compare the course's worker with its peers: Model.train, mindcv and PyTorch's CPU step."""

from __future__ import annotations

from benchmarks.row_kit import Rows, _best, get_in
from benchmarks.vs_pytorch import GOAL as PYTORCH_GOAL


def _loop_share(w: dict | None) -> str:
    """The note's reason for a ratio near 1: the worker's own host time per step, from ``worker_overhead``."""
    if not w or not w.get("wall_ms"):
        return ""
    return (f"; our loop's host time outside the compiled step is {w['host_ms']:.1f} ms of a {w['wall_ms']:.0f} ms "
            f"step on one rank alone at batch {w.get('batch')} ({w['host_ms'] / w['wall_ms']:.1%}, "
            "results/worker_overhead.json; less in the 8-rank job's slower step): both sides run the same "
            "compiled graph, so the loop cannot win 5 %")


def comparison_rows(rows: Rows) -> None:
    """Against the tools people use instead (``Model.train``, mindcv), and scaling on one machine."""
    d = rows.results.get("vs_model_train")
    if d:
        note = (f"{d.get('preset')} preset, {d.get('world_size')} ranks, global batch {d.get('global_batch')}; "
                "Model.train as the tutorials write it, without the comm fusion our worker uses: not equal terms")
        rows.add("our worker / Model.train (DATA_PARALLEL), img/s", d.get("ratio"), "", "vs_model_train",
                 note + _best(get_in(d, "ratios_best_step", "ours_over_model_train")))
        v = get_in(d, "ratios", "ours_over_model_train_fused")
        if v is not None:
            rows.add("our worker / Model.train with the preset's comm fusion, img/s", v, ">= 1.05", "vs_model_train",
                     "same fusion on both sides" + _best(get_in(d, "ratios_best_step", "ours_over_model_train_fused"))
                     + _loop_share(rows.results.get("worker_overhead")))
        v = get_in(d, "ratios", "ours_over_model_train_sink")
        if v is not None:
            rows.add("our worker / Model.train(dataset_sink_mode=True), img/s", v, "", "vs_model_train",
                     "fused; on CPU Model.train runs the same non-sink loop as the row above, so the gap between "
                     "the two rows is this run's noise" + _best(get_in(d, "ratios_best_step", "ours_over_model_train_sink")))
    else:
        rows.add("our worker / Model.train with the preset's comm fusion, img/s", None, ">= 1.05", "vs_model_train")
    d = rows.results.get("vs_mindcv")
    note = ""
    if d:
        note = d.get("error", "")[:160] or ("full ResNet-18 both sides (mindcv has no width multiplier)"
                                            + _best(d.get("ratio_best_step")))
    equal = bool((d or {}).get("equal_terms"))    # a run that gave mindcv its best settings says so
    if d and equal:
        note += ("; equal terms: ours with nn.Conv2d convolutions as mindcv's model, mindcv given the same comm "
                 "fusion as ours")
    elif d and not d.get("error"):
        note += "; not equal terms (mindcv without the comm fusion our worker uses), so no goal is judged"
    rows.add("our worker / mindcv trainer, img/s", (d or {}).get("ratio"), ">= 1.05" if equal or not d else "",
             "vs_mindcv", note + (_loop_share(rows.results.get("worker_overhead")) if equal else ""))
    for key, what, why in (
            ("ours_over_mindcv_as_train_py", "our worker / mindcv as its train.py runs (no comm fusion), img/s",
             "both nn.Conv2d; not equal terms: mindcv without fusion"),
            ("ours_im2col_over_mindcv_fused", "our worker with the preset's im2col convolution / mindcv fused, img/s",
             "not equal terms: mindcv's model has no im2col convolution")):
        if (d or {}).get(key) is not None:
            rows.add(what, d[key], "", "vs_mindcv", why)
    d = rows.results.get("scaling")
    rows.add("8 ranks / 1 process (all cores), img/s at the same global batch", (d or {}).get("efficiency"),
             ">= 0.9", "scaling", f"{d.get('preset')} preset" + _best(d.get("efficiency_best_step")) if d else "")


def _breakdown(b: dict | None) -> str:
    """The batch-128 row's reason: where MindSpore's step goes, from ``conv_breakdown`` (its CPU profiler)."""
    parts = (b or {}).get("parts_ms") or {}
    if not parts:
        return ""
    return (f"; MindSpore's kernel time per step (results/conv_breakdown.json): unfold {parts.get('unfold', 0):.0f} ms "
            f"and fold {parts.get('fold', 0):.0f} ms of {b['kernel_ms_per_step']:.0f} ms write and read the "
            f"columns a direct convolution never makes; its matmuls {parts.get('matmul', 0):.0f} ms")


def pytorch_rows(rows: Rows) -> None:
    """One CPU train step of the course's ResNet-18 layout, MindSpore (im2col) / PyTorch (``vs_pytorch``)."""
    cases = get_in(rows.results, "vs_pytorch", "cases") or {}
    if not cases:
        rows.add("CPU train step, MindSpore / PyTorch (same ResNet-18 layout, 1 thread)", None, f"<= {PYTORCH_GOAL:g}",
                 "vs_pytorch")
    for name, c in cases.items():
        sums = c.get("summary") or {}
        loads = [x for v in sums.values() if isinstance(v, dict) for x in v.get("loads_1min") or []
                 if x is not None]
        load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else None
        what = f"CPU train step ({name}: ResNet-18 x{c.get('width')}, batch {c.get('batch')}, 1 thread)"
        ms, pt = sums.get("mindspore") or {}, sums.get("pytorch") or {}
        note = (f"median s/step {ms['median_s']:.3g} (runs {ms.get('min_s', 0):.3g}-"
                f"{ms.get('max_s', 0):.3g}) vs {pt['median_s']:.3g} ({pt.get('min_s', 0):.3g}-"
                f"{pt.get('max_s', 0):.3g})" if ms.get("median_s") and pt.get("median_s") else "")
        if c.get("ratio_best") is not None:
            note += f"; fastest run / fastest run: {c['ratio_best']:.2f}x"
        if name == "cpu_b128":
            note += _breakdown(rows.results.get("conv_breakdown"))
        rows.add(f"{what}: MindSpore im2col / PyTorch", c.get("ratio"), f"<= {PYTORCH_GOAL:g}", "vs_pytorch", note,
                 load=load)
        if c.get("folded_over_per_image"):
            rows.add(f"{what}: im2col with deep layers over the whole batch / per image", c["folded_over_per_image"],
                     "", "vs_pytorch", "step time, alternated in the same run (helpers.core.im2col_shape)", load=load)
        for key, v in (c.get("ratios") or {}).items():   # the variants: against PyTorch, and channels-last
            if key != "mindspore_over_pytorch" and (key.endswith("_over_pytorch")
                                                    or key.startswith("mindspore_over_")):
                rows.add(f"{what}: {key.replace('_over_', ' / ')}", v, "", "vs_pytorch", load=load)
