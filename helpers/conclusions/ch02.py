"""Chapter 02's conclusions, built from the values the notebook records (``results/02_oom_gradient_accumulation.json``).

``build(r)`` takes that record (a dict) and returns the chapter's claims, each sentence chosen from what was
measured. Mechanisms (must hold at any scale, asserted by the chapter's test): the full batch fails under the cap
with kind ``oom`` and the accumulated one fits; accumulation equals the big batch without BatchNorm (float32
rounding, <= ``TOL``); the same ResNet with BatchNorm frozen matches again, so the BatchNorm gap is its
micro-batch statistics; MindSpore's built-in cells return K x the mean gradient; the blog's ``Model`` argument does
not exist. Scale- or machine-dependent figures (memory saved, throughput, the planner's slope on this CPU's oneDNN
kernels, MindSpore's allocator counters) are observations (``holds=None``) whose text follows the numbers.
"""

from __future__ import annotations

from helpers.conclusions import Claim, claim
from helpers.conclusions.step_noise import THROUGHPUT_FLOOR, compare, noise_words

TOL = 1e-5            # float32 rounding over a few hundred thousand summed gradient elements
COSINE_TOL = 1e-6     # |1 - cosine| for "the same direction" (rounding gives ~1e-12)
SLOPE_EXPLAINED = 0.25   # planner + composite-kernel copies within 25 % of the measured slope: "explained"
TIE = THROUGHPUT_FLOOR   # the throughput band's floor (helpers.conclusions.step_noise)
# Images per BatchNorm group expected to train like the full batch: BatchNorm's ImageNet error is flat from 32 down
# to 16 images per GPU and rises below (Wu & He, Group Normalization, ECCV 2018, Fig. 1)
LARGE_GROUP = 16


def _oom(r: dict) -> Claim:
    kind = r.get("oom_error_kind")
    return claim(
        "full_batch_oom", bool(r["oom_reproduced"]),
        "Under a cap of {cap} MB of {capped} per rank, the full batch of {batch} images per rank failed "
        "with kind `oom`.",
        "Under a cap of {cap} MB of {capped} per rank, the full batch of {batch} images per rank did not "
        "fail with kind `oom` (it ended with: {kind}).",
        cap=r["mem_cap_mb"], batch=r["batch_per_rank"], kind=kind or "no failure",
        # CPU: an RLIMIT_AS cap; GPU/Ascend: the device memory pool's max_size (runtime.set_memory)
        capped="address space" if r["device_target"] == "CPU" else "device memory")


def _fits(r: dict) -> Claim:
    return claim(
        "accumulated_fits", bool(r["accumulation_succeeded"]),
        "Under the same cap, {k} micro-batches of {micro} trained on all {ranks} ranks: {samples} images per rank "
        "per update, identical weights.",
        "Under the same cap, {k} micro-batches of {micro} did not finish on all {ranks} ranks with identical "
        "weights.",
        k=r["accumulation_steps"], micro=r["micro_batch"], ranks=r["world_size"],
        samples=r["accumulated_samples_per_step"])


def _no_bn(r: dict) -> Claim:
    diff = r["grad_max_abs_diff_no_bn"]
    same = r["grad_check_same_on_all_ranks"]
    return claim(
        "equivalent_without_bn", diff <= TOL and bool(same),
        "Without BatchNorm the accumulated gradient equals the full batch's within {diff:.1e} (float32 rounding), "
        "after the AllReduce, the same on all {ranks} ranks.",
        "Without BatchNorm the accumulated gradient differs from the full batch's by {diff:.1e} "
        "(tolerance {tol:.0e}; same on all {ranks} ranks: {same}).",
        diff=diff, tol=TOL, ranks=r["grad_check_ranks"], same=bool(same))


def _bn_cause(r: dict) -> Claim:
    cos, rel = r["grad_cosine_bn"], r["grad_max_rel_diff_bn"]
    cos_f, diff_f = r["grad_cosine_bn_frozen"], r["grad_max_abs_diff_bn_frozen"]
    frozen_ok = diff_f <= TOL and abs(1 - cos_f) <= COSINE_TOL
    gap = ("differs (cosine {cos:.2f}; largest difference {rel:.0%} of the largest element)"
           if 1 - cos > COSINE_TOL else "differs only by rounding (cosine {cos:.6f})")
    return claim(
        "batchnorm_is_the_cause", frozen_ok,
        "With BatchNorm in training mode the accumulated gradient of {arch} " + gap + ": BatchNorm normalises "
        "{groups} groups of {micro} instead of data parallel's {n} groups of {per_rank} images on {n} ranks. With its "
        "{layers} BatchNorm layers frozen it matches the full batch again (cosine {cos_f:.6f}, max difference "
        "{diff_f:.1e}).",
        "With BatchNorm in training mode the accumulated gradient of {arch} " + gap + "; with its {layers} "
        "BatchNorm layers frozen it still differs (cosine {cos_f:.6f}, max difference {diff_f:.1e}), so "
        "micro-batch statistics are not the whole cause.",
        arch=r["arch"], cos=cos, rel=rel, cos_f=cos_f, diff_f=diff_f, layers=r["bn_frozen_layers"],
        micro=r["micro_batch"], per_rank=r["batch_per_rank"], n=r["grad_check_ranks"],
        groups=r["grad_check_ranks"] * r["accumulation_steps"])


def _builtin(r: dict) -> Claim:
    k, ratio = r["accumulation_steps"], r["builtin_cell_grad_ratio"]
    par = r.get("builtin_parallel_grad_ratio")
    ok = abs(ratio - k) <= 1e-3 * k and (par is None or abs(par - k) <= 1e-3 * k)
    return claim(
        "builtin_cells_sum", ok,
        "MindSpore's `nn.GradAccumulationCell` and `parallel.nn.GradAccumulation` ({device}, DATA_PARALLEL) gave "
        "{ratio:.3f}x and {par}x the mean gradient with {k} micro-batches: they add the micro-batch means "
        "instead of averaging them.",
        "MindSpore's built-in accumulation cells gave {ratio:.3f}x and {par}x the mean gradient with {k} "
        "micro-batches, not the factor {k} they showed before.",
        ratio=ratio, par="n/a" if par is None else f"{par:.3f}", k=k, device=r["device_target"])


# What chapter 02's memory figures measured (``memory_measured``): the device allocator's peak since the ready point
# against its memory in use there on GPU/Ascend; RSS, which also holds compilation leftovers, on CPU
MEMORY_WORDS = {
    "device": ("Peak device memory", "the device memory in use before the first step", "both also hold "
               "gradients and, accumulating, their buffers"),
    "rss": ("Peak RSS", "each rank's pre-training baseline", "both also carry compilation leftovers"),
}


def _memory(r: dict) -> Claim:
    peak, act = r["peak_mb"], r["activation_mb"]
    what, baseline, carried = MEMORY_WORDS[r["memory_measured"]]
    ratio = act["accumulated"] / act["full_batch"] if act["full_batch"] else float("nan")
    return claim(
        "memory_saved", ratio < 1 and peak["accumulated"] < peak["full_batch"],
        what + " per rank fell from {full:.0f} to {acc:.0f} MB; above " + baseline + ", to {ratio:.2f}x "
        "(activations alone: about 1/{k}; " + carried + ").",
        what + " per rank went from {full:.0f} to {acc:.0f} MB and the memory above " + baseline + " to "
        "{ratio:.2f}x: accumulation did not lower the peak in this run.",
        full=peak["full_batch"], acc=peak["accumulated"], ratio=ratio, k=r["accumulation_steps"])


def _throughput(r: dict) -> Claim:
    """Observation: accumulated vs full-batch img/s, ranked only beyond both jobs' step-to-step noise
    (``step_noise``; ``TIE`` is the floor for what moves between two jobs on a shared machine)."""
    tp, steps = r["throughput_img_s"], r["timed_step_s"]
    c = compare(tp["accumulated"] / tp["full_batch"], steps["full_batch"], steps["accumulated"], floor=TIE)
    head = "Accumulation ran at {ratio:.2f}x the full batch's throughput ({acc:.1f} vs {full:.1f} images/s"
    if not c["ranked"]:
        text = (head + "): within noise ({noise}), so this run does not rank them; the fixed cost of launching {k} "
                "micro-step graphs of {micro} per update is not measurable here.")
    elif c["ratio"] > 1:
        text = (head + "; {noise}): launching {k} micro-step graphs per update cost nothing measurable here; the full "
                "batch of {batch} ({impl} convolution) was the slower job.")
    else:
        text = (head + ", {pct:.0f}% slower; {noise}): {k} micro-step graphs per update instead of one, and a shared "
                "machine whose load changes between the two jobs.")
    return claim("throughput", None, text, ratio=c["ratio"], acc=tp["accumulated"], full=tp["full_batch"],
                 pct=100 * (1 - c["ratio"]), micro=r["micro_batch"], k=r["accumulation_steps"],
                 batch=r["batch_per_rank"], impl=r["conv_impl"], noise=noise_words(c, "one run each"),
                 spread=c["spread"], band=c["band"], ranked=c["ranked"])


def composite_passes(conv_kernels: dict) -> list[str]:
    """The convolution passes oneDNN ran with its composite plain-layout kernel (``jit_uni_ncsp:...+...``)."""
    return [kind for kind, impl in conv_kernels.items() if impl.startswith("jit_uni_ncsp") and "+" in impl]


def _slope(r: dict) -> Claim:
    planner, measured = r["planner_slope_mib_per_image"], r["measured_slope_mib_per_image"]
    ratio = planner / measured
    kernels = r["conv_kernels"]
    passes = composite_passes(kernels)
    ran = ", ".join(f"`{impl}` for {kind}" for kind, impl in kernels.items()) or "no convolution it could read"
    figures = dict(planner=planner, measured=measured, ratio=ratio, ran=ran, n=len(passes),
                   copies=r["ncsp_copy_mib_per_image"], with_copies=planner + r["ncsp_copy_mib_per_image"])
    figures["fit"] = figures["with_copies"] / measured
    if not passes:
        ok = abs(ratio - 1) <= SLOPE_EXPLAINED
        return claim(
            "planner_slope", None,
            "The planner's {planner:.3f} MiB per image is {ratio:.2f}x the measured slope ({measured:.3f}); oneDNN "
            "ran " + ran + ", no composite kernel, so nothing beyond the saved activations grows with the batch."
            if ok else
            "The planner's {planner:.3f} MiB per image is {ratio:.2f}x the measured slope ({measured:.3f}); oneDNN "
            "ran " + ran + ", no composite kernel: the gap is not explained by the kernels' copies.", **figures)
    explained = abs(figures["fit"] - 1) <= SLOPE_EXPLAINED
    return claim(
        "planner_slope", None,
        "The planner's {planner:.3f} MiB per image is {ratio:.2f}x the measured slope ({measured:.3f}) because "
        "oneDNN ran " + ran + ": the composite kernel reorders each convolution's input and output into NHWC "
        "copies ({copies:.3f} MiB per image over {n} pass(es), from the planner's own shapes); planner + copies "
        "= {with_copies:.3f} MiB per image, {fit:.2f}x the measured slope."
        if explained else
        "The planner's {planner:.3f} MiB per image is {ratio:.2f}x the measured slope ({measured:.3f}); oneDNN "
        "ran " + ran + ", whose NHWC copies add {copies:.3f} MiB per image over {n} pass(es): planner + copies = "
        "{with_copies:.3f}, {fit:.2f}x the measured slope, so the copies explain only part of the gap.",
        **figures)


def _blog(r: dict) -> Claim:
    rows = {s["account"]: s for s in r["blog_scenarios"]}
    rows28 = {s["account"]: s for s in r["blog_scenarios_28"]}
    plan = rows["planner (what backward must keep)"]
    bn = rows["planner + every BatchNorm output kept"]
    mx = rows.get("MXNet measured (TITAN X), extrapolated", bn)
    nore = rows["planner + no reuse of backward workspaces"]
    return claim(
        "blog_35gb", bool(r["blog_fits_40gb"]),
        "ResNet-152 at batch 64, 224 px, fp32 needs {p:.1f} GiB per card by the planner ({a:.1f} GiB of it kept "
        "activations), so it fits in 40 GB and the blog's 'more than 35 GB' does not follow. 35 GiB is exceeded "
        "from batch {pb} on the planner's count, from batch {bb} if every BatchNorm output is also kept "
        "({b2:.1f} GiB at batch 128; MXNet's measured slope gives {m2:.1f}), or at batch 64 only if no backward "
        "workspace were ever reused ({nw:.1f} GiB). 28 GiB is reached from batch {p28} on the planner's count, from "
        "batch {b28} with BatchNorm outputs kept.",
        "ResNet-152 at batch 64, 224 px, fp32 needs {p:.1f} GiB per card by the planner: it does not fit in "
        "40 GB, as the blog says.",
        p=r["blog_planner_gib"], a=r["blog_activation_gib"], pb=plan["batch_over_target"],
        bb=bn["batch_over_target"], b2=bn["gib_at_double_batch"], m2=mx["gib_at_double_batch"],
        nw=nore["gib_at_batch"],
        p28=rows28["planner (what backward must keep)"]["batch_over_target"],
        b28=rows28["planner + every BatchNorm output kept"]["batch_over_target"])


def _allocator(r: dict) -> Claim:
    alloc = r["allocator_max_allocated_mb"]
    return claim(
        "allocator_counter", None,
        "In the sweep's CPU processes MindSpore's own allocator reported max_memory_allocated = {alloc:.0f} MB "
        "(documented: always 0 on CPU), so every CPU memory figure here is measured from the operating system "
        "(RSS, virtual size)." if alloc == 0 else
        "In the sweep's CPU processes MindSpore's own allocator reported max_memory_allocated = {alloc:.0f} MB, "
        "next to the operating system's RSS figures.", alloc=alloc)


def _model_kwarg(r: dict) -> Claim:
    return claim(
        "model_has_no_accumulation_argument",
        not r["model_has_gradient_accumulation_steps"] and r["model_error"] is not None,
        "`mindspore.train.Model` has no `gradient_accumulation_steps` parameter: passing it raises {err}.",
        "`mindspore.train.Model` accepted `gradient_accumulation_steps` in this MindSpore version ({err}): the "
        "errata must be revised.",
        err=(r["model_error"] or "no error").split(":")[0])


def _published(r: dict) -> Claim:
    rows = r["published"]
    slopes = [x["planner"] / x["published"] for x in rows if x["kind"] == "slope"]
    feats = max(abs(x["planner"] / x["published"] - 1) for x in rows if x["kind"] == "features")
    recipes = [x for x in rows if x["kind"] == "batch_fits"]
    fit = sum(x["planner"] <= x["published"] for x in recipes)
    return claim(
        "planner_vs_published", fit == len(recipes),
        "The planner keeps {lo:.0%}-{hi:.0%} of MXNet's published per-image slope, matches convnet-burden's forward "
        "features within {feats:.0%} and fits all {n} NVIDIA recipe batches in their cards.",
        "Next to published figures the planner keeps {lo:.0%}-{hi:.0%} of MXNet's per-image slope and matches "
        "forward feature sizes within {feats:.0%}, but only {fit} of {n} NVIDIA recipe batches fit its budget.",
        lo=min(slopes), hi=max(slopes), feats=feats, n=len(recipes), fit=fit)


def _host_memory(r: dict) -> Claim:
    """The experiment's host memory against the preset's budget (an observation without a budget: gpu8, rehearsal)."""
    peak, budget = r.get("peak_host_mb") or {}, r.get("host_budget_mb")
    worst = max(peak.values(), default=float("nan"))
    return claim(
        "host_memory_budget", None if not budget or not peak else bool(worst <= budget),
        "The out-of-memory experiment ran on {ranks} ranks and its largest job took {worst:.0f} MB of host memory "
        "at its peak (msrun, scheduler and ranks together; budget {budget}), enough to show one rank running out "
        "and accumulation fitting.",
        "The out-of-memory experiment's largest job took {worst:.0f} MB of host memory on {ranks} ranks, over the "
        "preset's budget of {budget}: fewer ranks or a smaller batch per rank would keep the laptop's memory free.",
        ranks=r["world_size"], worst=worst, budget=f"{budget} MB" if budget else "none at this preset")


def build(r: dict) -> list[Claim]:
    """Every claim of chapter 02, in the order the chapter makes them."""
    return [_published(r), _oom(r), _fits(r), _memory(r), _throughput(r), _no_bn(r), _bn_cause(r), _builtin(r),
            _slope(r), _blog(r), _allocator(r), _model_kwarg(r), _host_memory(r), *_levers(r), *_bn_groups(r)]


def _levers(r: dict) -> list[Claim]:
    """Observation: the memory levers beyond accumulation, from the levers benchmark the chapter shows."""
    lv = r.get("memory_levers")
    if not lv:
        return []
    shards = list(lv["shards"].values())
    return [claim("memory_levers", None,
                  "Beyond accumulation ({source}, one CPU process): recomputing each block took {rm:.2f}x the plain "
                  "step's memory per image and {rt:.2f}x its time, AMP O2 {am:.2f}x and {at:.2f}x; optimizer "
                  "sharding, refused on CPU, is planned at {s1:.1f} MiB per rank unsharded and {s8:.1f} MiB over "
                  "8 ranks.", source=lv["source"], rm=lv["recompute_memory"], rt=lv["recompute_time"],
                  am=lv["amp_memory"], at=lv["amp_time"], s1=shards[0], s8=shards[-1])]


def _bn_groups(r: dict) -> list[Claim]:
    """Groups of ``LARGE_GROUP``+ images within the seeds' spread of one group (the benchmark the chapter shows)."""
    bg = r.get("bn_groups")
    if not bg:
        return []
    rows = {g: v for g, v in bg["groups"].items() if "diff" in v}
    large = [not v["beyond_spread"] for v in rows.values() if v["images"] >= LARGE_GROUP]
    holds = all(large) if large else None
    parts = "; ".join(f"{g} groups of {v['images']} {v['diff']:+.3f} ± {v['half_width']:.3f}, "
                      f"{'beyond' if v['beyond_spread'] else 'within'} the seeds' spread" for g, v in rows.items())
    head = ("Benchmark `{source}` ({n} seeds, {updates} updates of {batch} images): held-out loss minus that of one "
            "BatchNorm group, " + parts + ".")
    tail = "" if holds is None else " Groups of {large} or more images trained like the full batch, as expected."
    return [claim("batchnorm_groups_training", holds, head + tail,
                  head + " Groups of {large} or more images were expected to train like the full batch, and did not.",
                  source=bg["source"], n=len(bg["seeds"]), updates=bg["updates"], batch=bg["batch"], large=LARGE_GROUP,
                  groups=bg["groups"])]
