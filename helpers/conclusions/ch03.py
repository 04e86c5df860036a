"""Chapter 03's conclusions, built from the values the notebook records (``results/03_hybrid_parallel.json``).

``build(r)`` takes that dict and returns the claims. Mechanisms, which must hold at any scale: every hybrid update
is the single-process update from the same weights (within ``TOLERANCE``); a rank's classifier bytes are divided by
the layout's ``mp``; the checkpoint merged by MindSpore equals the hand-assembled shards; a strategy file for another
world size is refused before launch; under a per-rank memory cap sized from the measured runs, data parallel fails
with an out-of-memory error and the hybrid layout fits. Observation (expects nothing): the throughput of the two
layouts, both on the CPU path (PyNative, explicit collectives), which is not comparable with the GRAPH-mode
``DATA_PARALLEL`` jobs of the other chapters.
"""

from __future__ import annotations

from helpers.conclusions import Claim, claim
from helpers.conclusions.step_noise import THROUGHPUT_FLOOR, compare, noise_words

TOLERANCE = 1e-5        # float32 rounding of one update is ~1e-7; a wrong split is off by 1e-3 or more
TIE = THROUGHPUT_FLOOR   # the throughput band's floor (helpers.conclusions.step_noise)


def _mp(name: str) -> int:
    return int(str(name).split("x")[1])


def reference_claim(r: dict) -> Claim:
    """Whether every hybrid update equals the single-process update from the same weights."""
    d, loss = r.get("max_param_diff_vs_reference"), r.get("max_loss_diff_vs_reference")
    hyb, n = r["hybrid_layout"], len(r.get("param_diff_vs_reference_per_step") or [])
    if d is None:
        return claim("hybrid_equals_reference", None,
                     "The step-by-step comparison with one process did not run on {device}: it needs the weights the "
                     "CPU path saves after each update.", device=r.get("device_target", "this device"))
    return claim("hybrid_equals_reference", d <= TOLERANCE and loss <= TOLERANCE,
                 "Each of the {n} updates of the {hyb} run is the single-process update from the same weights: weights "
                 "within {d:.1e}, per-rank losses within {loss:.1e} (tolerance {tol:.0e}).",
                 "The {hyb} run is not the single-process update: largest weight difference {d:.1e}, per-rank loss "
                 "difference {loss:.1e}, above the tolerance {tol:.0e}.",
                 n=n, hyb=hyb, d=d, loss=loss, tol=TOLERANCE)


def bytes_claim(r: dict) -> Claim:
    """Whether a hybrid rank held exactly 1/mp of the data-parallel classifier bytes."""
    b, hyb, dp = r["classifier_param_bytes_per_rank"], r["hybrid_layout"], r["dp_layout"]
    mp = _mp(hyb)
    return claim("classifier_bytes_divided_by_mp", b["hybrid"] * mp == b["dp"],
                 "Each rank of the {hyb} run held {h:,} bytes of classifier against {d:,} under {dp}: exactly 1/{mp}.",
                 "Each rank of the {hyb} run held {h:,} bytes of classifier against {d:,} under {dp}: {ratio:.3f}x, "
                 "not 1/{mp}.", hyb=hyb, dp=dp, h=b["hybrid"], d=b["dp"], mp=mp, ratio=b["hybrid"] / b["dp"])


def checkpoint_claim(r: dict) -> Claim:
    """Whether ``transform_checkpoints`` merged the shards into exactly the hand-assembled weights."""
    d = r["merged_checkpoint_max_diff"]
    return claim("merged_checkpoint_identical", d == 0.0,
                 "MindSpore's `transform_checkpoints` merged the {hyb} ranks' shards into exactly the hand-assembled "
                 "weights (largest difference {d}); re-split for {resume}, they resumed training there.",
                 "The checkpoint merged by `transform_checkpoints` differs from the hand-assembled shards by {d:.1e}.",
                 hyb=r["hybrid_layout"], d=d, resume=r["resumed_on_layout"])


def strategy_claim(r: dict) -> Claim:
    """Whether a strategy file that does not fit the job was refused before launch."""
    return claim("bad_strategy_rejected", bool(r["bad_strategy_rejected"]),
                 "A 4-card strategy file was refused before launch for {world} ranks, and 10 classes could not be split 4 "
                 "ways.",
                 "A strategy file that does not fit the job (4 cards offered to {world} ranks, or 10 classes split 4 "
                 "ways) was accepted.", world=r.get("world_size", 8))


def oom_claims(r: dict) -> list[Claim]:
    """Whether data parallel ran out of memory under the cap and the hybrid layout fitted under it."""
    o = r["oom"]
    f = dict(classes=o["num_classes"], dp=o["dp_layout"], hyb=o["hybrid_layout"], cap=o["cap_mb"],
             dp_peak=o["dp_vms_peak_mb"], hyb_peak=o["hybrid_vms_peak_mb"], above=o["margin_above_mb"],
             below=o["margin_below_mb"], kind=o["error_kind"], db=o["dp_classifier_bytes"],
             hb=o["hybrid_classifier_bytes"])
    oom = bool(r["dp_oom_reproduced"])
    fits = bool(r["hybrid_fits_under_cap"])
    tries = o.get("hybrid_failed_tries") or []
    retried = (f" (on try {len(tries) + 1}: the first failed with kind '{tries[0]}'; a rank's virtual size varies "
               "between runs)" if tries else "")
    fail_text = ("failed with a different error (JobFailed kind '{kind}')" if o["error_kind"] else "finished")
    return [
        claim("dp_oom_under_cap", oom,
              "With {classes:,} classes, data parallel ({dp}, {db:,} bytes of classifier per rank) needed {dp_peak:.0f} MB "
              "per rank uncapped; under a {cap} MB cap ({above:.0f} MB below that) it failed "
              "with JobFailed kind '{kind}'.",
              "With {classes:,} classes, data parallel ({dp}) needed {dp_peak:.0f} MB per rank without a cap; under a "
              "{cap} MB cap it " + fail_text + ", not an out-of-memory failure.", **f),
        claim("oom_hint_names_split", bool(o.get("hint_names_split")),
              "The out-of-memory message named the classifier split as the fix, not accumulation, which leaves the "
              "classifier and its optimizer state whole.",
              "The out-of-memory message did not name the classifier split as the fix.") if oom else
        claim("oom_hint_names_split", None, "No out-of-memory message to read: the capped data-parallel job did not "
              "run out of memory."),
        claim("hybrid_fits_under_cap", fits,
              "The {hyb} layout ({hb:,} bytes of classifier per rank) trained under the same {cap} MB cap, peaking at "
              "{hyb_peak:.0f} MB, {below:.0f} MB below it" + retried + ".",
              "The {hyb} layout ({hb:,} bytes of classifier per rank) did not fit under the same {cap} MB cap "
              + ("(peak {hyb_peak:.0f} MB)." if o["hybrid_vms_peak_mb"] is not None else
                 "(JobFailed kind '{hyb_kind}')."), hyb_kind=o.get("hybrid_error_kind"), **f),
    ]


def throughput_claim(r: dict) -> Claim:
    """Observation: hybrid vs data-parallel img/s on the same execution path, ranked only beyond both jobs'
    step-to-step noise (``step_noise``; ``TIE`` is the floor)."""
    hyb, dp = r["hybrid_layout"], r["dp_layout"]
    a, b = r["img_per_s"][hyb], r["img_per_s"][dp]
    c = compare(a / b, r["timed_step_s"][hyb], r["timed_step_s"][dp], floor=TIE)
    word = ("within noise of" if not c["ranked"] else "{pct:.0f}% faster than" if c["ratio"] > 1 else
            "{pct:.0f}% slower than")
    return claim("throughput_same_path", None,
                 "Both layouts ran the same path, {path}: {hyb} trained {a:.1f} img/s, " + word + " {dp} at {b:.1f} "
                 "img/s ({noise}). Neither number compares with the compiled GRAPH-mode DATA_PARALLEL jobs of "
                 "chapters 00-02, which do not run operator by operator.",
                 path=r.get("hybrid_path_short", "PyNative with explicit collectives"), hyb=hyb, dp=dp, a=a, b=b,
                 ratio=c["ratio"], pct=abs(c["ratio"] - 1) * 100, tie=TIE, noise=noise_words(c, "one run each"),
                 spread=c["spread"], band=c["band"], ranked=c["ranked"])


def traffic_claims(r: dict) -> list[Claim]:
    """Observations: what the CPU path's logit gather moves against a sharded cross-entropy, and what resuming
    from the weights-only merged checkpoint restarts."""
    out = []
    t = r.get("logits_traffic")
    if t:
        out.append(claim("logits_gather_cost", None,
                         "Each rank's logit gather moved {kb:.1f} KB per step (AllReduce payloads, forward and "
                         "backward, of {rows} rows x {c} classes) so every member of a group of {mp} holds the whole "
                         "group's logits; a sharded cross-entropy (each rank's {cols} columns; the row maximum, sum "
                         "of exponentials and target logit reduced across the group) would move {skb:.2f} KB: "
                         "{ratio:.0f}x less (2C/5).", kb=t["logits_gather"] / 1e3, rows=t["mp"] * t["batch"],
                         c=t["classes"], mp=t["mp"], cols=t["classes"] // t["mp"], skb=t["sharded_ce"] / 1e3,
                         ratio=t["logits_over_sharded"]))
    d = r.get("resume_dropped")
    if d:
        out.append(claim("resume_restarts_momentum", None,
                         "The merged checkpoint holds the weights and BatchNorm statistics, not the optimizer: the "
                         "resumed run restarted momentum from zero, dropping a momentum buffer of norm {m:.3g} "
                         "({pct:.1%} of the weights' norm on rank 0).", m=d["momentum_norm"],
                         pct=d["momentum_norm"] / d["weight_norm"]))
    return out


def build(r: dict) -> list[Claim]:
    """The chapter's claims from its recorded values (``r``: the dict ``record_results`` writes)."""
    out = [reference_claim(r), bytes_claim(r), checkpoint_claim(r), strategy_claim(r)]
    if r.get("oom") is not None:
        out += oom_claims(r)
    out.append(throughput_claim(r))
    return out + traffic_claims(r)
