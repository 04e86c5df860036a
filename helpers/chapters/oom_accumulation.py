"""Chapter 02's steps: the planner's tables, the full / capped / accumulated jobs, the gradient check, the memory
sweep and the errata checks; ``OomChapter`` keeps what each step measured for the next and for ``results()``."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass

import numpy as np

from helpers.cells.program import CELL_FILE
from helpers.conclusions import ch02
from helpers.conclusions.step_noise import per_step
from helpers.core import memory_planner as memory
from helpers.core.config import JobConfig, config_table, job_config
from helpers.core.errors import JobFailed
from helpers.job.host_memory import BUDGET_MB
from helpers.job.launch import run_job
from helpers.output.plots import rank_memory_bars, throughput_bars
from helpers.output.tables import show_md, show_table
from helpers.train.grad_accumulation import ACCUMULATION_FILE, step_code
from helpers.topics import memory_scenarios as scenarios
from helpers.topics.memory_runs import (BASELINE_LABELS, MEMORY_LABELS, cap_below, job_memory,
                                        planner_vs_measured, sweep)

# Sizes per preset. The experiment runs the preset's model; 'ci' and 'cpu' use the im2col convolution and 64 px
# images for the out-of-memory part (the notebook's section 1 says why: MindSpore's CPU pool reserves 1 GiB blocks,
# and only a full batch that outgrows the first block can be told from its micro-batch by an address-space cap);
# 'rehearsal' is gpu8 rehearsed on CPU (ResNet-50 at 224 px, 2 ranks, the CPU memory cap; native 3x3 at 224 px
# took ~17 s per step, hence its im2col grad check). The grad check and the sweep keep the preset's image size.
# ``oom_ranks``: the ranks of the out-of-memory experiment on CPU (None: the preset's). Each rank of the full batch
# holds ~1.65 GB of its own (it must outgrow a 1 GiB pool block), so 8 ranks took ~14 GB; 2 ranks (ci) and 4 (cpu)
# keep the chapter within the host-memory budget (helpers.job.host_memory.BUDGET_MB: 6 GB ci, 10 GB cpu).
PRESETS = {
    "ci": dict(batch_per_rank=96, accumulation_steps=4, steps=3, conv_impl="im2col", cap_margin_mb=256,
               image_size=64, grad_check_ranks=2, grad_check_conv="native", oom_ranks=2,
               sweep=dict(batches=(16, 48, 96), arch=None, width=None, image_size=None)),
    "cpu": dict(batch_per_rank=48, accumulation_steps=4, steps=8, conv_impl="im2col", cap_margin_mb=256,
                image_size=64, grad_check_ranks=2, grad_check_conv="native", oom_ranks=4,
                sweep=dict(batches=(16, 32, 64), arch=None, width=None, image_size=None)),
    "gpu8": dict(batch_per_rank=64, accumulation_steps=4, steps=50, conv_impl="native", cap_margin_mb=None,
                 image_size=None, grad_check_ranks=None, grad_check_conv="native", oom_ranks=None,
                 sweep=dict(batches=(4, 8, 16), arch="resnet50", width=1.0, image_size=64)),
    "rehearsal": dict(batch_per_rank=8, accumulation_steps=4, steps=2, conv_impl="im2col", cap_margin_mb=128,
                      image_size=None, grad_check_ranks=2, grad_check_conv="im2col", oom_ranks=None,
                      sweep=dict(batches=(1, 2, 4), arch="resnet50", width=1.0, image_size=64)),
}
SIZE_KEYS = ("batch_per_rank", "accumulation_steps", "steps", "conv_impl", "cap_margin_mb", "image_size")
GIB, MIB = 2 ** 30, 2 ** 20
GRAD_RESULT_KEYS = ("grad_check_same_on_all_ranks", "grad_max_abs_diff_no_bn", "grad_max_abs_diff_bn",
                    "grad_max_rel_diff_bn", "grad_cosine_bn", "grad_max_abs_diff_bn_frozen",
                    "grad_max_rel_diff_bn_frozen", "grad_cosine_bn_frozen", "bn_frozen_layers",
                    "builtin_cell_grad_ratio", "builtin_parallel_grad_ratio")


@dataclass(frozen=True)
class Sizes:
    """The experiment's configuration: the job config of the full batch and its split into K micro-batches."""

    base: JobConfig
    per_rank: int
    k: int
    micro: int
    impl: str
    margin: int | None
    preset: dict
    model_image_size: int     # the preset's own image size (the grad check and the sweep run at it)


def chapter_sizes(preset: str, rehearse: bool = False, sweep_batches=None, **overrides) -> Sizes:
    """The preset's sizes, every override that is not None replacing its value (no data touched)."""
    chosen = dict(PRESETS["rehearsal" if rehearse else preset])
    if sweep_batches:
        chosen["sweep"] = {**chosen["sweep"], "batches": tuple(sweep_batches)}
    size = {k: overrides.pop(k, None) or chosen[k] for k in SIZE_KEYS}
    arch = overrides.pop("arch", None) or ("resnet152" if preset == "gpu8" and not rehearse else None)
    overrides["world_size"] = overrides.get("world_size") or chosen["oom_ranks"]   # within the host-memory budget
    model = job_config(preset, rehearse=rehearse, chapter="02", arch=arch, steps=size["steps"], **overrides)
    base = model.replace(image_size=size["image_size"] or model.image_size)
    per_rank, k = size["batch_per_rank"], size["accumulation_steps"]
    # float32: what the planner counts; accumulation applies no loss scale
    base = base.replace(global_batch=per_rank * base.world_size, conv_impl=size["conv_impl"], amp_level="O0")
    return Sizes(base, per_rank, k, per_rank // k, size["conv_impl"], size["cap_margin_mb"], chosen, model.image_size)


CPU_CODE_MICRO = 4     # the code cell's micro-batch on CPU: every rank of the preset fits in host memory


def code_config(s: Sizes, world: int) -> JobConfig:
    """The code cell's job: ``world`` ranks (the CPU experiments use fewer, to fit host memory), K micro-batches of
    the chapter's size on a card and of ``CPU_CODE_MICRO`` images on CPU (``cfg.micro_batch``,
    ``cfg.accumulation_steps`` in the cell)."""
    micro = s.micro if s.base.device_target != "CPU" else min(s.micro, CPU_CODE_MICRO)
    return s.base.replace(name="accumulation-code", world_size=world, global_batch=world * micro * s.k,
                          micro_batch=micro, accumulation_steps=s.k)


def blog_rows() -> tuple[dict, list]:
    """The planner's answer for the blog's case and ResNet-50 (batch 64, 224 px, 40 GiB): estimates and table rows."""
    est = {"blog": memory.estimate("resnet152", 64, 224), "r50": memory.estimate("resnet50", 64, 224)}
    rows = [(f"{e.arch}, batch 64, 224 px", f"{e.param_count / 1e6:.1f} M", f"{e.model_state_bytes / GIB:.2f}",
             f"{e.activation_bytes / GIB:.2f}", f"{e.total_gib:.2f}", "yes" if e.fits(40) else "no",
             memory.max_batch(e.arch, 224, capacity_gb=40)) for e in est.values()]
    return est, rows


def experiment_plan(s: Sizes, num_classes: int) -> tuple[dict, list]:
    """The planner on this machine's experiment: full batch and micro-batch x K, both convolutions, and the
    micro-batch ``plan_accumulation`` picks for 1.2x the accumulated run's estimate."""
    b = s.base
    kw = dict(num_classes=num_classes, width=b.width, stem=b.stem)
    plan = {(label, ci): memory.estimate(b.arch, n, b.image_size, conv_impl=ci, accumulation_steps=k, **kw)
            for label, n, k in (("full batch", s.per_rank, 1), (f"micro-batch x {s.k}", s.micro, s.k))
            for ci in ("native", "im2col")}
    budget_gib = plan[(f"micro-batch x {s.k}", s.impl)].total_bytes / GIB * 1.2
    picked = memory.plan_accumulation(b.arch, b.global_batch, b.world_size, budget_gib, b.image_size,
                                      conv_impl=s.impl, **kw)
    rows = [(label, ci, e.batch, f"{e.activation_bytes / MIB:.0f}", f"{e.total_bytes / MIB:.0f}")
            for (label, ci), e in plan.items()]
    rows.append((f"plan_accumulation, {budget_gib:.3f} GiB", s.impl,
                 "micro-batch x K = %s x %s" % picked, "", ""))
    return plan, rows


def cap_mb_for(s: Sizes, mem_full: dict, full_estimate_bytes: int) -> int:
    """CPU: ``cap_margin_mb`` below the full batch's largest virtual size; GPU/Ascend: 3/4 of the planner's total."""
    if s.base.device_target == "CPU":
        return cap_below(mem_full["max_vms_peak"], s.margin)
    return int(0.75 * full_estimate_bytes / MIB)


def memory_rows(m: dict) -> tuple[list, list]:
    """Section 2's table of one job (``job_memory``), rows and headers: per rank its memory before the first step
    and at the peak, in the job's own measure (device memory on a card, RSS on CPU), then the host's figures."""
    what, card = m["memory"], m["memory"] == "device"
    headers = ["rank", f"{BASELINE_LABELS[what]} (MB)", f"{MEMORY_LABELS[what]} (MB)"]
    headers += ["peak RSS, host (MB)", "peak virtual size, host (MB)"] if card else ["peak virtual size (MB)"]
    rows = [(r, f"{m['ready'][r]:.0f}", f"{m['peak'][r]:.0f}", *([f"{m['peak_rss'][r]:.0f}"] if card else []),
             f"{m['vms_peak'][r]:.0f}") for r in range(len(m["peak"]))]
    return rows, headers


def accumulation_rows(mems: dict, tp: dict, cap_mb: int) -> tuple[list, list]:
    """Section 3's table, rows and headers: peak and above-baseline memory of both runs in their measure,
    throughput, the largest virtual size, and the cap under the figure it limits (device memory on a card, the
    address space on CPU)."""
    what = mems["full_batch"]["memory"]
    rows = [(k.replace("_", " "), f"{m['max_peak']:.0f}", f"{m['max_activation']:.0f}", f"{tp[k]:.1f}",
             f"{m['max_vms_peak']:.0f}") for k, m in mems.items()]
    cap = [f"{cap_mb}", "", "", ""] if what == "device" else ["", "", "", f"{cap_mb}"]
    rows.append(("cap per rank", *cap))
    return rows, ["run", f"{MEMORY_LABELS[what]} per rank (MB)", f"above the {BASELINE_LABELS[what]} (MB)",
                  "images / s", "largest virtual size, host (MB)" if what == "device" else "largest virtual size (MB)"]


def grad_check_record(summaries: list[dict]) -> dict:
    """The grad-check job's per-rank summaries reduced over ranks: the largest difference, the smallest cosine."""
    worst = lambda key: max(x[key] for x in summaries)     # noqa: E731
    least = lambda key: min(x[key] for x in summaries)     # noqa: E731
    first = summaries[0]
    rec = {f"grad_max_{w}_diff_{net}": worst(f"grad_max_{w}_diff_{net}")
           for w in ("abs", "rel") for net in ("no_bn", "bn", "bn_frozen")}
    rec.update({f"grad_max_abs_{net}": worst(f"grad_max_abs_{net}") for net in ("no_bn", "bn", "bn_frozen")})
    rec.update(grad_cosine_bn=least("grad_cosine_bn"), grad_cosine_bn_frozen=least("grad_cosine_bn_frozen"),
               bn_frozen_layers=int(first["bn_frozen_layers"]),
               grad_check_same_on_all_ranks=len({round(x["grad_max_abs_diff_no_bn"], 12) for x in summaries}) == 1,
               builtin_cell_grad_ratio=first["builtin_nn_GradAccumulationCell_ratio"],
               builtin_parallel_grad_ratio=first.get("builtin_parallel_GradAccumulation_ratio"),
               builtin_errors={k: first.get(f"builtin_{k}_error", "ran")
                               for k in ("nn_GradAccumulationCell", "parallel_GradAccumulation")})
    return rec


def grad_check_rows(g: dict, arch: str) -> list:
    """One row per network: largest difference, largest gradient element, relative difference, cosine."""
    nets = (("small convnet, no BatchNorm", "no_bn"), (f"{arch}, BatchNorm in training mode", "bn"),
            (f"{arch}, BatchNorm frozen ({g['bn_frozen_layers']} layers)", "bn_frozen"))
    return [(name, f"{g[f'grad_max_abs_diff_{n}']:.2e}", f"{g[f'grad_max_abs_{n}']:.3g}",
             f"{g[f'grad_max_rel_diff_{n}']:.1e}",
             "—" if n == "no_bn" else f"{g[f'grad_cosine_{n}']:.{4 if n == 'bn' else 6}f}") for name, n in nets]


def builtin_rows(g: dict, device_target: str) -> tuple[list, list]:
    """The built-in accumulation cells' gradient ratio and error per cell, headed by the device they ran on."""
    rows = [(name, f"{g[key] if g[key] is not None else float('nan'):.4f}", g["builtin_errors"][err])
            for name, key, err in (("nn.GradAccumulationCell", "builtin_cell_grad_ratio", "nn_GradAccumulationCell"),
                                   ("mindspore.parallel.nn.GradAccumulation", "builtin_parallel_grad_ratio",
                                    "parallel_GradAccumulation"))]
    return rows, ["built-in cell, in TrainOneStepCell", "gradient / mean gradient", f"on {device_target}, DATA_PARALLEL"]


def model_api_check() -> dict:
    """What ``mindspore.train.Model`` says to the blog's ``gradient_accumulation_steps=4`` and the built-in cells'
    signatures."""
    import mindspore
    from mindspore import nn
    from mindspore.parallel.nn import GradAccumulation

    sig = inspect.signature(mindspore.train.Model.__init__)
    net = nn.Dense(4, 2)
    try:
        mindspore.train.Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9),
                              gradient_accumulation_steps=4)
        error = None
    except (TypeError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return {"model_signature": str(sig), "has_argument": "gradient_accumulation_steps" in sig.parameters,
            "model_error": error, "cell_signature": str(inspect.signature(nn.GradAccumulationCell.__init__)),
            "parallel_signature": str(inspect.signature(GradAccumulation.__init__))}


ACCOUNTS = {"planner (what backward must keep)": "planner", "planner + every BatchNorm output kept":
            "+ BatchNorm outputs", "planner + no reuse of backward workspaces": "+ no workspace reuse",
            "MXNet measured (TITAN X), extrapolated": "MXNet, extrapolated"}


def scenario_rows(blog_scenarios: dict) -> list:
    """The 35 GiB and 28 GiB accounts side by side, by short name (``memory_scenarios.keep_scenarios``)."""
    return [(ACCOUNTS.get(x["account"], x["account"]), f"{x['mib_per_image']:.0f}", f"{x['gib_at_batch']:.1f}",
             f"{x['gib_at_double_batch']:.1f}", x["batch_over_target"], x28["batch_over_target"])
            for x, x28 in zip(blog_scenarios[35.0], blog_scenarios[28.0])]


def cell_step(code_cell) -> tuple[dict, dict]:
    """The code cell's ``MicroStep`` and ``ApplyStep`` for an experiment's job: (config changes, files for the run
    folder), so the accumulation measured is the one the learner wrote and ran, edits included; with no code cell
    ``({}, {})``: the jobs take the committed cell's."""
    if code_cell is None:
        return {}, {}
    code = step_code((code_cell.run_dir / CELL_FILE).read_text())
    return dict(accumulation_code=ACCUMULATION_FILE), {ACCUMULATION_FILE: code.encode()}


class OomChapter:
    """The notebook's steps in order; each shows its tables or figure and keeps its numbers on ``self``."""

    def __init__(self, preset: str, rehearse: bool = False, progress: str = "auto", sweep_batches=None,
                 **overrides):
        from helpers.train.data import prepare_data

        self.preset, self.rehearse, self.progress = preset, rehearse, progress
        self.s = chapter_sizes(preset, rehearse, sweep_batches, **overrides)
        self.base = self.s.base
        self.num_classes = len(prepare_data(self.base).classes)
        self.code_cfg = code_config(self.s, job_config(preset, rehearse=rehearse).world_size)
        shown = ("device_target", "world_size", "arch", "width", "conv_impl", "image_size", "global_batch", "steps")
        show_table([r for r in config_table(self.base, shown) if r[1] != "n/a"]       # n/a: card-only settings
                   + [("micro-batch x K", f"{self.s.micro} x {self.s.k}")], ["setting", "value"])

    def show_planner(self) -> None:
        """Section 1: the blog's case, this machine's experiment; published figures: recorded, claimed, appendix."""
        est, rows = blog_rows()
        self.blog = est["blog"]
        show_table(rows, ["case", "parameters", "weights+grads+momentum (GiB)", "activations (GiB)", "total (GiB)",
                          "fits 40 GiB?", "max batch"])
        self.published = scenarios.compare_published("fp32")
        self.plan, rows = experiment_plan(self.s, self.num_classes)     # shown: the experiment's convolution
        show_table([r for r in rows if r[1] == self.s.impl], ["per rank", "convolution", "images", "activations (MiB)",
                                                              "total (MiB)"])

    def run_full_and_capped(self) -> None:
        """Section 2: the full batch measured without a cap, then under a cap sized from it."""
        self.full = run_job(self.base.replace(name="full_batch", compile_cache=False), progress=self.progress)
        self.mem_full = m = job_memory(self.full)
        self.host_mb = {"full_batch": self.full.peak_host_mb}
        show_table(*memory_rows(m))
        self.cap_mb = cap_mb_for(self.s, m, self.plan[("full batch", self.s.impl)].total_bytes)
        t0 = time.monotonic()
        try:
            run_job(self.base.replace(name="full_batch_capped", mem_cap_mb=self.cap_mb, compile_cache=False),
                    progress=self.progress)
            self.oom_error = None
        except JobFailed as exc:
            self.oom_error = exc
        fail_s = time.monotonic() - t0
        message = (str(self.oom_error).split("\n  --- tail of the log ---")[0] if self.oom_error
                   else "(the job finished: no failure)")
        what = "address space" if self.base.device_target == "CPU" else "device memory"
        show_md(f"Under **{self.cap_mb} MB** of {what} per rank, the job ended after {fail_s:.0f} s:"
                f"\n\n```\n{message}\n```")

    def run_accumulated(self, code_cell=None) -> None:
        """Section 3: micro-batch x K under the same cap, with the step of ``code_cell`` (the ``%%ranks`` cell's
        job); loss, peak memory per rank and throughput of both runs."""
        changes, files = cell_step(code_cell)
        self.acc = run_job(self.base.replace(name="accumulated_capped", mem_cap_mb=self.cap_mb,
                                             micro_batch=self.s.micro, accumulation_steps=self.s.k,
                                             compile_cache=False, **changes), progress=self.progress, files=files)
        self.mem_acc = job_memory(self.acc)
        self.host_mb["accumulated"] = self.acc.peak_host_mb
        mems = {"full_batch": self.mem_full, "accumulated": self.mem_acc}
        self.tp = {"full_batch": self.full.img_per_s(), "accumulated": self.acc.img_per_s()}
        self.tp_steps = {"full_batch": per_step(self.full.metric("step_s")),     # what img_per_s is the median of
                         "accumulated": per_step(self.acc.metric("step_s"))}
        # job_memory's measure: the device allocator on GPU/Ascend, RSS on CPU (peak_rss: the host's, always)
        self.memory = self.mem_full["memory"]
        self.peak = {k: m["max_peak"] for k, m in mems.items()}
        self.act = {k: m["max_activation"] for k, m in mems.items()}
        self.peak_rss = {k: m["max_peak_rss"] for k, m in mems.items()}

    def show_accumulation(self) -> None:
        """Peak and "activation" memory, throughput and largest virtual size of both runs, and the cap."""
        show_table(*accumulation_rows({"full_batch": self.mem_full, "accumulated": self.mem_acc}, self.tp, self.cap_mb))

    def plot_accumulation(self) -> None:
        """Loss of both runs, peak memory per rank (device on a card, RSS on CPU), throughput."""
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(14, 3.4))
        for name, r in (("full batch", self.full), (f"{self.s.micro} x {self.s.k} accumulated", self.acc)):
            loss = r.metric("loss")
            axes[0].plot(np.arange(1, loss.shape[1] + 1), loss.mean(axis=0), marker="o", label=name)
        axes[0].set(xlabel="step", ylabel="mean training loss over ranks", title="loss (same global batch)")
        axes[0].set_xticks(np.arange(1, self.full.metric("loss").shape[1] + 1))
        rank_memory_bars(axes[1], {"full batch": self.mem_full["peak"], "accumulated": self.mem_acc["peak"]},
                         self.mem_full["ready"], f"{MEMORY_LABELS[self.memory]} per rank", None
                         if self.memory == "device" else f"the cap, {self.cap_mb} MB, counts address space, not RSS")
        axes[0].legend(fontsize=8)
        throughput_bars(axes[2], self.base.global_batch, self.tp_steps)
        axes[2].set_title(f"throughput ({self.base.world_size} ranks)")
        fig.tight_layout()
        plt.show()

    def run_grad_check(self, code_cell=None) -> None:
        """Section 4: the grad_check job with the step of ``code_cell``; accumulated against full-batch gradients,
        and the built-in cells."""
        self.gc_ranks = self.s.preset["grad_check_ranks"] or self.base.world_size
        changes, files = cell_step(code_cell)
        cfg = self.base.replace(name="grad_check", task="grad_check", conv_impl=self.s.preset["grad_check_conv"],
                                micro_batch=self.s.micro, accumulation_steps=self.s.k, steps=1,
                                world_size=self.gc_ranks, global_batch=self.s.per_rank * self.gc_ranks,
                                image_size=self.s.model_image_size, **changes)
        self.grad = g = grad_check_record(list(run_job(cfg, progress=self.progress, files=files).summaries.values()))
        show_table(grad_check_rows(g, self.base.arch),
                   ["network", f"max |accumulated - full| ({self.s.k} x {self.s.micro})", "largest element", "relative",
                    "cosine"])
        show_table(*builtin_rows(g, self.base.device_target))

    def run_sweep(self) -> None:
        """Section 5: peak RSS over batch sizes (one process each, native convolution) against the planner, and
        oneDNN's kernel per convolution pass."""
        sw, b = self.s.preset["sweep"], self.base
        self.sw_arch, self.sw_width = sw["arch"] or b.arch, sw["width"] or b.width
        self.sw_size = sw["image_size"] or self.s.model_image_size
        self.sweep_rows = sweep(sw["batches"], arch=self.sw_arch, width=self.sw_width, stem=b.stem,
                                image_size=self.sw_size, conv_impl="native", steps=1, onednn_verbose=True)
        self.pvm = planner_vs_measured(self.sweep_rows, arch=self.sw_arch, width=self.sw_width, stem=b.stem,
                                       num_classes=self.num_classes)
        self.conv_kernels = self.sweep_rows[0].get("conv_kernels", {})
        self.composite = ch02.composite_passes(self.conv_kernels)
        self.copies_mib = scenarios.onednn_ncsp_copy_bytes_per_image(
            self.sw_arch, self.sw_size, self.num_classes, self.sw_width, b.stem,
            composite_passes=len(self.composite)) / MIB

    def show_kernels(self) -> None:
        """oneDNN's kernel per convolution pass (the slopes: the sweep's figure and the planner_slope claim)."""
        show_table([(kind, impl, "yes" if kind in self.composite else "no") for kind, impl in self.conv_kernels.items()],
                   ["convolution pass", "oneDNN kernel on this CPU", "composite (NHWC copies)?"])

    def plot_sweep(self) -> None:
        """Measured peak RSS over batch, its fit, the planner's line, and planner + oneDNN copies."""
        import matplotlib.pyplot as plt

        p = self.pvm
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        xs = np.array(p["batches"])
        ax.plot(xs, p["measured_peak_mb"], "o", label="measured peak RSS (one process)")
        ax.plot(xs, p["measured_intercept_mb"] + p["measured_slope_mib_per_image"] * xs, "-",
                label=f"fit: {p['measured_slope_mib_per_image']:.3f} MiB/image")
        ax.plot(xs, p["planner_mb"], "--", label=f"planner: {p['planner_slope_mib_per_image']:.3f} MiB/image")
        if self.composite:
            with_copies = p["planner_slope_mib_per_image"] + self.copies_mib
            ax.plot(xs, p["measured_intercept_mb"] + with_copies * xs, ":",
                    label=f"planner + oneDNN NHWC copies: {with_copies:.3f} MiB/image")
        ax.set(xlabel="batch", ylabel="MB", title=f"{self.sw_arch} x{self.sw_width}, {self.sw_size} px, native convolution")
        ax.legend(fontsize=8)
        fig.tight_layout()
        plt.show()

    def show_errata(self) -> None:
        """The 35 / 28 GiB accounts, ``Model``'s error (signatures: ``self.api``), the allocator counter."""
        self.blog_scenarios = {t: scenarios.keep_scenarios("resnet152", 224, 64, target_gib=t) for t in (35.0, 28.0)}
        show_table([r[:3] + r[4:] for r in scenario_rows(self.blog_scenarios)],     # GiB at 128: the blog_35gb claim
                   ["account (ResNet-152, 224 px)", "MiB/image", "GiB at 64", "over 35 GiB from", "over 28 GiB from"])
        self.allocator_mb = max(r["allocator_max_allocated_mb"] for r in self.sweep_rows)
        self.api = a = model_api_check()
        show_md(f"`Model(..., gradient_accumulation_steps=4)` → `{a['model_error'] or 'accepted'}`  \n"
                f"`max_memory_allocated()` in the sweep's CPU processes: {self.allocator_mb:.0f} MB")

    def results(self) -> dict:
        """The record ``helpers.conclusions.ch02.build`` reads and the notebook's results file keeps."""
        g, p, b = self.grad, self.pvm, self.base
        grad = {k: g[k] for k in GRAD_RESULT_KEYS}
        return dict(
            preset=self.preset, rehearsal=self.rehearse, device_target=b.device_target, arch=b.arch,
            world_size=b.world_size, oom_reproduced=bool(self.oom_error is not None and self.oom_error.kind == "oom"),
            oom_error_kind=self.oom_error.kind if self.oom_error else None, mem_cap_mb=self.cap_mb,
            accumulation_succeeded=bool(len(self.acc.summaries) == self.acc.config.world_size
                                        and self.acc.weights_identical),
            batch_per_rank=self.s.per_rank, micro_batch=self.s.micro, accumulation_steps=self.s.k,
            accumulated_samples_per_step=int(np.median(self.acc.metric("samples"))), conv_impl=self.s.impl,
            memory_measured=self.memory, peak_mb=self.peak, activation_mb=self.act, peak_rss_mb=self.peak_rss,
            throughput_img_s=self.tp, timed_step_s=self.tp_steps, grad_check_ranks=int(self.gc_ranks),
            peak_host_mb=self.host_mb,
            host_budget_mb=BUDGET_MB.get(self.preset) if not self.rehearse else None,
            **grad, planner_slope_mib_per_image=p["planner_slope_mib_per_image"],
            measured_slope_mib_per_image=p["measured_slope_mib_per_image"],
            planner_vs_measured_slope_ratio=p["planner_vs_measured_slope_ratio"], conv_kernels=self.conv_kernels,
            ncsp_copy_mib_per_image=self.copies_mib, composite_conv_passes=self.composite, published=self.published,
            blog_planner_gib=self.blog.total_gib, blog_activation_gib=self.blog.activation_bytes / GIB,
            blog_fits_40gb=bool(self.blog.fits(40)), blog_scenarios=self.blog_scenarios[35.0],
            blog_scenarios_28=self.blog_scenarios[28.0], allocator_max_allocated_mb=self.allocator_mb,
            model_has_gradient_accumulation_steps=self.api["has_argument"], model_error=self.api["model_error"])
