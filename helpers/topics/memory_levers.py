"""Chapter 02's memory levers beyond accumulation: measured where MindSpore runs them on CPU, planned everywhere.

Recomputation and AMP O2 run here, so ``measure_levers`` takes each one's peak RSS and step time in fresh single
processes at several batches (``helpers.topics.memory_runs.measure_step_memory``) and fits MiB per image;
optimizer-state sharding needs SEMI_AUTO/AUTO_PARALLEL, which MindSpore refuses on CPU, so it is planned only
(``helpers.core.memory_levers``). ``lever_rows`` sets planner against measurement, one row per lever.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from helpers.core.memory_levers import (CPU_FP32_KERNELS, amp_bytes_per_image, recompute_elements_per_image,
                                        sharded_state)
from helpers.core.memory_planner import LABEL_BYTES, estimate, layer_walk

MIB = 2 ** 20
# lever -> what measure_step_memory is given for it
LEVERS = {"plain": {}, "recompute_block": {"recompute": "block"}, "recompute_stage": {"recompute": "stage"},
          "amp_o2": {"amp_level": "O2"}}
SHARDS = (1, 2, 8)
WHERE_CPU_RECOMPUTE = ("CPU: runs, but every recomputed kernel runs between the loss and the first backward "
                       "kernel, so all of them are live at once")
WHERE_PLANNED_RECOMPUTE = "planned: each cell recomputed just before its own backward (recomputation's design)"
WHERE_CPU_AMP = (f"CPU: runs and keeps float16 tensors, but {', '.join(CPU_FP32_KERNELS)} run float32 between "
                 "Casts: those float32 copies, not counted by the planner, raise the peak")
# What MindSpore 2.10 says on CPU (one process, set_auto_parallel_context(enable_parallel_optimizer=True), a Momentum
# step): under SEMI_AUTO/AUTO_PARALLEL, and under DATA_PARALLEL
SHARDS_REFUSED = ("Invalid communication backend: CPU for semi_auto_parallel/auto_parallel mode, currently only "
                  "support Ascend/GPU backend.",
                  'For "Optimizer", parallel optimizer only supports "Ascend" in data parallel mode, but got CPU.')
WHERE_SHARDS = f"planned: refused on CPU ({SHARDS_REFUSED[0]!r})"


class LeverRow(NamedTuple):
    """One row of the levers table: planner and measurement in ``unit``, their ratio, step time against plain."""

    lever: str
    unit: str              # "MiB/image" (activations) or "MiB/rank" (weights, gradients, optimizer state)
    planned: float
    measured: float | None
    ratio: float | None    # planned / measured
    time_ratio: float | None   # measured step time / the plain step's
    where: str


def measure_levers(batches=(32, 64, 128), levers=tuple(LEVERS), conv_impl: str = "im2col", steps: int = 2,
                   arch: str = "resnet18", width: float = 0.125, stem: str = "small", image_size: int = 32) -> dict:
    """Each lever at each batch in its own fresh process (levers alternate within a batch, so load hits all alike),
    then ``fit_levers``; the model defaults to the ci preset's."""
    from helpers.topics.memory_runs import measure_step_memory

    model = dict(arch=arch, width=width, stem=stem, image_size=image_size)
    runs = {name: [] for name in levers}
    for b in batches:
        for name in levers:
            runs[name].append(measure_step_memory(int(b), conv_impl=conv_impl, steps=steps, **LEVERS[name], **model))
    return {"model": model, "conv_impl": conv_impl, "steps": steps, "levers": fit_levers(runs)}


def fit_levers(runs: dict[str, list[dict]]) -> dict:
    """Per lever: batches, steady peak RSS (MiB), step times, the fitted MiB per image, and against ``plain`` (if
    measured): slope ratio, median step-time ratio over the batches, largest loss difference (a lever that only
    trades memory keeps the losses). A run's step time is its fastest timed step: the cores are shared."""
    from helpers.topics.memory_runs import fit_slope

    out = {}
    for name, rows in runs.items():
        xs = [r["batch"] for r in rows]
        ys = [r["steady_peak_rss_mb"] for r in rows]
        slope, intercept = fit_slope(xs, ys) if len(set(xs)) > 1 else (float("nan"), float("nan"))
        out[name] = {"batches": xs, "steady_peak_rss_mb": ys,
                     "step_s": [min(r.get("step_times_s") or [r["step_s"]]) for r in rows],
                     "losses": [r["losses"] for r in rows], "slope_mib_per_image": slope, "intercept_mb": intercept}
    base = out.get("plain")
    for name, d in out.items():
        if base is None or name == "plain":
            continue
        d["slope_ratio_vs_plain"] = d["slope_mib_per_image"] / base["slope_mib_per_image"]
        d["step_time_ratio_vs_plain"] = float(np.median(np.divide(d["step_s"], base["step_s"])))
        d["max_loss_diff_vs_plain"] = float(max(np.max(np.abs(np.subtract(a, b)))
                                                for a, b in zip(d["losses"], base["losses"])))
    return out


def planned_per_image(arch: str, image_size: int, num_classes: int, width: float, stem: str,
                      conv_impl: str) -> dict[str, float]:
    """The planner's activation MiB per image for each lever: plain fp32, recomputation per block and per stage in
    both orders (``eager`` is what CPU ran), AMP O2."""
    rows = layer_walk(arch, image_size, num_classes, width, stem, conv_impl)
    plain = estimate(arch, 1, image_size, num_classes, width, stem, conv_impl=conv_impl).activation_bytes_per_image
    out = {"plain": plain / MIB}
    for level in ("block", "stage"):
        for order in ("eager", "interleaved"):
            peak = recompute_elements_per_image(rows, level, order)["peak"]
            out[f"recompute_{level}_{order}"] = (peak * 4 + LABEL_BYTES) / MIB
    out["amp_o2"] = amp_bytes_per_image(rows, "O2") / MIB
    return out


def planned_shards(arch: str, num_classes: int, width: float, stem: str, shards=SHARDS, level: str = "level1",
                   precision: str = "fp32") -> dict[str, dict]:
    """Per shard count: the planner's weights, gathered copies, gradients, optimizer state and total (MiB per rank,
    Momentum) under ``enable_parallel_optimizer`` at ``level``."""
    rows = layer_walk(arch, 64, num_classes, width, stem)
    out = {}
    for s in shards:
        st = sharded_state(rows, s, level, "momentum", precision)
        out[str(s)] = {k: (v / MIB if k in ("params", "gathered", "grads", "optimizer", "total") else v)
                       for k, v in st.items()}
    return out


def _conv_impl(cfg, measured) -> str:
    if measured:
        return measured["conv_impl"]
    return cfg.conv_impl if cfg.conv_impl in ("native", "im2col") else "native"


def _check_same_model(cfg, measured):
    want = {"arch": cfg.arch, "width": cfg.width, "stem": cfg.stem, "image_size": cfg.image_size}
    have = measured.get("model", {})
    wrong = {k: (v, have.get(k)) for k, v in want.items() if have.get(k) != v}
    if wrong:
        raise ValueError(f"measured is of another model than cfg (cfg, measured): {wrong}")


def lever_rows(cfg, measured: dict | None = None) -> list[LeverRow]:
    """The levers table for ``cfg``'s model: activations per image (plain, recomputation, AMP O2) with the measured
    slope where ``measured`` (``measure_levers``'s dict, same model) has it, then weights + gradients + optimizer
    state per rank at ``SHARDS`` optimizer shards (planned only)."""
    from helpers.job.host_memory import num_classes

    if measured:
        _check_same_model(cfg, measured)
    classes = num_classes(cfg)
    plan = planned_per_image(cfg.arch, cfg.image_size, classes, cfg.width, cfg.stem, _conv_impl(cfg, measured))
    got = (measured or {}).get("levers", {})

    def row(lever, key, plan_key, where):
        m = got.get(key, {}) if key else {}
        slope = m.get("slope_mib_per_image")
        ratio = plan[plan_key] / slope if slope else None
        return LeverRow(lever, "MiB/image", plan[plan_key], slope, ratio, m.get("step_time_ratio_vs_plain"), where)

    rows = [row("plain step (fp32)", "plain", "plain", "CPU: measured" if got.get("plain") else "planned")]
    for level, cell in (("block", "each residual block"), ("stage", "each stage")):
        rows.append(row(f"recompute {cell} (CPU's order)", f"recompute_{level}", f"recompute_{level}_eager",
                        WHERE_CPU_RECOMPUTE))
        rows.append(row(f"recompute {cell} (one at a time)", None, f"recompute_{level}_interleaved",
                        WHERE_PLANNED_RECOMPUTE))
    rows.append(row("AMP O2", "amp_o2", "amp_o2", WHERE_CPU_AMP if got.get("amp_o2") else
                    "planned: float16 except BatchNorm's input and the loss"))
    for s, st in planned_shards(cfg.arch, classes, cfg.width, cfg.stem).items():
        lever = "optimizer not sharded" if s == "1" else f"optimizer sharded over {s} ranks (level1)"
        where = "plain data parallelism: every rank holds it all" if s == "1" else WHERE_SHARDS
        rows.append(LeverRow(lever, "MiB/rank", st["total"], None, None, None, where))
    return rows


RESULTS_FILE = "benchmarks/results/memory_levers.json"    # ``python -m benchmarks memory_levers``
SHOWN = ("lever", "planned", "measured", "step time vs plain")   # the chapter's columns; unit, where: its appendix


def short_lever(name: str) -> str:
    """A lever's name as the chapter's table shows it ("recompute blocks (CPU's order)")."""
    for long, short in (("each residual block", "blocks"), ("each stage", "stages"), (" (level1)", ""),
                        ("sharded over", "over")):
        name = name.replace(long, short)
    return name


def shown_row(r: LeverRow) -> tuple:
    """One row of the chapter's table: short name, planned, measured and step time against plain (— if none)."""
    num = lambda v, unit="": "—" if v is None else f"{v:.3g}{unit}"     # noqa: E731
    return short_lever(r.lever), num(r.planned), num(r.measured), num(r.time_ratio, "x")


def show_levers(preset: str) -> dict:
    """Chapter 02's levers table: at ``ci``/``cpu`` the benchmark's measured model (``RESULTS_FILE``: one process,
    im2col) beside the planner, on cards the preset's model planned; returns what the chapter records."""
    import json

    from helpers.core.config import job_config
    from helpers.core.paths import resolve
    from helpers.output.tables import show_md, show_table

    bench = json.loads(resolve(RESULTS_FILE).read_text())
    on_cpu = preset in ("ci", "cpu")
    model = bench["model"]
    cfg = (job_config("ci", arch=model["arch"], width=model["width"], stem=model["stem"], image_size=model["image_size"],
                      num_classes=model["num_classes"], conv_impl="im2col") if on_cpu else job_config(preset))
    rows = lever_rows(cfg, bench["measured"]["im2col"] if on_cpu else None)
    m = bench["measured"]["im2col"]["levers"]
    figures = dict(recompute_memory=m["recompute_block"]["slope_ratio_vs_plain"],
                   recompute_time=m["recompute_block"]["step_time_ratio_vs_plain"],
                   amp_memory=m["amp_o2"]["slope_ratio_vs_plain"], amp_time=m["amp_o2"]["step_time_ratio_vs_plain"],
                   shards={r.lever: r.planned for r in rows if r.unit == "MiB/rank"}, source=RESULTS_FILE,
                   model=model, measured_here=on_cpu)
    saved = [name for name, key in (("recomputation", "recompute_memory"), ("AMP O2", "amp_memory"))
             if figures[key] < 1]
    verdict = f"{' and '.join(saved)} saved memory" if saved else "neither lever saved memory"
    show_md(f"Benchmark, not this run (`{RESULTS_FILE.rsplit('/', 1)[-1]}`): {verdict} on that CPU, measured against "
            "the plain step. MiB per image; optimizer rows: MiB per rank, planned.")   # the ratios: the claim's
    show_table([shown_row(r) for r in rows], SHOWN)
    return figures
