"""Chapter 04's conclusions, built from the values the notebook records (``results/04_profiling.json``).

``build(r)`` takes that dict and returns the claims: fusion's effect on AllReduce calls, communication share
and step time; what ``Cell.set_comm_fusion`` alone does; the blog's ``mindspore.ops.comm_fusion``; the ``Cast``
kernels AMP adds and the kernels O3 leaves separate (no verdict when none of the kernels compared was counted);
what overlapping the AllReduce with backward would save on cards (a calculation from published figures); and, as
observations (expect nothing, asserted nowhere), the AMP levels' speed, the profiler's overhead, the
reduction's cost without a profiler and the before/after. Step times are ranked only beyond the jobs' own
step-to-step noise (``helpers.conclusions.step_noise``; within it fusion's share and step claims give no
verdict), and each such sentence says it is one run. ``mindspore_facts()`` reads, from the installed
MindSpore, what the errata quote.
"""

from __future__ import annotations

from helpers.conclusions import Claim, claim
from helpers.conclusions.step_noise import compare, compare_shares, noise_words
from helpers.topics.amp_kernels import all_zero
from helpers.topics.comm_fusion import AUTO_FUSION_THRESHOLD, THRESHOLD_UNIT_BYTES

AMP_LEVELS = ("O1", "O2", "O3")
SEPARATE_KERNELS = ("BatchNorm", "ReLU")      # with the convolution kernels: what O3 would fuse if it fused
AGREE_POINTS = 0.15                           # reduction cost with vs without profiler: agreement within 15 points
FIRST_LOOK_POINTS = AGREE_POINTS              # the job's own split vs the profiler's: measured 7.6-11.3 points (ci)


def _pct(x: float) -> str:
    return f"{x:.0%}"


def same_kernels(kernels: dict, conv_types, a: str = "O0", b: str = "O3") -> bool | None:
    """Whether levels ``a`` and ``b`` ran the same number of convolution, BatchNorm and ReLU kernels per step
    (``kernels``: level -> kernel type -> executions per step); None when none of them was counted at either level
    (the profile named no such kernel: nothing to compare)."""
    types = tuple(conv_types) + SEPARATE_KERNELS
    if all_zero([kernels[lv].get(t, 0) for lv in (a, b) for t in types]):
        return None
    return all(round(kernels[a].get(t, 0)) == round(kernels[b].get(t, 0)) for t in types)


def fusion_claims(r: dict) -> list[Claim]:
    """Whether fusion cut the AllReduce calls, the communication share and the step time; the share and the step
    time get a verdict only beyond the jobs' own step-to-step noise (``step_noise``), none within it."""
    ar, share, t, timed = r["allreduce_per_step"], r["comm_share"], r["step_time_s"], r["timed_step_s"]
    step = compare(t["fused"] / t["baseline"], timed["baseline"], timed["fused"])
    cut = compare_shares(share["fused"] - share["baseline"], *r["comm_share_per_step"].values())
    f = dict(base=ar["baseline"], fused=ar["fused"], tensors=r["gradient_tensors"], grad_mb=r["gradient_mb"],
             threshold_mib=AUTO_FUSION_THRESHOLD * THRESHOLD_UNIT_BYTES / 2**20, auto=AUTO_FUSION_THRESHOLD)
    shares = dict(share_base=_pct(share["baseline"]), share_fused=_pct(share["fused"]), spread=cut["spread"],
                  band=cut["band"], ranked=cut["ranked"], tie=cut["tie"], noise=noise_words(cut, "one run each"))
    steps = dict(t_base=t["baseline"], t_fused=t["fused"], ratio=step["ratio"], noise=noise_words(step, "one run each"),
                 spread=step["spread"], band=step["band"], ranked=step["ranked"], tie=step["tie"])
    per_tensor = ("one per gradient tensor" if ar["baseline"] == r["gradient_tensors"]
                  else "the model has {tensors} gradient tensors")
    what = (" `auto` is not one bucket: a bucket closes at about {threshold_mib:.0f} MiB, and this model's "
            "{grad_mb:.2f} MiB of gradients took {fused} AllReduce call(s).")
    return [
        claim("fusion_cuts_allreduce_calls", ar["fused"] < ar["baseline"],
              "Fusion `auto` cut the AllReduce calls per step from {base} (" + per_tensor + ") to {fused}." + what,
              "Fusion (`auto`) did not cut the AllReduce calls per step: {base} unfused (" + per_tensor
              + "), {fused} fused." + what, **f),
        claim("fusion_cuts_comm_share", cut["diff"] < 0 if cut["ranked"] else None,
              "With fusion, communication fell from {share_base} to {share_fused} of the profiled step ({noise})."
              if cut["ranked"] else
              "With fusion, communication went from {share_base} to {share_fused} of the profiled step, {tie} "
              "({noise}): this run does not show whether fusion cuts it.",
              "With fusion, communication did not fall: {share_base} of the profiled step unfused, {share_fused} fused "
              "({noise}).", **f, **shares),
        claim("fusion_shortens_step", step["ratio"] < 1 if step["ranked"] else None,
              "Without the profiler, fusion took the step from {t_base:.3f} s to {t_fused:.3f} s ({ratio:.2f}x as long; "
              "{noise})." if step["ranked"] else
              "Without the profiler, fusion took the step from {t_base:.3f} s to {t_fused:.3f} s ({ratio:.2f}x), {tie} "
              "({noise}): this run does not show whether fusion shortens the step.",
              "Without the profiler, fusion did not shorten the step: {t_base:.3f} s unfused, {t_fused:.3f} s fused "
              "({ratio:.2f}x; {noise}).", **f, **steps),
    ]


def comm_fusion_api_claims(r: dict) -> list[Claim]:
    """What ``Cell.set_comm_fusion`` ids alone do, and whether ``ops.comm_fusion`` exists."""
    ids, base = r["cell_comm_fusion_allreduce_per_step"], r["allreduce_per_step"]["baseline"]
    on = r["fusion_enabled_by_default"]
    why = (": fusion is off in a fresh process (`get_enable_all_reduce_fusion()` → False), so nothing merged them."
           if not on else
           " (`get_enable_all_reduce_fusion()` → True in a fresh process: something else kept them apart).")
    out = [
        claim("cell_fusion_ids_alone_change_nothing", ids == base,
              "`Cell.set_comm_fusion` ids alone left {ids} AllReduce calls per step, as many as the default "
              "({base})" + why,
              "`Cell.set_comm_fusion` ids alone changed the AllReduce calls per step: {base} by default, {ids} with the ids.",
              ids=ids, base=base, fusion_enabled_by_default=on),
        claim("no_ops_comm_fusion_module", not r["comm_fusion_module_exists"],
              "`mindspore.ops.comm_fusion` does not exist in MindSpore {version}; fusion is the parallel context's "
              "`comm_fusion`.",
              "`mindspore.ops.comm_fusion` exists in MindSpore {version}: the blog's import works here.",
              version=r.get("mindspore_version", "?")),
    ]
    if r.get("cell_ids_with_fusion_allreduce_per_step") is not None:     # the cpu preset's extra job
        out.append(claim("cell_fusion_ids_with_fusion", None,
                         "With the ids and `comm_fusion` auto switched on together: {n} AllReduce calls per step "
                         "(one fusion id per top-level cell; {base} with neither).",
                         n=r["cell_ids_with_fusion_allreduce_per_step"], base=base))
    return out


def amp_claims(r: dict) -> list[Claim]:
    """The ``Cast`` kernels AMP adds, the kernels O3 leaves separate, and (observed) AMP's speed."""
    cast, kernels, conv = r["amp_cast_kernels_per_step"], r["amp_kernels_per_step"], r["conv_kernel_types"]
    casts = ", ".join(f"{k} {cast[k]:.0f}" for k in ("O0",) + AMP_LEVELS)
    impl = r["conv_impl"]
    conv_words = ("`Conv2D` and its two backward kernels" if impl == "native" else
                  "im2col's `Im2Col`, `BatchMatMul` and `Col2Im`")
    same = same_kernels(kernels, conv)
    cast_seen = not all_zero(cast[k] for k in ("O0",) + AMP_LEVELS)
    n_conv = {lv: sum(round(kernels[lv].get(t, 0)) for t in conv) for lv in ("O0", "O3")}
    n_sep = {lv: ", ".join(f"{t} {round(kernels[lv].get(t, 0))}" for t in SEPARATE_KERNELS) for lv in ("O0", "O3")}
    rel = r["amp_relative"]     # its ties: within AMP_NOISE or the levels' wider step noise (step_profile.Amp)
    noise = noise_words(compare(1.0, *r["amp_timed_step_s"].values(), floor=rel["noise"]), "one run each")
    step = ", ".join(f"{k} {rel['rel'][k]:.2f}x" for k in AMP_LEVELS)
    verdicts = [f"{w}: {', '.join(rel[key])}" for key, w in (("slower", "slower"), ("faster", "faster"),
                                                             ("ties", f"within {rel['noise']:.0%} (a tie)")) if rel[key]]
    fp16, device = r["cpu_fp16"], r.get("device_target", "CPU")
    if device != "CPU":
        why = f"on {device} float16 runs on the device's own units, so the host CPU's flags say nothing here"
    elif fp16["fp16_math"]:
        why = f"this CPU has float16 arithmetic ({', '.join(fp16['fp16_math'])})"
    else:
        why = ("this CPU has no float16 arithmetic (" + ("`f16c`: conversions only" if fp16["f16c"] else
               "no float16 flags") + "), so float16 cannot speed the math and the casts are overhead")
        if rel["faster"]:
            why += (f"; {', '.join(rel['faster'])} came out faster all the same, in one short job per level on a "
                    "shared machine: rerun before counting it as a gain")
    unseen = ("; the profile named no such kernel on {device} (all counts 0), so this run gives no verdict "
              "(a count of 0 here is a reading gap, not a measurement).")
    cast_figures = dict(casts=casts, device=device, **{f"cast_{k}": cast[k] for k in cast})
    conv_figures = dict(conv_words=conv_words, conv_o0=n_conv["O0"], conv_o3=n_conv["O3"], sep_o0=n_sep["O0"],
                        sep_o3=n_sep["O3"], conv_impl=impl, device=device)
    return [
        claim("amp_adds_cast_kernels", all(cast[k] > cast["O0"] for k in AMP_LEVELS),
              "Every AMP level added `Cast` kernels per step: {casts}.",
              "Not every AMP level added `Cast` kernels per step: {casts}.", **cast_figures) if cast_seen else
        claim("amp_adds_cast_kernels", None, "No `Cast` kernels were counted at any level ({casts})" + unseen,
              **cast_figures),
        claim("o3_fuses_nothing", same,
              "O3 fused no conv+bn+relu: O0 and O3 ran the same convolution kernels per step ({conv_o0}: {conv_words}) "
              "and the same BatchNorm and ReLU kernels ({sep_o3}); O3 only added casts.",
              "O3 changed the kernels per step: convolution kernels ({conv_words}) {conv_o0} at O0 vs {conv_o3} at O3; "
              "{sep_o0} at O0 vs {sep_o3} at O3.", **conv_figures) if same is not None else
        claim("o3_fuses_nothing", None, "No convolution ({conv_words}), BatchNorm or ReLU kernels were counted at O0 "
              "or O3" + unseen, **conv_figures),
        claim("amp_speed_here", None,
              "Step time relative to O0 on {device} with {ranks} {rank_word}: {step} ({verdicts}; {noise}); {why}.",
              step=step, verdicts="; ".join(verdicts), why=why, device=device, noise=noise,
              ranks=r["amp_world_size"], rank_word="rank" if r["amp_world_size"] == 1 else "ranks", **{f"rel_{k}": rel["rel"][k] for k in AMP_LEVELS}),
    ]


def measurement_claims(r: dict) -> list[Claim]:
    """Observations: profiler overhead, the reduction's cost without a profiler, before/after; the overhead and the
    before/after are ranked only beyond the steps' own noise (``step_noise``)."""
    ov, timed, img = r["profiler_overhead_ratio"], r["timed_step_s"], r["img_per_s"]
    share_np, share_p = r["comm_share_without_profiler"], r["comm_share"]["baseline"]
    agree = abs(share_np - share_p) <= AGREE_POINTS
    # the profiled steps against the unprofiled ones of the same job: its own step-to-step spread is the noise
    cost = compare(ov, timed["baseline"], timed["baseline_profiled"])
    gain = compare(img["after"] / img["before"], timed["baseline"], timed["after"])
    return [
        claim("profiler_overhead", None,
              "The profiler made the step {ratio:.2f}x as long ({pct:+.0%}; {noise}); "
              "one short job on a shared machine, so this is recorded, not a property." if cost["ranked"] else
              "The profiled steps took {ratio:.2f}x as long as the unprofiled ones ({pct:+.0%}), {tie} "
              "({noise}): the profiler's cost is not measurable in this run; recorded, not a property.",
              ratio=ov, pct=ov - 1, noise=noise_words(cost), spread=cost["spread"], band=cost["band"],
              ranked=cost["ranked"], tie=cost["tie"]),
        claim("reduction_cost_without_profiler", None,
              ("Dropping the gradient reduction took the step from {t_base:.3f} s to {t_alone:.3f} s (one run each): "
               "the reduction costs {share_np} of the step without the profiler, against {share_p} read from the "
               "profile — " + ("within 15 points: the profile can be trusted for this question." if agree else
                               "more than 15 points apart: without the reduction the ranks also stop waiting for each "
                               "other, and the profiler's own cost lands on kernels unevenly.")),
              t_base=r["step_time_s"]["baseline"], t_alone=r["no_reduce_step_time_s"], share_np=_pct(share_np),
              share_p=_pct(share_p), agree=agree),
        claim("before_after_here", None,
              "On this machine the configuration measured like the baseline with the shortest step ({after}) ran "
              "{after_img:.1f} img/s against the baseline's ({before}) {before_img:.1f} ("
              + ("{speedup:.2f}x; {noise})." if gain["ranked"] else
                 "{speedup:.2f}x), {tie} ({noise}): this run does not rank them.")
              + " The blog's 120 → 185 img/s is its move from data to hybrid parallel (chapter 03), not fusion + O3, "
              "so it is not compared here.",
              after=r["after_config"], before=r["before_config"], before_img=img["before"], after_img=img["after"],
              speedup=gain["ratio"], noise=noise_words(gain, "one run each"), spread=gain["spread"],
              band=gain["band"], ranked=gain["ranked"], tie=gain["tie"]),
    ]


def first_look_claims(r: dict) -> list[Claim]:
    """The first look before the profiler: whether the job's own split (sampled split steps) agrees with the
    profiler's communication share, and (observed) its straggler verdict. None when the run recorded no first look."""
    if "first_look_comm_share" not in r:
        return []
    look, prof, v = r["first_look_comm_share"], r["comm_share"]["baseline"], r["first_look_verdict"]
    limit = FIRST_LOOK_POINTS + 2 * r["first_look_spread"]      # the split's own step-to-step noise widens it
    f = dict(look=_pct(look), prof=_pct(prof), diff=100 * r["first_look_agreement"], n=r["first_look_steps"],
             limit=100 * limit, spread=100 * r["first_look_spread"], base=100 * FIRST_LOOK_POINTS)
    verdict = (f"no rank held the others back (they waited {1e3 * v['spread_s']:.1f} ms per step for the last to "
               f"arrive, {v['spread_share']:.1%} of a step)" if v["rank"] is None else
               f"rank {v['rank']} held the others back by {1e3 * v['wait_s']:.1f} ms per step "
               f"({v['wait_share']:.0%} of their time, cause {v['cause']})")
    allowed = ("{limit:.1f} ({base:.0f} points plus twice the split's step-to-step spread of {spread:.1f})")
    return [
        claim("first_look_agrees_with_profiler", r["first_look_agreement"] <= limit,
              "The job's own time split ({n} steps, no profiler) put communication at {look} of the step, the "
              "profiler at {prof}: {diff:.1f} points apart, within " + allowed + ".",
              "The job's own time split ({n} split steps) put communication at {look} of the step, the profiler at "
              "{prof}: {diff:.1f} points apart, more than " + allowed + ". The split times the AllReduce as its own "
              "graph from the host (launch and wait included), the profiler sums kernel time.", **f),
        claim("first_look_verdict", None, "The first look's verdict: " + verdict + ".", rank=v["rank"],
              cause=v["cause"], wait_s=v["wait_s"], spread_s=v["spread_s"]),
        *_comm_wait_claims(r.get("first_look_comm_wait")),
    ]


def overlap_claims(r: dict) -> list[Claim]:
    """Whether the gradient AllReduces overlapped backward in the profiled baseline step (an observation; on CPU
    the kernels run one at a time, so the collectives interleave with backward but cannot overlap it)."""
    o = r.get("comm_overlap")
    if not o or not o["comm_ms"]:
        return []
    issued = ("{after} of its {bw} backward kernels ran after the first AllReduce started: each gradient's "
              "AllReduce is issued as soon as backward produces it. " if o["backward_kernels"] else "")
    serial = o["overlap_ms"] < 0.01 * o["comm_ms"]
    return [claim("allreduce_overlap", None,
                  "In the unfused baseline's profiled step, " + issued + "The AllReduces overlapped other kernels for "
                  "{ov:.1f} ms of their {comm:.0f} ms (at most {mx:.1f} ms on any rank): "
                  + ("the kernels ran one at a time, so communication added to the step." if serial else
                     "overlap hid {pct:.0%} of the communication."),
                  after=o["backward_after_first_comm"], bw=o["backward_kernels"], ov=o["overlap_ms"],
                  comm=o["comm_ms"], mx=o["max_overlap_ms_any_rank"], pct=o["overlap_ms"] / o["comm_ms"])]


def on_cards_claims(r: dict) -> list[Claim]:
    """What overlapping the AllReduce with backward would save on cards for gpu8's ResNet-50: a calculation from
    published figures (``topics.overlap_on_cards``), expected to save some but not all of the communication."""
    c = r.get("overlap_on_cards")
    if not c or not c.get("pairs"):
        return []
    pairs = c["pairs"]
    ok = all(0 < p["saving_ms"] < p["comm_ms"] for p in pairs.values())
    each = "; ".join(f"{k} {p['saving_ms']:.1f} of {p['comm_ms']:.1f} ms "
                     f"({p['saving_share']:.0%} of the step without it)" for k, p in pairs.items())
    head = "Calculated from published bandwidths, not measured: at gpu8's {n} ResNet-50 buckets, overlap would save "
    return [claim("overlap_saving_on_cards", ok,
                  head + "{each}; the last bucket, ready only when backward ends, stays exposed.",
                  head + "{each}: not between nothing and all of the communication, as a bucket timeline must be.",
                  n=len(c["bucket_mib"]), each=each, **{f"{k}_saving_ms": p["saving_ms"] for k, p in pairs.items()})]


def _comm_wait_claims(w: dict | None) -> list[Claim]:
    """What the communication share is made of: waiting for the last rank against the collective's own time."""
    if not w or w["comm_s"] <= 0:
        return []
    return [claim("comm_wait_vs_collective", None,
                  "Of the {comm:.1f} ms a rank spent per step in the gradient AllReduce, {wait:.1f} ms ({pct:.0%}) "
                  "was waiting for the last rank to arrive; the collective itself took at most {own:.1f} ms (the "
                  "last rank's own time, {n} split steps). The communication share counts both.",
                  comm=1e3 * w["comm_s"], wait=1e3 * w["wait_s"], own=1e3 * w["collective_s"],
                  pct=w["wait_s"] / w["comm_s"], n=w["steps"])]


def build(r: dict) -> list[Claim]:
    """Every claim of chapter 04 from its recorded values ``r`` (the keys the notebook passes to ``record_results``)."""
    return (fusion_claims(r) + comm_fusion_api_claims(r) + amp_claims(r) + first_look_claims(r) + overlap_claims(r)
            + on_cards_claims(r) + measurement_claims(r))     # the notebook shows the first verdicts (claims.SHOWN)


def mindspore_facts() -> dict:
    """What the installed MindSpore says about the blog's two claims (read, not assumed): whether
    ``mindspore.ops.comm_fusion`` imports, whether ``set_auto_parallel_context`` takes ``comm_fusion``, whether
    AllReduce fusion is on in a fresh process, the O3 docs and settings, and where operator fusion lives."""
    import importlib
    import importlib.util
    import inspect

    import mindspore as ms
    import mindspore.ops
    from mindspore import amp as ms_amp
    from mindspore.parallel._auto_parallel_context import auto_parallel_context   # private: read-only look
    from mindspore.train.amp import _config_level                                # private table behind the levels

    try:
        importlib.import_module("mindspore.ops.comm_fusion")
        import_error = None
    except ImportError as exc:
        import_error = f"{type(exc).__name__}: {exc}"
    exists = importlib.util.find_spec("mindspore.ops.comm_fusion") is not None or hasattr(mindspore.ops, "comm_fusion")
    sap_doc = inspect.getdoc(ms.set_auto_parallel_context) or ""
    return dict(
        mindspore_version=ms.__version__,
        comm_fusion_import_error=import_error,
        comm_fusion_module_exists=exists,
        set_auto_parallel_context_takes_comm_fusion="comm_fusion" in str(inspect.signature(ms.set_auto_parallel_context))
        or "comm_fusion" in sap_doc,
        fusion_enabled_by_default=bool(auto_parallel_context().get_enable_all_reduce_fusion()),
        parameter_comm_fusion_doc=inspect.getdoc(ms.Parameter.comm_fusion).split("\n\n")[1].replace("\n", " "),
        o3_doc=[s.strip() for s in inspect.getdoc(ms_amp.auto_mixed_precision).split("\n\n") if "O3" in s][0],
        o3_settings={k: str(v) for k, v in _config_level["O3"].items()},
        jit_o1_doc=[ln.strip(" -") for ln in inspect.getdoc(ms.JitConfig).splitlines()
                    if '"O1"' in ln and "fusion" in ln][0].rstrip(","),
    )


def facts_rows(facts: dict) -> list[tuple[str, str]]:
    """The facts as (what was checked, what this MindSpore says) rows for a table."""
    return [
        ("`import mindspore.ops.comm_fusion`", (facts["comm_fusion_import_error"] or "imports").split(":")[0]),
        ("`set_auto_parallel_context` takes `comm_fusion`", str(facts["set_auto_parallel_context_takes_comm_fusion"])),
        ("AllReduce fusion on by default", str(facts["fusion_enabled_by_default"])),
        ("O3 in `auto_mixed_precision` docs", facts["o3_doc"]),
        ("O3 in `build_train_network`", str(facts["o3_settings"])),
        ("operator fusion (`JitConfig` docs)", facts["jit_o1_doc"]),
    ]
