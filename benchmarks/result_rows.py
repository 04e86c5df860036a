"""The rows of ``benchmarks/RESULTS.md``: each benchmark's JSON turned into (what, measured, goal, source, load).

``goal_rows(results)`` makes them; ``judge(value, goal)`` (``benchmarks.row_kit``) says met / missed by how much.
"""

from __future__ import annotations

import json

from benchmarks.peer_rows import comparison_rows, pytorch_rows
from benchmarks.row_kit import Row, Rows, _best, _load, _run_loads, get_in, judge

__all__ = ["COURSE_GOALS_S", "Row", "get_in", "goal_rows", "judge"]

COURSE_GOALS_S = {"ci": 360.0, "cpu": 900.0}   # ci <= 6 min, cpu <= 15 min on 2 cores (issue 31)


def course_rows(rows: Rows) -> None:
    """The whole course's wall time per preset, and how much of it goes to starting jobs."""
    d = rows.results.get("course_time") or {}
    for preset, limit in COURSE_GOALS_S.items():
        t, load = get_in(d, preset, "total_s"), _load(d.get(preset) or {})
        jobs = get_in(d, preset, "jobs", "all")
        note = "" if t is None else ("all chapters ok" if get_in(d, preset, "all_ok") else "some chapter failed")
        if t is not None and jobs and jobs.get("jobs"):
            note += (f"; its {jobs['jobs']} jobs' launches and first steps alone took "
                     f"{jobs['launch_s'] + jobs['first_step_s']:.0f} s")
        rows.add(f"whole course, preset {preset}, seconds", t, f"<= {limit:g}", "course_time", note, unit="s",
                 load=load)
        if jobs and jobs.get("jobs"):
            rows.add(f"course {preset}: seconds launching jobs (msrun start to the last rank through init())",
                     jobs["launch_s"], "", "course_time",
                     f"{jobs['jobs']} jobs, {jobs['launch_s'] / jobs['jobs']:.0f} s each; first steps (compilation) "
                     f"{jobs['first_step_s']:.0f} s, other steps and evaluation {jobs['rest_s']:.0f} s, exits "
                     f"{jobs['exit_s']:.0f} s; all jobs {jobs['total_s']:.0f} s of the course's {t:.0f} s", unit="s",
                     load=load)
        floor = get_in(d, preset, "noop_job", "median_s")
        if jobs and floor:
            n = sum(1 for j in get_in(d, preset, "jobs", "jobs") or [] if j.get("world_size") == 8)
            rows.add(f"course {preset}: 8-rank jobs x an empty 8-rank job's seconds (the start-up floor)", n * floor,
                     "", "course_time", f"{n} jobs x {floor:.1f} s (run_job of task noop: msrun, scheduler, 8 processes "
                     f"importing MindSpore, init(), exit; median of {len(get_in(d, preset, 'noop_job', 'seconds') or [])}), "
                     f"{n * floor / t:.0%} of the course", unit="s", load=load)
    before = d.get("ci_before_cells") or {}
    if before.get("total_s") and get_in(d, "ci", "total_s"):
        cells = [j["total_s"] for j in get_in(d, "ci", "jobs", "jobs") or [] if j.get("cell")]
        rows.add("whole course ci with the chapters' %%ranks cells / without them (same machine, cold cache)",
                 get_in(d, "ci", "total_s") / before["total_s"], "", "course_time",
                 f"{get_in(d, 'ci', 'total_s'):.0f} s ({get_in(d, 'ci', 'machine', 'date_utc')}) against "
                 f"{before['total_s']:.0f} s for {before['commit']} ({get_in(before, 'machine', 'date_utc')}) on this "
                 f"machine (empty 8-rank job {get_in(d, 'ci', 'noop_job', 'median_s'):.1f} s "
                 f"against {before['noop_job']['median_s']:.1f} s); the {len(cells)} cell jobs took "
                 f"{sum(cells):.0f} s (chapter 00's two of them: its first job and the same cell on 2 nodes)",
                 load=_load(before))
    ci_rows(rows)


def ci_rows(rows: Rows) -> None:
    """``benchmarks.ci_time``: ``.ci/run`` on a clean clone, and which test groups its seconds went to."""
    d = rows.results.get("ci_time") or {}
    note = ""
    if d:
        groups = ", ".join(f"{k} {v:.0f}" for k, v in list((d.get("groups_s") or {}).items())[:6])
        note = (("FAILED: " if d.get("returncode") else "") + f"commit {d.get('commit')}: {d.get('summary')}; "
                f"pytest {d.get('pytest_s') or 0:.0f} s, venv and installs {d.get('setup_s') or 0:.0f} s; "
                f"test seconds by group (2 test processes, so they add up to about twice pytest's): {groups}")
    rows.add(".ci/run on a clean clone, seconds", d.get("total_s"), "<= 900", "ci_time", note, unit="s")


def _mean_load(d: dict, variant: str) -> float | None:
    xs = [x.get("load_avg_1min") for x in (get_in(d, "runs", variant) or []) if isinstance(x, dict)]
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def knob_rows(rows: Rows) -> None:
    """Each knob against its reference, and the recommended preset settings (with a load caveat)."""
    d = rows.results.get("knobs")
    if not d:
        return
    for k, v in (d.get("ratios") or {}).items():
        ref = (d.get("reference") or {}).get(k, "base")
        rows.add(f"knob {k} / {ref}, img/s", v, "", "knobs", _best(get_in(d, "ratios_best_step", k)).lstrip("; ")
                 + f"; load during its runs {_run_loads(d, k)} vs {ref}'s {_run_loads(d, ref)}")
    base_load = _mean_load(d, "base")
    others = [_mean_load(d, k) for k, ref in (d.get("reference") or {}).items() if ref == "base" and k != "base"]
    caveat = ("; caution: base ran at a higher load than every variant, so the ratios overstate the knobs"
              if base_load is not None and others and all(o is not None and o < base_load for o in others) else "")
    rows.add("knobs: recommended ci/cpu preset settings", None, "", "knobs",
             json.dumps(d.get("recommendation", {}), separators=(", ", ": ")) + caveat)


def launch_and_data_rows(rows: Rows) -> None:
    """Chapters 0-1's benchmarks: launch overhead and the stratified split."""
    d = rows.results.get("launch_overhead")
    if d:
        rows.add("run_job / bare msrun, wall time of an 8-rank no-op job", d.get("ratio_run_job_over_msrun"),
                 "<= 1.10", "launch_overhead")
        if d.get("ratio_slurm_over_msrun") is not None:
            rows.add("run_job through Slurm (2 nodes x 4) / local bare msrun, 8-rank no-op job",
                     d["ratio_slurm_over_msrun"], "<= 1.5", "launch_overhead")
    d = rows.results.get("sampler")
    if d:
        rows.add("stratified split vs iterating DistributedSampler, speed-up", d.get("speedup_vs_iterating"), ">= 20",
                 "sampler")
        rows.add("stratified split of all 8 shards, seconds", d.get("stratified_all_shards_s"), "< 0.5", "sampler",
                 unit="s")
        rows.add("stratified split, worst shard's max TV", get_in(d, "max_tv", "stratified"), "<= 0.002", "sampler",
                 unit="")


def _import_floor(d: dict) -> str:
    """Note text: one import's CPU seconds, and what 9 of them cost on this machine's cores."""
    cpu, floor = get_in(d, "empty_job", "import_cpu_s", "median"), get_in(d, "empty_job", "import_floor_s", "median")
    if cpu is None or floor is None:
        return ""
    return (f"; one import mindspore takes {cpu:.2f} CPU s, so 9 processes need {floor:.1f} s of these cores "
            "before any init()")


def startup_rows(rows: Rows) -> None:
    """``benchmarks.startup``: the empty 8-rank job by phase, the compile cache's first step, the jit levels."""
    d = rows.results.get("startup")
    if not d:
        rows.add("empty 8-rank job (msrun -> every rank through init() -> exit), seconds", None, "<= 8", "startup",
                 unit="s")
        return
    e = {k: get_in(d, "empty_job", k, "median") for k in ("wall_s", "until_processes_start_s", "import_mindspore_s",
                                                          "init_s", "init_spread_s", "after_last_rank_ready_s")}
    if None not in e.values():
        rows.add("empty 8-rank job (msrun -> every rank through init() -> exit), seconds", e["wall_s"], "<= 8",
                 "startup", f"median of {d.get('repeats')} (range {get_in(d, 'empty_job', 'wall_s', 'min')}-"
                 f"{get_in(d, 'empty_job', 'wall_s', 'max')}); msrun's own start {e['until_processes_start_s']:.1f} s, "
                 f"import mindspore {e['import_mindspore_s']:.1f} s per rank (9 processes at once), init() "
                 f"{e['init_s']:.1f} s (waits for the slowest import, then MindSpore's fixed 3 s address-exchange "
                 f"sleep: ranks' init() ends {e['init_spread_s']:.1f} s apart), end {e['after_last_rank_ready_s']:.1f} s"
                 + _import_floor(d), unit="s")
    cold, warm = get_in(d, "first_step", "cold", "median"), get_in(d, "first_step", "warm", "median")
    if cold and warm:
        rows.add("first step (compilation) with a warm / a cold compile cache", warm / cold, "", "startup",
                 f"{d.get('preset')} preset, 8 ranks: cold {cold:.1f} s, warm {warm:.1f} s (median of "
                 f"{d.get('repeats')})")
    base = get_in(d, "jit_levels", "default", "first_step_s", "median")
    for level in ("O0", "O1"):
        lv = get_in(d, "jit_levels", level) or {}
        first = get_in(lv, "first_step_s", "median")
        if base and first:
            rows.add(f"jit_level {level} / MindSpore's default, compile + first step (1 process, ci model)",
                     first / base, "", "startup", f"step time {get_in(lv, 'step_s', 'median')} s vs "
                     f"{get_in(d, 'jit_levels', 'default', 'step_s', 'median')} s; same losses: "
                     f"{lv.get('same_losses_as_default')}")


def startup_env_rows(rows: Rows) -> None:
    """``benchmarks.startup --empty-env``: the course's 1 s heartbeat against MindSpore's default, from its logs."""
    d = rows.results.get("startup_env")
    if not d:
        return
    on, off = (get_in(d, side, "all_ranks_through_init_s", "median") for side in ("without", "with"))
    if on and off:
        env = ", ".join(f"{k}={v}" for k, v in d.get("env", {}).items())
        rows.add("every rank through init() after the last registration: course heartbeat 1 s / " + env,
                 on / off, "", "startup_env",
                 f"{on:.2f} s vs {off:.2f} s, medians of {d.get('repeats')} alternated empty 8-rank jobs timed from "
                 f"MindSpore's INFO logs; last rank out of the cluster build "
                 f"{get_in(d, 'without', 'last_rank_out_of_build_s', 'median')} s vs "
                 f"{get_in(d, 'with', 'last_rank_out_of_build_s', 'median')} s; then "
                 f"{get_in(d, 'without', 'address_sleeps', 'median')} of 8 ranks sleep a fixed 3 s in the CPU "
                 "collectives' address exchange (sleep(3) in ms_collective_node.cc; no setting shortens it)")


def host_memory_rows(rows: Rows) -> None:
    """``benchmarks.host_memory``: each chapter's peak host memory (the kernel and every job) against its budget."""
    d = rows.results.get("host_memory") or {}
    for preset, budget in (("ci", 6144), ("cpu", 10240)):
        for stem, c in sorted((get_in(d, preset, "chapters") or {}).items()):
            jobs = c.get("jobs") or []
            big = max(jobs, key=lambda j: j.get("peak_host_mb") or 0) if jobs else {}
            rows.add(f"chapter {stem[:2]}, preset {preset}, peak host memory (kernel + jobs), MB",
                     c.get("peak_host_mb"), f"<= {budget}", "host_memory",
                     f"largest job {big.get('name')} on {big.get('world_size')} ranks: {big.get('peak_host_mb')} MB "
                     f"(estimate before launch {big.get('need_mb')})" if big else "", unit="MB",
                     load=(get_in(d, preset, "machine", "load_avg_1_5_15") or [None])[0])


def phase_rows(rows: Rows) -> None:
    """``benchmarks.sampler_phases``: chapter 01's splits as phases of one job against one job each."""
    d = rows.results.get("sampler_phases")
    if not d:
        return
    med = d.get("median_s") or {}
    rows.add("chapter 01's four splits: one job (phases) / one job each, wall seconds", d.get("one_job_over_own_jobs"),
             "< 1", "sampler_phases",
             f"{d.get('preset')} preset, {d.get('steps')} steps per split, median of {d.get('repeats')} alternated: "
             f"{med.get('one_job')} s vs {med.get('own_jobs')} s; largest per-step loss difference between the two "
             f"ways {d.get('max_loss_diff')}")


def shared_compile_rows(rows: Rows) -> None:
    """``benchmarks.shared_compile``: a cold cache, ranks loading rank 0's compiled step / each compiling its own."""
    d = rows.results.get("shared_compile")
    if not d:
        return
    med = d.get("median") or {}
    rows.add(f"cold compile cache, {d.get('world_size')} ranks: first step, ranks load rank 0's graph / each compiles",
             d.get("first_step_shared_over_own"), "< 1", "shared_compile",
             f"{d.get('preset')} preset, median of {d.get('repeats')} alternated: "
             f"{get_in(med, 'shared', 'first_step_s'):.1f} s vs {get_in(med, 'own', 'first_step_s'):.1f} s; job wall "
             f"{d.get('wall_shared_over_own', 0):.2f}x; same losses and weights: {d.get('same_losses_and_weights')}")



def _hybrid_note(d: dict) -> str:
    """Preset, classes and each layout's median img/s with its runs' range (when the runs were repeated)."""
    parts = []
    for name in ("2x4", "8x1"):
        ips = get_in(d, "layouts", name, "img_per_s_runs")
        if ips:
            median = get_in(d, "layouts", name, "img_per_s")
            parts.append(f"{name} {median:.0f} img/s (runs {min(ips):.0f}-{max(ips):.0f})")
    head = f"{d.get('preset')} preset, {d.get('num_classes')} classes"
    return head + (f"; median of {d.get('repeats')}: " + " vs ".join(parts) if parts else "")


def training_rows(rows: Rows) -> None:
    """Chapters 2-4's benchmarks: accumulation, comm fusion, the hybrid layout, the convolution choice."""
    d = rows.results.get("accumulation")
    if d:
        for case, c in (d.get("cases") or {}).items():
            goal = case == "oom_experiment"   # the chapter's experiment; tiny micro-batches show the fixed cost
            rows.add(f"accumulation ({case}): activation memory accumulated / full batch",
                     c.get("activation_ratio_accumulated_over_full"), "<= 0.35" if goal else "", "accumulation")
            rows.add(f"accumulation ({case}): img/s accumulated / full batch",
                     c.get("throughput_ratio_accumulated_over_full"), ">= 0.90" if goal else "", "accumulation",
                     "" if goal else "micro-steps of a few images: a graph launch's fixed cost dominates")
        rows.add("memory planner / measured activation slope", get_in(d, "planner", "planner_vs_measured_slope_ratio"),
                 "0.75..1.25", "accumulation", "native convolution; on AVX-512 oneDNN's composite kernel also books "
                 "NHWC copies of each convolution's input and output, which the planner does not count (chapter 02, "
                 "section 5, prints planner + copies against the measured slope)")
        if d.get("planner_im2col"):
            rows.add("memory planner / measured activation slope (im2col)",
                     get_in(d, "planner_im2col", "planner_vs_measured_slope_ratio"), "0.75..1.25", "accumulation",
                     "im2col convolution")
    lever_result_rows(rows)
    bn_group_rows(rows)
    d = rows.results.get("comm_fusion")
    if d:
        rows.add("comm fusion: fused / per-tensor AllReduce step time", d.get("step_time_ratio_fused_over_baseline"),
                 "<= 0.6", "comm_fusion", f"{d.get('preset')} preset, AllReduce per step "
                 f"{get_in(d, 'allreduce_per_step', 'baseline')} -> {get_in(d, 'allreduce_per_step', 'fused')}")
    d = rows.results.get("time_split")
    if d:
        rows.add("time split: extra step time of the always-on split (sampled steps)", d.get("overhead"), "<= 0.03",
                 "time_split", f"{d.get('preset')} preset, one step in {d.get('every')} split; a split step takes "
                 f"{100 * (d.get('split_step_extra') or 0):.0f} % longer; mean step on / off "
                 f"{d.get('mean_step_ratio_on_over_off') or float('nan'):.3f} (separate jobs: moves with the load)", unit="")
        rows.add("time split: communication share, |first look - profiler| (chapter 04)",
                 get_in(d, "agreement", "comm_share_difference"), "<= 0.15", "time_split",
                 f"first look {get_in(d, 'agreement', 'first_look_comm_share') or float('nan'):.3f}, profiler "
                 f"{get_in(d, 'agreement', 'profiler_comm_share') or float('nan'):.3f}", unit="")
    if rows.results.get("hybrid"):
        l24 = get_in(rows.results, "hybrid", "layouts", "2x4") or {}
        rows.add("hybrid 2x4: classifier bytes per rank / pure DP", l24.get("classifier_bytes_vs_dp"), "<= 0.3", "hybrid")
        rows.add("hybrid 2x4: img/s / pure DP", l24.get("img_per_s_vs_dp"), ">= 0.8", "hybrid",
                 _hybrid_note(rows.results["hybrid"]))
    for case, c in (get_in(rows.results, "conv_cpu", "cases") or {}).items():
        if "whole train step" in case:
            rows.add(f"conv: native / im2col step time ({case})", c.get("native_over_im2col"), "", "conv_cpu",
                     "> 1: im2col faster; conv_impl='auto' picks per machine")


def lever_result_rows(rows: Rows) -> None:
    """Chapter 02's memory levers: the planner against the measured MiB per image, and each lever against plain."""
    for impl, m in (get_in(rows.results, "memory_levers", "measured") or {}).items():
        for lever, p in (m.get("planner") or {}).items():
            if p.get("measured") is not None:
                rows.add(f"memory levers ({impl}): {lever}, planner / measured MiB per image",
                         p.get("planned_over_measured"), "", "memory_levers",
                         f"planned {p['planned']:.2f}, measured {p['measured']:.2f} MiB per image; {p['where']}")
        for lever, f in (m.get("levers") or {}).items():
            if "slope_ratio_vs_plain" in f:
                rows.add(f"memory levers ({impl}): {lever} / plain, MiB per image", f["slope_ratio_vs_plain"], "",
                         "memory_levers", f"step time {f['step_time_ratio_vs_plain']:.2f}x plain; batches "
                         f"{f['batches']}; largest loss difference {f['max_loss_diff_vs_plain']:.1e}")


def bn_group_rows(rows: Rows) -> None:
    """Chapter 02's BatchNorm groups: each grouping's held-out loss minus one group's, paired over seeds."""
    d = rows.results.get("bn_groups")
    if not d:
        return
    fin = get_in(d, "final", d.get("judged_on", "held_out_loss")) or {}
    for g, p in (fin.get("vs_one_group") or {}).items():
        rows.add(f"BatchNorm groups: {g} x {d['batch'] // int(g)} minus 1 x {d['batch']}, held-out loss after "
                 f"{d['updates']} updates", p["mean"], "", "bn_groups",
                 f"paired over {len(d['seeds'])} seeds, 95 % interval ±{p['half_width']:.3f}: "
                 f"{'beyond' if p['beyond_spread'] else 'within'} the seeds' spread", unit="")


ROW_MAKERS = (comparison_rows, course_rows, startup_rows, startup_env_rows, host_memory_rows, phase_rows,
              shared_compile_rows, pytorch_rows, knob_rows,
              launch_and_data_rows, training_rows)


def goal_rows(results: dict[str, dict]) -> list[Row]:
    """Rows for every benchmark JSON present (the headline goals get 'not measured' rows when theirs is missing)."""
    rows = Rows(results)
    for make in ROW_MAKERS:
        make(rows)
    return list(rows)
