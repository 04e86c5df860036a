"""Chapter 03's steps: what the classifier costs, the out-of-memory experiment, the strategy files, the layouts'
jobs, the step-by-step proof against one process, merge / re-split / resume, the errata, and the recorded values."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from helpers.cells.run import FollowOn, chained_job
from helpers.conclusions.step_noise import per_step
from helpers.core.config import JobConfig, config_table, job_config
from helpers.core.errors import ConfigError
from helpers.core.memory_planner import classifier_param_bytes
from helpers.core.paths import new_run_dir
from helpers.job.launch import run_job
from helpers.job.plan import runs_in_turn
from helpers.output.tables import show_md, show_table
from helpers.topics import hybrid
from helpers.topics.hybrid_reference import run_reference, trainable_diff
from helpers.topics.strategy import (checkpoint_arrays, merge_rank_checkpoints, resplit_checkpoint,
                                     strategy_table)
from helpers.train.data import prepare_data
from helpers.train.hybrid_classifier import build_full_net
from helpers.train.hybrid_step import semi_auto_plan
from helpers.train.strategy_file import build_strategy, read_strategy, validate_strategy
from helpers.train.strategy_layout import Layout, merge_shards

CPU_STEPS = 10     # the cpu preset's steps: PyNative hybrid steps take 8-14 s each on 2 cores
MIN_CLASSES = 1000
# The out-of-memory experiment's ranks, at most the world (gpu8, its rehearsal: the world). A data-parallel rank holds
# the whole ~100 MB classifier with gradient and momentum (8 such ranks: 9.2 GB of host memory at ci); the cap is per
# rank, so 2 ranks show the failure within host_memory.BUDGET_MB. Not 4 (cpu): twice the memory, and 2x2 all-reduces
# its slice (ci model: 3240 MB after the step, 25 above 1x2), narrowing the window below 4x1's reservation (3335 MB).
OOM_RANKS = {"ci": 2, "cpu": 2}


@dataclass(frozen=True)
class Setup:
    """The chapter's job config and the names of its layouts."""

    base: JobConfig
    layouts: list
    resume_layout: str
    work: Path
    oom_ranks: int | None = None    # ranks of the out-of-memory experiment (None: the world size)

    @property
    def hybrid(self) -> str:
        """The layout whose run is proven, merged and re-split: the first with a split classifier."""
        return next((n for n in self.layouts if Layout.parse(n).mp > 1), self.layouts[-1])

    @property
    def data_parallel(self) -> str:
        return next((n for n in self.layouts if Layout.parse(n).mp == 1), self.layouts[0])

    @property
    def on_cpu(self) -> bool:
        return self.base.device_target == "CPU"

    @property
    def runs_oom(self) -> bool:
        """The out-of-memory experiment runs on the CPU presets (a rehearsal mirrors the card run, which skips it)."""
        return self.on_cpu and not self.base.rehearsal

    @property
    def path_short(self) -> str:
        return "PyNative with explicit collectives" if self.on_cpu else "SEMI_AUTO_PARALLEL (compiled graph)"

    @property
    def path_name(self) -> str:
        if self.on_cpu:
            return f"CPU: PyNative, explicit collectives, every layout incl. {self.data_parallel}"
        return f"{self.base.device_target}: SEMI_AUTO_PARALLEL + shard() + strategy_ckpt_config"


def default_layouts(world: int, layouts=None, resume_layout=None) -> tuple[list, str]:
    """Pure data parallel, then half the ranks per classifier slice; resumed on ``2 x world/2`` (8 ranks up)."""
    layouts = list(layouts or [f"{world}x1", f"{world // 2}x2"])
    return layouts, resume_layout or (f"2x{world // 2}" if world >= 8 else f"{world}x1")


def oom_world(preset: str, rehearse: bool, world: int, oom_ranks=None) -> int:
    """Ranks of the out-of-memory experiment: ``oom_ranks``, else the preset's ``OOM_RANKS`` (at most ``world``)."""
    return int(oom_ranks or min(world if rehearse else OOM_RANKS.get(preset, world), world))


def prepare(preset: str, rehearse: bool, *, steps=None, num_classes=None, layouts=None, resume_layout=None,
            oom_ranks=None, **overrides) -> Setup:
    """The preset's config (the data prepared), the classifier padded to ``num_classes`` (None: at least 1,000),
    the out-of-memory experiment on ``oom_ranks`` ranks (None: ``OOM_RANKS``)."""
    base = job_config(preset, rehearse=rehearse, chapter="03", steps=steps or {"cpu": CPU_STEPS}.get(preset),
                      **overrides)
    index = prepare_data(base)
    layouts, resume_layout = default_layouts(base.world_size, layouts, resume_layout)
    base = base.replace(num_classes=num_classes or max(MIN_CLASSES, len(index.classes)))
    return Setup(base, layouts, resume_layout, new_run_dir("03", "strategies"),
                 oom_world(preset, rehearse, base.world_size, oom_ranks))


def oom_setting(setup: Setup) -> str:
    """The setup table's words for the out-of-memory experiment's ranks."""
    if not setup.runs_oom:
        return "not run here (the CPU presets run it)"
    dp, hyb = hybrid.oom_layouts(setup.oom_ranks or setup.base.world_size)
    return f"{dp.world} ranks: {dp.name} against {hyb.name}, {setup.base.batch_per_rank} images per rank (section 2)"


def show_setup(setup: Setup) -> None:
    """Show the chapter's settings: the preset's, classes, layouts, the out-of-memory experiment's, the path."""
    show_table(config_table(setup.base) + [("num_classes", setup.base.num_classes),
                                           ("layouts", ", ".join(setup.layouts)),
                                           ("resume on", setup.resume_layout),
                                           ("out-of-memory experiment", oom_setting(setup)),
                                           ("hybrid path", setup.path_name)],
               ["setting", "value"])


def feature_dim(base: JobConfig) -> int:
    """Features this run's backbone gives the classifier."""
    return build_full_net(base.replace(num_classes=16, conv_impl="native"), 16).feature_dim


def classifier_cost_rows(this_run: str, this_features: int) -> list[tuple]:
    """MB of fp32 classifier per card on 8x1, 4x2 and 2x4, and what 2x4 saves with gradient and momentum."""
    rows = []
    for name, feat in [("ResNet-50 (2,048 features)", 2048), (this_run, this_features)]:
        for classes in (1000, 100_000):
            mb = {mp: classifier_param_bytes(feat, classes, mp) / 2**20 for mp in (1, 2, 4)}
            rows.append((name, f"{classes:,}", mb[1], mb[2], mb[4], 3 * (mb[1] - mb[4])))
    return rows


def show_classifier_cost(setup: Setup) -> int:
    """The table of section 1; returns this run's feature count."""
    feat = feature_dim(setup.base)
    show_table(classifier_cost_rows(f"this run ({feat} features)", feat),
               ["backbone", "classes", "MB per card, 8x1", "4x2", "2x4", "2x4 saves, with grad+momentum"])
    return feat


def run_oom(setup: Setup, oom_classes=None, oom_steps: int = 1, progress="auto") -> dict | None:
    """Section 2 on ``setup.oom_ranks`` ranks where it runs (``Setup.runs_oom``); None elsewhere."""
    base = setup.base
    if not setup.runs_oom:
        where = "the gpu8 rehearsal (it mirrors the card run)" if base.rehearsal else base.device_target
        show_md(f"**Not run on {where}:** on cards the cap is the device pool's `max_size`; the experiment runs on "
                "the CPU presets.")
        return None
    dp_layout, hyb_layout = hybrid.oom_layouts(setup.oom_ranks or base.world_size)
    oom = hybrid.classifier_oom(base, dp_layout, hyb_layout, oom_classes or hybrid.oom_classes(base),
                                new_run_dir("03", "oom"), steps=oom_steps, progress=progress)
    show_table(hybrid.oom_rows(oom), ["layout", "classifier MB", "peak MB", "cap MB", "under the cap"])
    show_md(f"{oom['num_classes']:,} classes; the capped data-parallel job ended with (abridged, all in "
            f"`oom['error']`):\n\n```\n{hybrid.oom_brief(oom['error'])}\n```")
    return oom


def write_strategies(setup: Setup) -> dict:
    """``{layout name: strategy file}`` for every layout trained or resumed on."""
    return {name: hybrid.write_layout_strategy(setup.base, Layout.parse(name), setup.work / f"strategy_{name}.ckpt")
            for name in sorted(set(setup.layouts) | {setup.resume_layout})}


def strategy_rows(table: list[dict]) -> list[tuple]:
    """The classifier's and the first stem convolution's rows of ``strategy_table``."""
    keep = [r for r in table if r["parameter"].startswith("fc.")] + \
           [r for r in table if r["parameter"].startswith("stem.0")]
    return [(r["parameter"], r["shape"], list(r["dev_matrix"]), list(r["tensor_map"]), r["shard_shape"],
             " / ".join(",".join(map(str, v)) for v in list(r["slices"].values())[:4])) for r in keep]


def show_strategy_table(setup: Setup, files: dict) -> None:
    """Show the hybrid layout's strategy file as a table: which rank holds which slice."""
    base = setup.base
    table = strategy_table(files[setup.hybrid], base.world_size,
                           param_shapes=build_full_net(base.replace(conv_impl="native"), base.num_classes))
    show_md(f"**{files[setup.hybrid].name}**: {len(table)} parameters, 3 shown")
    show_table(strategy_rows(table), ["parameter", "shape", "dev matrix", "tensor map", "shard", "ranks per block"])


def _refusal(check) -> str | None:
    """The ``ConfigError`` message of ``check()``, None when it passes."""
    try:
        check()
    except ConfigError as exc:
        return str(exc)
    return None


def check_bad_strategies(setup: Setup) -> bool:
    """A 4-card file offered to the job, and 10 classes split 4 ways: both refused before launch?"""
    base = setup.base
    bad_file = hybrid.write_layout_strategy(base, Layout(2, 2), setup.work / "strategy_for_4_cards.ckpt")
    full_net = build_full_net(base.replace(conv_impl="native"), base.num_classes)
    bad = _refusal(lambda: validate_strategy(bad_file, full_net, base.world_size))
    ten = _refusal(lambda: build_strategy(build_full_net(base.replace(conv_impl="native", num_classes=10), 10),
                                          Layout(2, 4)))
    first = bad.splitlines()[1].strip() if bad else "(accepted!)"
    show_md(f"A 2x2 file offered to {base.world_size} ranks is **rejected** before launch:\n```\n{first}\n...\n```\n"
            f"and 10 classes cannot be split 4 ways (hence {base.num_classes:,} here):\n```\n{ten}\n```")
    return bad is not None and ten is not None


def trace_dir(setup: Setup, name: str) -> Path | None:
    """Where the proven run writes its weights after each update: the CPU path only (a compiled GPU/Ascend step
    runs no host code)."""
    return setup.work / f"trace_{name}" if name == setup.hybrid and setup.on_cpu else None


def layout_config(setup: Setup, name: str, strategy_file) -> JobConfig:
    """Layout ``name``'s job: its strategy file, and its parameter trace where it is proven (``trace_dir``)."""
    return hybrid.hybrid_config(setup.base, Layout.parse(name), strategy_file, trace_dir=trace_dir(setup, name),
                                name=f"hybrid-{name}")


def first_layout_job(setup: Setup) -> FollowOn:
    """Section 4's first layout as the code cell's follow-on (``%%ranks ... --then``), and on CPU its other layouts
    after it: one launch for all (on a card and in its rehearsal each keeps a launch of its own; a second
    SEMI_AUTO_PARALLEL job in one process is not measured here). Writes their strategy files."""
    files = write_strategies(setup)
    first, *others = [layout_config(setup, name, files[name]) for name in setup.layouts]
    return FollowOn(first, more=tuple(others) if runs_in_turn(setup.base) else ())


def run_layouts(setup: Setup, files: dict, progress="auto", code_cell=None) -> dict:
    """``{layout name: JobResult}`` of one job per layout; a layout ``code_cell`` (the ``%%ranks`` cell's launch)
    ran after the cell is not run again (``chained_job``)."""
    cfgs = {name: layout_config(setup, name, files[name]) for name in setup.layouts}
    return {name: chained_job(code_cell, cfg) or run_job(cfg, progress=progress) for name, cfg in cfgs.items()}


def layout_numbers(runs: dict) -> dict:
    """Per layout: steady img/s (``JobResult.img_per_s``), the classifier bytes a rank held, the final mean loss."""
    return {n: {"img_per_s": r.img_per_s(),
                "classifier_bytes": int(max(r.summary("classifier_param_bytes"))),
                "final_loss": float(r.metric("loss")[:, -1].mean())} for n, r in runs.items()}


def plot_layouts(setup: Setup, runs: dict):
    """Three panels across layouts: mean loss per step, img/s, classifier MB per rank."""
    nums = layout_numbers(runs)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    for name, res in runs.items():
        loss = res.metric("loss")
        axes[0].plot(np.arange(1, loss.shape[1] + 1), loss.mean(axis=0), marker="o", label=name)
    axes[0].set(xlabel="step", ylabel="mean training loss over ranks", title="loss")
    axes[0].legend()
    axes[1].bar(list(nums), [v["img_per_s"] for v in nums.values()])
    axes[1].set(title=f"throughput (img/s), {setup.path_short}")
    axes[2].bar(list(nums), [v["classifier_bytes"] / 2**20 for v in nums.values()])
    axes[2].set(title="classifier MB per rank (measured)")
    fig.tight_layout()
    return fig


def show_layout_table(setup: Setup, runs: dict) -> None:
    """Per layout: classifier bytes per rank, img/s and final mean loss."""
    show_table([(n, f"{v['classifier_bytes']:,}", f"{v['img_per_s']:.1f}", f"{v['final_loss']:.4f}")
                for n, v in layout_numbers(runs).items()],
               ["layout", "classifier bytes per rank", "img/s", "final mean loss"])


@dataclass
class Proof:
    """The merged checkpoint of the proven run and how far each update was from the single-process one."""

    merged: Path
    full: dict
    step_diff: list
    per_step: list
    max_param_diff: float | None = None
    loss_diff: float | None = None


def compare_with_reference(hres, ref: dict, full: dict) -> dict:
    """Per update: max |weight difference|, max |per-rank loss difference|; the merged checkpoint's worst tensors."""
    step_diff = [float(v) for v in ref["step_param_diff"]]
    diffs = trainable_diff(full, ref["params"])
    per_step = [float(v) for v in np.max(np.abs(hres.metric("loss").T - np.array(ref["losses"])), axis=1)]
    return {"step_diff": step_diff, "per_step": per_step, "max_param_diff": max(max(step_diff), max(diffs.values())),
            "loss_diff": max(per_step), "worst": sorted(diffs.items(), key=lambda kv: -kv[1])[:3]}


def prove_against_reference(setup: Setup, files: dict, runs: dict) -> Proof:
    """Section 5: merge the proven run's checkpoints; on CPU, follow it with the single-process reference."""
    name, hres = setup.hybrid, runs[setup.hybrid]
    merged = merge_rank_checkpoints(hres.run_dir / "ckpt", files[name], setup.work / f"merged_{name}")
    full = checkpoint_arrays(merged)
    if not setup.on_cpu:
        show_md(f"**Not run on {setup.base.device_target}:** the step-by-step proof starts every reference update "
                "from the hybrid run's own weights, which the CPU path saves after each update; a compiled "
                "SEMI_AUTO_PARALLEL step runs no host code to save them, and a free-running single-process ResNet "
                f"reference of {setup.base.steps} steps at this batch would take hours on the host. The gpu8 "
                "rehearsal (`--rehearse`) runs this proof on the same strategy files.")
        return Proof(merged, full, [], [])
    cmp = compare_with_reference(hres, run_reference(hres.run_dir, follow=trace_dir(setup, name)), full)
    show_table([(i + 1, d, l) for i, (d, l) in enumerate(zip(cmp["step_diff"], cmp["per_step"]))],
               ["update", "max weight difference", "max loss difference"])
    show_table(cmp["worst"], ["merged checkpoint's worst tensors", "max difference"])
    return Proof(merged, full, cmp["step_diff"], cmp["per_step"], cmp["max_param_diff"], cmp["loss_diff"])


def hand_merge_diff(full: dict, strategy: dict, rank_ckpts: list) -> float:
    """Max |merged - the rank shards put together with ``merge_shards``| over every tensor."""
    worst = 0.0
    for name, merged in full.items():
        by_hand = (merge_shards({r: c[name] for r, c in enumerate(rank_ckpts)}, strategy[name]) if name in strategy
                   else rank_ckpts[0][name])
        worst = max(worst, float(np.max(np.abs(merged - by_hand))))
    return worst


def merge_resplit_resume(setup: Setup, files: dict, runs: dict, proof: Proof, progress="auto") -> dict:
    """Section 6: the merged checkpoint against the hand-assembled one, re-split for ``resume_layout`` and
    resumed there (on GPU/Ascend MindSpore slices the merged file itself)."""
    base, name, resume = setup.base, setup.hybrid, setup.resume_layout
    run_dir = runs[name].run_dir
    split_names = [r["parameter"] for r in strategy_table(files[name], base.world_size)
                   if any(p > 1 for p in r["split"])]
    rank_ckpts = [checkpoint_arrays(next((run_dir / "ckpt" / f"rank_{r}").glob("*.ckpt")))
                  for r in range(base.world_size)]
    max_diff = hand_merge_diff(proof.full, read_strategy(files[name]), rank_ckpts)
    resume_dir = setup.work / f"split_{resume}"
    resplit_checkpoint(proof.merged, files[resume], resume_dir, base.world_size)
    init = str(resume_dir if setup.on_cpu else proof.merged)
    resumed = run_job(hybrid.hybrid_config(base, Layout.parse(resume), files[resume], init_checkpoint=init,
                                           steps=max(2, base.steps // 2), name=f"resumed-{resume}"), progress=progress)
    show_table([("tensors merged", len(proof.full)), ("split", ", ".join(split_names)),
                ("max |merged - hand-assembled|", max_diff),
                (f"slice per rank on {resume}",
                 str(tuple(resumed.summary("classifier_shape")[0])))],
               ["", "value"])
    return {"merged_checkpoint_max_diff": max_diff, "resumed": resumed, "resumed_on_layout": resume}


def plot_resume(setup: Setup, runs: dict, resume: dict):
    """Loss of the hybrid run, then of the run resumed from its merged checkpoint on another layout."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    l0 = runs[setup.hybrid].metric("loss").mean(axis=0)
    l1 = resume["resumed"].metric("loss").mean(axis=0)
    ax.plot(np.arange(1, len(l0) + 1), l0, marker="o", label=f"{setup.hybrid} (trained from the seed)")
    ax.plot(np.arange(len(l0) + 1, len(l0) + len(l1) + 1), l1, marker="s",
            label=f"{setup.resume_layout} (resumed from the merged checkpoint)")
    ax.set(xlabel="step", ylabel="mean training loss over ranks", title="train on one layout, resume on another")
    ax.legend()
    fig.tight_layout()
    return fig


def activation_counts(net) -> dict:
    """``{"ReLU": n, "ReLU6": m}``: the activation cells of ``net``."""
    from mindspore import nn

    acts = {}
    for _, cell in net.cells_and_names():
        if isinstance(cell, (nn.ReLU, nn.ReLU6)):
            acts[type(cell).__name__] = acts.get(type(cell).__name__, 0) + 1
    return acts


def show_errata(setup: Setup, files: dict) -> None:
    """No ``ModelParallelCell``; the real tools' signatures; the GPU/Ascend plan; ``nn.ReLU6`` and this net's ReLUs."""
    import mindspore as ms
    import mindspore.parallel as msp
    from mindspore import nn

    plan = semi_auto_plan(setup.base.replace(strategy_file=str(files[setup.hybrid])))
    show_md(f"`hasattr(mindspore.nn, 'ModelParallelCell')` → **{hasattr(nn, 'ModelParallelCell')}**, "
            f"`hasattr(mindspore.parallel, 'ModelParallelCell')` → **{hasattr(msp, 'ModelParallelCell')}**  \n"
            f"`build_searched_strategy{inspect.signature(msp.build_searched_strategy)}`  \n"
            f"`transform_checkpoints{inspect.signature(msp.transform_checkpoints)}`  \n"
            f"`'strategy_ckpt_config' in set_auto_parallel_context.__doc__` → "
            f"**{'strategy_ckpt_config' in ms.set_auto_parallel_context.__doc__}**  \n"
            f"GPU/Ascend plan for {plan['layout']}: `parallel_mode={plan['context']['parallel_mode']!r}`, "
            f"`fc.matmul.shard({plan['matmul_in_strategy']})`, `fc.bias_add.shard({plan['bias_add_in_strategy']})`")
    relu6 = nn.ReLU6()(ms.Tensor(np.array([-1.0, 3.0, 8.0], np.float32))).asnumpy()
    acts = activation_counts(build_full_net(setup.base.replace(conv_impl="native"), setup.base.num_classes))
    show_md(f"`mindspore.nn.ReLU6` in MindSpore {ms.__version__}: **{hasattr(nn, 'ReLU6')}**; "
            f"`nn.ReLU6()([-1, 3, 8])` → `{relu6.tolist()}`  \n"
            f"activation cells of this chapter's {setup.base.arch}: "
            + ", ".join(f"`{k}` x {v}" for k, v in sorted(acts.items())))


OOM_RECORD_DROPS = ("error", "hybrid_error", "hybrid_result")


def recorded_values(preset: str, rehearse: bool, setup: Setup, *, feature_dim: int, runs: dict, oom: dict | None,
                    bad_strategy_rejected: bool, proof: Proof, resume: dict) -> dict:
    """What ``record_results`` stores and ``helpers.conclusions.ch03`` reads."""
    base, nums = setup.base, layout_numbers(runs)
    return dict(
        preset=preset, rehearsal=rehearse, device_target=base.device_target, world_size=base.world_size,
        hybrid_path=setup.path_name, hybrid_path_short=setup.path_short, layouts_run=list(runs),
        layout_jobs={n: r.launch for n, r in runs.items()},      # on CPU the code cell's launch ran them all
        num_classes=base.num_classes, feature_dim=feature_dim,
        max_param_diff_vs_reference=proof.max_param_diff, max_loss_diff_vs_reference=proof.loss_diff,
        param_diff_vs_reference_per_step=proof.step_diff, loss_diff_vs_reference_per_step=proof.per_step,
        reference_mode="follows the hybrid run: each update from the run's own weights",
        classifier_param_bytes_per_rank={"dp": nums[setup.data_parallel]["classifier_bytes"],
                                         "hybrid": nums[setup.hybrid]["classifier_bytes"]},
        dp_layout=setup.data_parallel, hybrid_layout=setup.hybrid,
        img_per_s={n: v["img_per_s"] for n, v in nums.items()},
        timed_step_s={n: per_step(r.metric("step_s")) for n, r in runs.items()},   # what img_per_s is the median of
        final_mean_loss={n: v["final_loss"] for n, v in nums.items()},
        merged_checkpoint_max_diff=resume["merged_checkpoint_max_diff"], resumed_on_layout=resume["resumed_on_layout"],
        bad_strategy_rejected=bad_strategy_rejected,
        oom={k: v for k, v in oom.items() if k not in OOM_RECORD_DROPS} if oom else None,
        oom_world_size=oom.get("world_size") if oom else None,
        mem_cap_mb=oom["cap_mb"] if oom else None, dp_oom_reproduced=bool(oom and oom["dp_oom_reproduced"]),
        hybrid_fits_under_cap=bool(oom and oom["hybrid_fits_under_cap"]),
        **hybrid.traffic_and_resume(base, Layout.parse(setup.hybrid).mp, feature_dim, setup.on_cpu, runs[setup.hybrid]),
    )
