"""Chapter 04's steps (profiling): the profiled baseline, its cross-checks without the profiler, the fusion sweep,
fusion ids, the AMP levels and the before/after, each run as jobs, shown, and returned for the record."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from helpers.cells.run import FollowOn, chained_job, ran_follow_on
from helpers.conclusions import ch04
from helpers.conclusions.step_noise import compare, per_step, step_shares, unprofiled_steps
from helpers.core.config import FUSE_ALL, JobConfig, config_table, job_config
from helpers.core.step_times import steady_step_s
from helpers.job.launch import JobResult, run_job
from helpers.job.plan import runs_in_turn
from helpers.output.tables import show_md, show_table
from helpers.topics.amp_kernels import (conv_kernel_types, conv_kernels_note, cpu_fp16_flags, kernel_calls, kind_total,
                                       relative_to)
from helpers.topics.comm_fusion import (fusion_settings, gradient_bytes, isolate_compile_cache, job_gradient_bytes,
                                       predicted_buckets)
from helpers.topics.first_look import FirstLook, first_look_config, first_look_values, show_first_look
from helpers.topics.merged_trace import write_merged_trace
from helpers.topics.overlap_on_cards import show_overlap_calculation
from helpers.topics.profiling import JobProfile, job_comm_overlap, job_step_s, overhead_ratio, read_job_profile

# Per preset: job length, which buckets the fusion sweep tries, how many ranks the AMP jobs use; ``look_steps``
# (default 4): the first look's length, 6 at ci so that 4 split steps are judged (2 were 16 points off the profiler).
PLANS = {
    "ci": dict(steps=5, profile_from=3, look_steps=6, bucket_mb=[], index_bucket_kb=[], ids_with_fusion=False,
               amp_world_size=1, amp_steps=12, amp_profile_from=9),
    "cpu": dict(steps=12, profile_from=6, bucket_mb=[1], index_bucket_kb=[64, 512], ids_with_fusion=True,
                amp_world_size=2, amp_steps=12, amp_profile_from=6),
    "gpu8": dict(steps=40, profile_from=20, bucket_mb=[4, 16, 32], index_bucket_kb=[], ids_with_fusion=True,
                 amp_world_size=None, amp_steps=40, amp_profile_from=20),
    # gpu8 rehearsed on CPU (helpers.core.rehearsal): its ResNet-50 at 224 px on 2 ranks, one profiled step per job
    "rehearsal": dict(steps=3, profile_from=2, bucket_mb=[], index_bucket_kb=[], ids_with_fusion=False,
                      amp_world_size=None, amp_steps=3, amp_profile_from=2),
}
AMP_LEVELS = ("O0", "O1", "O2", "O3")
AMP_NOISE = 0.15            # the AMP band's floor: levels closer than 15 % on a shared 2-core machine are a tie
SWEEP_HEADERS = ["fusion", "calls/step", "buckets (predicted)", "call size (KB)", "step (s, unprofiled)", "comm share"]
SHOWN = ("rank", "step (s)", "compute (s)", "communication (s)", "comm share")   # per-rank tables; plots show all
UNFUSED = "unfused (default)"
# What must be equal for two jobs' step times to compare (before/after): same work per step, same ranks, the same
# steps timed (job_step_s: the unprofiled steps 1..profile_skip_steps-1) with the profiler in the same state.
MEASURED_ALIKE = ("device_target", "world_size", "global_batch", "micro_batch", "accumulation_steps", "image_size",
                  "arch", "width", "stem", "conv_impl", "steps", "profile", "profile_skip_steps", "threads_per_rank",
                  "bind_cores")


def chapter_plan(preset: str, rehearse: bool, **overrides) -> dict:
    """The preset's plan (``PLANS``), with every override that is not None."""
    plan = dict(PLANS["rehearsal" if rehearse else preset])
    plan.update({k: v for k, v in overrides.items() if v is not None})
    return plan


@dataclass
class Chapter:
    """The chapter's baseline job config, its plan and its model's gradient sizes; runs its jobs."""

    preset: str
    rehearse: bool
    base: JobConfig
    plan: dict
    param_bytes: list[int]
    progress: str = "auto"
    code_cell: JobResult | None = None      # the code cell's launch: the jobs it ran after the cell are not run again
    from_code_cell: list[str] = field(default_factory=list)     # the jobs taken from it

    def run(self, name: str, **changes) -> JobResult:
        """``base`` with ``changes`` (the code cell's launch's result when it ran it, ``chained_job``); AMP /
        no-reduction / fusion-id jobs get a compile cache of their own."""
        cfg = self.base.replace(name=name, **changes)
        ran = chained_job(self.code_cell, cfg)
        if ran is not None:
            self.from_code_cell.append(name)
            return ran
        return run_job(isolate_compile_cache(cfg), progress=self.progress)

    def run_in_turn(self, cfgs: list[JobConfig]) -> list[JobResult]:
        """Jobs on the same ranks: on CPU one launch runs them in turn (``run_job``'s ``more``), on a card (and in its
        rehearsal) one launch each."""
        if not runs_in_turn(self.base):
            return [run_job(isolate_compile_cache(c), progress=self.progress) for c in cfgs]
        first = run_job(isolate_compile_cache(cfgs[0]), progress=self.progress, more=tuple(cfgs[1:]))
        return [first, *first.more]

    def run_profiled(self, name: str, **changes) -> ProfiledJob:
        """A profiled job, read with its gradient sizes (the bytes AllReduce moves where no profile measures them)."""
        result = self.run(name, **changes)
        return ProfiledJob(result, read_job_profile(result, job_gradient_bytes(result)))


@dataclass
class ProfiledJob:
    """A finished profiled job and its profile."""

    result: JobResult
    profile: JobProfile
    trace_path: str = ""

    @property
    def step_s(self) -> float:
        """Steady step time without the profiler (the job's unprofiled steps)."""
        return job_step_s(self.result)


def prepare(preset: str, rehearse: bool, progress: str = "auto", *, steps=None, profile_from=None, bucket_mb=None,
            index_bucket_kb=None, amp_world_size=None, **job_overrides) -> Chapter:
    """The baseline (the preset's model with MindSpore's default communication, ``{}``: one AllReduce per gradient),
    profiled from step ``profile_from`` on, so steps 1..profile_from-1 run without the profiler; shows it."""
    plan = chapter_plan(preset, rehearse, steps=steps, profile_from=profile_from, bucket_mb=bucket_mb,
                        index_bucket_kb=index_bucket_kb, amp_world_size=amp_world_size)
    base = job_config(preset, rehearse=rehearse, chapter="04", name="baseline", steps=plan["steps"], comm_fusion={},
                      profile=True, profile_skip_steps=plan["profile_from"], **job_overrides)
    plan["amp_world_size"] = plan["amp_world_size"] or base.world_size
    ch = Chapter(preset, rehearse, base, plan, gradient_bytes(base), progress)
    shown = [r for r in config_table(base) if r[0] != "name" and r[1] != "n/a"]      # n/a: a card setting
    show_table(shown + [("profiled steps", f"{plan['profile_from']}..{plan['steps'] - 1}"),
                        ("AMP jobs: ranks", plan["amp_world_size"])], ["setting", "value"])
    return ch


def show_columns(rows, headers, keep=SHOWN) -> None:
    """Shows the columns of ``rows`` whose header is in ``keep`` (the rest are in the plot and the results file)."""
    idx = [i for i, h in enumerate(headers) if h in keep]
    show_table([[row[i] for i in idx] for row in rows], [headers[i] for i in idx])


# ------------------------------------------------------------------------------ 0: the first look, before the profiler
def same_ranks_jobs(ch: Chapter) -> dict[str, dict]:
    """The chapter's jobs on the baseline's ranks after the first look, in the notebook's order: name -> changes
    to ``ch.base`` (sections 1, 2, 3 and 4)."""
    jobs = {"baseline": {}, "no_reduce": dict(grad_reduce=False, profile=False, steps=ch.base.profile_skip_steps)}
    jobs.update({name: dict(comm_fusion=fusion) for name, fusion in fusion_settings(ch.plan, ch.param_bytes).values()})
    jobs["cell_ids_only"] = dict(cell_comm_fusion=True)
    if ch.plan["ids_with_fusion"]:
        jobs["cell_ids_with_fusion"] = dict(cell_comm_fusion=True, comm_fusion=FUSE_ALL)
    return jobs


def first_look_job(ch: Chapter) -> FollowOn:
    """The first look as the code cell's follow-on (``%%ranks ... --then``), and on CPU the chapter's other jobs on
    the same ranks after it (``same_ranks_jobs``): one launch for all. On a card (and in its rehearsal) each keeps a
    launch of its own (a process's second profiler session was measured on CPU only)."""
    more = () if not runs_in_turn(ch.base) else \
        tuple(ch.base.replace(name=name, **changes) for name, changes in same_ranks_jobs(ch).items())
    return FollowOn(first_look_config(ch.base, ch.plan.get("look_steps", 4)), more=more)


def first_look(ch: Chapter, code_cell=None) -> FirstLook | None:
    """The baseline's config without the profiler, every step after the first split by the job itself (the code
    cell's follow-on when ``code_cell`` ran it, else a job of its own), shown (``show_first_look``). The chapter's
    later jobs come from ``code_cell`` too where it ran them (``Chapter.run``)."""
    ch.code_cell = code_cell
    cfg = first_look_config(ch.base, ch.plan.get("look_steps", 4))
    job = code_cell if ran_follow_on(code_cell, cfg) else \
        ch.run("first_look", profile=cfg.profile, steps=cfg.steps, env=cfg.env)
    return show_first_look(job, show_columns)


def compare_first_look(look: FirstLook, baseline: ProfiledJob) -> float:
    """Shows the first look's communication share against the profiler's; returns their absolute difference."""
    diff = abs(look.comm_share - baseline.profile.comm_share)
    show_md(f"Communication share: first look {look.comm_share:.3f}, profiler {baseline.profile.comm_share:.3f}.")
    return diff


# ------------------------------------------------------------------------------ 1-2: the baseline and its cross-checks
def profile_baseline(ch: Chapter, look: FirstLook | None = None) -> ProfiledJob:
    """The baseline job, its per-rank table and (when there is a kernel timeline) its merged trace; with the first
    ``look``, its communication share against the profiler's."""
    job = ch.run_profiled("baseline")
    ch.param_bytes = pb = job.profile.gradient_bytes          # the job's own model (its class count)
    show_md(f"Model: **{ch.base.arch}** (width {ch.base.width}), **{len(pb)} gradient tensors**, "
            f"**{sum(pb) / 2**20:.2f} MiB** of float32 gradients per step, largest tensor {max(pb) / 2**20:.3f} MiB.")
    job.trace_path = str(write_merged_trace(job.result)) if job.profile.has_timeline else ""
    show_columns(job.profile.table(), job.profile.TABLE_HEADERS)
    show_md(f"Merged trace for https://ui.perfetto.dev: `{job.trace_path}`." if job.trace_path else
            "No kernel timeline in this profile (on GPU, MindSpore 2.10 writes no trace_view.json and the kernel "
            "timestamps file was missing): the breakdown above comes from the per-type op tables.")
    if look is not None:
        compare_first_look(look, job)
    return job


@dataclass
class CrossCheck:
    """The profiler's overhead, and the reduction's cost measured without a profiler (step times in s)."""

    overhead: float
    t_base: float
    t_profiled: float
    t_alone: float

    @property
    def share_without_profiler(self) -> float:
        return 1.0 - self.t_alone / self.t_base


def cross_check(ch: Chapter, baseline: ProfiledJob) -> CrossCheck:
    """Runs the baseline without gradient reduction (no profiler) and shows the three step times."""
    no_reduce = ch.run("no_reduce", **same_ranks_jobs(ch)["no_reduce"])
    out = CrossCheck(overhead_ratio(baseline.result.metric("step_s"), profiled_from=ch.base.profile_skip_steps),
                     baseline.step_s, steady_step_s(baseline.profile.step_s, skip=0, ranks="mean"),
                     job_step_s(no_reduce))
    show_table([("baseline, no profiler", out.t_base), ("baseline, profiled", out.t_profiled),
                ("no gradient reduction, no profiler", out.t_alone)], ["job", "step time (s)"])
    return out


# ------------------------------------------------------------------------------ 3-4: fusion
def sweep_row(label: str, job: ProfiledJob) -> dict:
    """One row of the fusion sweep: AllReduce calls per step (measured, and the gradient buckets predicted from the
    setting), the mean call size (bytes measured on CPU, else the gradients' over the calls), step time, comm
    share; on CPU also whether the measured bytes match the gradients' (``sizes_agree``)."""
    jp, cfg = job.profile, job.result.config
    return dict(label=label, allreduce_per_step=jp.allreduce_per_step, bucket_mb=jp.mean_bucket_mb,
                predicted_buckets=predicted_buckets(jp.gradient_bytes, cfg.comm_fusion) if jp.gradient_bytes else None,
                step_s=job.step_s, comm_share=jp.comm_share, sizes_agree=jp.sizes_agree())


@dataclass
class Sweep:
    """The fusion sweep's jobs (baseline first, then ``auto``) and one row each."""

    jobs: dict[str, ProfiledJob]
    rows: list[dict] = field(default_factory=list)
    on_cards: dict = field(default_factory=dict)      # what overlap would save on cards: a calculation, not measured

    @property
    def fused(self) -> ProfiledJob:
        return self.jobs["auto"]


def fusion_sweep(ch: Chapter, baseline: ProfiledJob) -> Sweep:
    """Runs the plan's fused jobs; shows calls, call size, step time, comm share, then overlap on cards (calculated)."""
    jobs = {UNFUSED: baseline}
    for label, (name, fusion) in fusion_settings(ch.plan, ch.param_bytes).items():
        jobs[label] = ch.run_profiled(name, comm_fusion=fusion)
    sweep = Sweep(jobs, [sweep_row(k, j) for k, j in jobs.items()])
    show_table([(d["label"], d["allreduce_per_step"], "?" if d["predicted_buckets"] is None else d["predicted_buckets"],
                 1024 * d["bucket_mb"], d["step_s"], d["comm_share"]) for d in sweep.rows], SWEEP_HEADERS)
    off = [d["label"] for d in sweep.rows if d["sizes_agree"] is False]
    if off:     # CPU: the bytes the profile measured are not the model's gradients
        show_md(f"**Check failed:** the AllReduce bytes measured for {', '.join(off)} differ from the model's "
                f"{sum(ch.param_bytes) / 2**20:.2f} MiB of gradients by more than 1 %.")
    sweep.on_cards = show_overlap_calculation()       # gpu8's ResNet-50 buckets at published bandwidths
    return sweep


def cell_fusion_ids(ch: Chapter, baseline: ProfiledJob) -> dict[str, ProfiledJob | None]:
    """``Cell.set_comm_fusion`` ids alone (and, when the plan says so, with fusion on); shows calls and step time."""
    planned = same_ranks_jobs(ch)
    jobs = {"ids_only": ch.run_profiled("cell_ids_only", **planned["cell_ids_only"]), "ids_with_fusion": None}
    rows = [("default", baseline.profile.allreduce_per_step, baseline.step_s),
            ("Cell.set_comm_fusion ids only", jobs["ids_only"].profile.allreduce_per_step, jobs["ids_only"].step_s)]
    if ch.plan["ids_with_fusion"]:
        on = jobs["ids_with_fusion"] = ch.run_profiled("cell_ids_with_fusion", **planned["cell_ids_with_fusion"])
        rows.append(("ids + comm_fusion auto", on.profile.allreduce_per_step, on.step_s))
    show_table(rows, ["setting", "AllReduce calls / step", "step time (s)"])
    return jobs


# ------------------------------------------------------------------------------ 5: mixed precision
def amp_ranks_note(amp_world_size: int, base: JobConfig, preset: str) -> str:
    """One sentence: how many ranks the mixed-precision jobs use, and the chapter's when fewer (why: appendix)."""
    fewer = f" (other `{preset}` jobs: {base.world_size}; why: appendix)"
    return (f"AMP jobs: **{amp_world_size} rank(s)**{fewer if amp_world_size != base.world_size else ''}, "
            f"fusion `auto`, {base.batch_per_rank} images per rank.")


def amp_kinds(conv_types) -> list[str]:
    """The kernel types the AMP table counts: casts, the convolutions' kernels, BatchNorm and ReLU."""
    return ["Cast", *conv_types, "BatchNorm", "BatchNormGrad", "ReLU"]


def amp_table_rows(step_s: dict, types_tables: dict, kinds, device_target: str = "CPU") -> list[tuple]:
    """Per level: step time, ratio to O0, and "calls / ms per step" of each kind (under the device's names for it)."""
    return [(k, step_s[k], step_s[k] / step_s["O0"])
            + tuple("{:.0f} / {:.1f}".format(*kind_total(types_tables[k], t, device_target)) for t in kinds)
            for k in step_s]


@dataclass
class Amp:
    """The AMP levels' jobs, step times and kernel counts."""

    jobs: dict[str, ProfiledJob]
    world_size: int
    conv_impl: str                     # resolved: "native" or "im2col" (conv_impl="auto" measured it)
    conv_types: tuple[str, ...]
    kinds: list[str]
    kernels: dict                      # level -> kernel type -> executions per step

    @property
    def step_s(self) -> dict[str, float]:
        return {k: j.step_s for k, j in self.jobs.items()}

    @property
    def relative(self) -> dict:
        """Each level over O0; a tie within ``AMP_NOISE`` or, if wider, the levels' step-to-step noise band."""
        band = compare(1.0, *(unprofiled_steps(j.result) for j in self.jobs.values()), floor=AMP_NOISE)["band"]
        return relative_to(self.step_s, "O0", noise=band)


def amp_levels(ch: Chapter) -> Amp:
    """One fused job per AMP level on ``amp_world_size`` ranks (on CPU one launch runs them in turn); shows step
    times and the kernels each level ran."""
    ws, base, plan = ch.plan["amp_world_size"], ch.base, ch.plan
    show_md(amp_ranks_note(ws, base, ch.preset))
    cfgs = [base.replace(name=f"amp_{level}", amp_level=level, comm_fusion=FUSE_ALL, world_size=ws,
                         global_batch=base.batch_per_rank * ws, steps=plan["amp_steps"],
                         profile_skip_steps=plan["amp_profile_from"]) for level in AMP_LEVELS]
    jobs = {level: ProfiledJob(r, read_job_profile(r, job_gradient_bytes(r)))
            for level, r in zip(AMP_LEVELS, ch.run_in_turn(cfgs))}
    conv_impl = jobs["O0"].result.config.conv_impl
    conv_types = conv_kernel_types(conv_impl)
    kinds = amp_kinds(conv_types)
    ktab = {k: j.profile.kernel_types() for k, j in jobs.items()}
    device = base.device_target
    amp = Amp(jobs, ws, conv_impl, conv_types, kinds, {k: kernel_calls(ktab[k], kinds, device) for k in jobs})
    show_md(conv_kernels_note(conv_impl) + " Kernel columns: calls / ms per step.")
    show_columns(amp_table_rows(amp.step_s, ktab, kinds, device), ["level", "step (s)", "vs O0", *kinds],
                 ["level", "vs O0", *kinds])                                     # the plot shows the seconds
    return amp


# ------------------------------------------------------------------------------ 6: before / after, errata
def measured_differently(a: JobConfig, b: JobConfig) -> list[str]:
    """The ``MEASURED_ALIKE`` fields in which two jobs differ: [] when their step times compare."""
    return [k for k in MEASURED_ALIKE if getattr(a, k) != getattr(b, k)]


def setting_label(fusion: str, cfg: JobConfig) -> str:
    """What a before/after entry ran: its fusion setting and its AMP level (the preset's own, e.g. gpu8's O2)."""
    return f"fusion {fusion}, AMP {cfg.amp_level}"


def after_candidates(baseline: ProfiledJob, entries) -> dict[str, ProfiledJob]:
    """label -> job for each ``(fusion label, job)`` measured like ``baseline``, one per setting (fusion, AMP
    level; the first given wins, so the sweep's own ``auto`` stands for the AMP job at the preset's level)."""
    out, seen = {}, set()
    for fusion, job in entries:
        cfg = job.result.config
        setting = (json.dumps(cfg.comm_fusion, sort_keys=True), cfg.amp_level, cfg.loss_scale)
        if setting in seen or measured_differently(cfg, baseline.result.config):
            continue
        seen.add(setting)
        out[setting_label(fusion, cfg)] = job
    return out


def before_after(ch: Chapter, t_base: float, sweep: Sweep, amp: Amp) -> dict:
    """The baseline against the fastest configuration measured like it (same ranks, batch, timed steps and
    profiler schedule: ``MEASURED_ALIKE``), in img/s; AMP jobs measured otherwise are left out, and said so."""
    baseline = sweep.jobs[UNFUSED]
    entries = list(sweep.jobs.items()) + [("auto", j) for j in amp.jobs.values()]
    candidates = after_candidates(baseline, entries)
    label = min(candidates, key=lambda k: candidates[k].step_s)
    gb = baseline.result.config.global_batch
    out = dict(label=label, before_label=setting_label(UNFUSED, baseline.result.config), before=gb / t_base,
               after=gb / candidates[label].step_s, after_steps=unprofiled_steps(candidates[label].result))
    show_table([(f"{out['before_label']} → {label}", out["before"], out["after"], out["after"] / out["before"])],
               [f"{ch.base.world_size} ranks", "img/s before", "img/s after", "speed-up"])
    left_out = sorted({k for k, j in amp.jobs.items() if measured_differently(j.result.config, baseline.result.config)})
    if left_out:
        differ = measured_differently(amp.jobs[left_out[0]].result.config, baseline.result.config)
        show_md(f"Not compared: the AMP jobs ({', '.join(left_out)}), whose {', '.join(differ)} differ.")
    return out


def errata(amp: Amp) -> dict:
    """Shows what the installed MindSpore says; returns the facts and the O3 verdict (section 5's kernels)."""
    facts = ch04.mindspore_facts()
    show_table(ch04.facts_rows(facts), ["checked", "this MindSpore says"])
    return dict(facts, o3_same_kernels=ch04.same_kernels(amp.kernels, amp.conv_types))


def recorded_values(ch: Chapter, baseline: ProfiledJob, cross: CrossCheck, sweep: Sweep, ids: dict, amp: Amp,
                    after: dict, facts: dict, look: FirstLook | None = None) -> dict:
    """What the chapter records (``runs/results/04_profiling.json``) and ``helpers.conclusions.ch04.build`` reads."""
    bp, fp = baseline.profile, sweep.fused.profile
    with_fusion = ids["ids_with_fusion"]
    return dict(
        preset=ch.preset, rehearsal=ch.rehearse, device_target=ch.base.device_target, world_size=ch.base.world_size,
        gradient_tensors=len(ch.param_bytes),
        allreduce_per_step={"baseline": bp.allreduce_per_step, "fused": fp.allreduce_per_step},
        step_time_s={"baseline": cross.t_base, "fused": sweep.fused.step_s},
        timed_step_s={"baseline": unprofiled_steps(baseline.result), "fused": unprofiled_steps(sweep.fused.result),
                      "baseline_profiled": per_step(baseline.result.metric("step_s"), ch.base.profile_skip_steps,
                                                    ranks="mean"), "after": after["after_steps"]},
        comm_share={"baseline": bp.comm_share, "fused": fp.comm_share}, comm_overlap=job_comm_overlap(bp),
        comm_share_per_step={"baseline": step_shares(bp), "fused": step_shares(fp)},
        comm_share_without_profiler=cross.share_without_profiler, no_reduce_step_time_s=cross.t_alone,
        profiler_overhead_ratio=cross.overhead, fusion_sweep=sweep.rows, overlap_on_cards=sweep.on_cards,
        cell_comm_fusion_allreduce_per_step=ids["ids_only"].profile.allreduce_per_step,
        cell_ids_with_fusion_allreduce_per_step=with_fusion.profile.allreduce_per_step if with_fusion else None,
        amp_step_time_s=amp.step_s, amp_relative=amp.relative,
        amp_timed_step_s={k: unprofiled_steps(j.result) for k, j in amp.jobs.items()}, amp_world_size=amp.world_size,
        conv_impl=amp.conv_impl, conv_kernel_types=list(amp.conv_types), amp_kernels_per_step=amp.kernels,
        amp_cast_kernels_per_step={k: amp.kernels[k]["Cast"] for k in amp.kernels},
        o3_keeps_conv_bn_relu_kernels=facts["o3_same_kernels"], cpu_fp16=cpu_fp16_flags(),
        img_per_s={"before": after["before"], "after": after["after"]}, after_config=after["label"],
        before_config=after["before_label"], gradient_mb=sum(ch.param_bytes) / 2**20,
        mindspore_version=facts["mindspore_version"], comm_fusion_module_exists=facts["comm_fusion_module_exists"],
        fusion_enabled_by_default=facts["fusion_enabled_by_default"], trace_path=baseline.trace_path,
        jobs_from_code_cell=ch.from_code_cell,
        **(first_look_values(look, bp.comm_share) if look else {}),
    )
