"""Chapter 00's conclusions, from the values its notebook records.

Two helpers compute figures the notebook records (``two_node_comparison``: the 2-node job against the
single-node one; ``seed_api_facts``: what the installed MindSpore says about the seed blog's 1.10-era calls);
``chapter00_claims`` turns the recorded dict into claims.
"""

from __future__ import annotations

import inspect

import numpy as np

from helpers.conclusions import Claim, claim
from helpers.core.card_settings import ASCEND_KEEP_DTYPE, GPU_CONV_TF32, GPU_DETERMINISM_SCOPE

# What the chapter's introduction promises for the 2-node job: what ``two_node_comparison`` measures and
# ``_two_node_claims`` judges, both ways (the notebook's introduction quotes it; a unit test checks it does).
TWO_NODE_INTRO = ("the same job as **2 nodes x 4 workers**, compared bit for bit with 1 node: every rank's loss at "
                  "every step and the final checksum")


# ----------------------------------------------------------------------------------------- figures
WEIGHTS_SHA256, WEIGHTS_SUM = "sha256 of weights", "sum of weights"   # what chapter 00's code cell finishes with


def two_node_comparison(single, multi) -> dict:
    """The 2-node run of chapter 00's code cell (``multi``) against the single-node one, rank by rank (both
    ``JobResult``).

    ``same_data``: every rank read the same labels at every step in both jobs (same sharding, same order);
    ``first_losses_equal``: step-1 losses bit-identical on every rank (same initial weights, same batch: the
    forward pass is local, no communication yet); ``first_divergent_step``: the first step (1-based) at which
    any rank's loss differs, None if none does; ``same_checksum``: the final sha256 of the weights is equal."""
    ranks = single.ranks
    same_data = all([rec["labels"] for rec in single.steps[r]] == [rec["labels"] for rec in multi.steps[r]]
                    for r in ranks)
    a, b = single.metric("loss"), multi.metric("loss")
    differs = np.any(a != b, axis=0) if a.shape == b.shape else np.ones(a.shape[1], dtype=bool)
    first = int(np.argmax(differs)) + 1 if differs.any() else None
    s0, m0 = single.returns[ranks[0]], multi.returns[ranks[0]]
    return {
        "same_data": bool(same_data),
        "first_losses_equal": bool(a.shape == b.shape and np.array_equal(a[:, 0], b[:, 0])),
        "first_divergent_step": first,
        "loss_diff_at_divergence": float(np.abs(a[:, first - 1] - b[:, first - 1]).max()) if first else 0.0,
        "max_loss_diff": float(np.abs(a - b).max()) if a.shape == b.shape else float("nan"),
        "loss_diff_per_step": np.abs(a - b).max(axis=0).tolist() if a.shape == b.shape else [],
        "same_checksum": s0[WEIGHTS_SHA256] == m0[WEIGHTS_SHA256],
        "param_sum_rel_diff": abs(s0[WEIGHTS_SUM] - m0[WEIGHTS_SUM]) / max(abs(s0[WEIGHTS_SUM]), 1e-30),
        "steps": int(a.shape[1]),
    }


def conv_benchmark(path="benchmarks/results/conv_cpu.json") -> dict:
    """The committed ``python -m benchmarks.conv_cpu`` result: the CPU it ran on and the range of its
    native/im2col time ratios (blocks and whole training steps of the ci and cpu models)."""
    import json

    from helpers.core.paths import code_root

    data = json.loads((code_root() / path).read_text())   # shipped with the code, not in the course home
    ratios = [c["native_over_im2col"] for c in data["cases"].values()]
    return {"cpu": data.get("cpu", "?"), "cases": len(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
            "date": data.get("machine", {}).get("date_utc", "")}


def seed_api_facts() -> dict:
    """What the installed MindSpore says about the calls of the seed blog (written for 1.10), read from the
    package itself: msrun's own source, the context setters' docstrings, and a set/get round trip of the
    ``set_auto_parallel_context`` keys the seed passes (the context is reset afterwards)."""
    import mindspore as ms
    from mindspore import context
    from mindspore.parallel.cluster import run as msrun_cli
    from mindspore.parallel.cluster.process_entity import _api as msrun_api

    accepted, refused = [], []
    try:
        for key, value in SEED_CONTEXT_KEYS.items():
            try:
                context.set_auto_parallel_context(**{key: value})
                accepted.append(key)
            except (ValueError, TypeError):
                refused.append(key)
        broadcast_read_back = bool(context.get_auto_parallel_context("parameter_broadcast"))
    finally:
        context.reset_auto_parallel_context()
    set_device_doc = inspect.getdoc(ms.set_device) or ""
    set_context_doc = inspect.getdoc(context.set_context) or ""
    return {
        "version": ms.__version__,
        "msrun_sets_device_id": 'os.environ["DEVICE_ID"] = str(local_rank)'
                                in inspect.getsource(msrun_api._ProcessManager._start_single_worker),
        "msrun_has_rank_table_option": "--rank_table_file" in inspect.getsource(msrun_cli),
        "set_device_negotiates_under_msrun": "msrun" in set_device_doc and "negotiate" in set_device_doc,
        "set_context_device_id_deprecated": "Please use the API :func:`mindspore.set_device`" in set_context_doc,
        "auto_parallel_context_to_be_deprecated": "will be deprecated"
                                                  in (inspect.getdoc(context.set_auto_parallel_context) or ""),
        "context_keys_accepted": accepted,
        "context_keys_refused": refused,
        "parameter_broadcast_read_back": broadcast_read_back,
    }


# The keyword arguments the seed passes to set_auto_parallel_context (its 1.10 data-parallel set-up).
SEED_CONTEXT_KEYS = {"parallel_mode": "data_parallel", "gradients_mean": True, "device_num": 8,
                     "parameter_broadcast": True}


# ----------------------------------------------------------------------------------------- claims
def averaging_claim(a: dict, world: int) -> Claim:
    """Whether update 1 on the ranks was one process's update with the mean gradient (``first_update_check``)."""
    if "skipped" in a:
        return claim("gradients_averaged", None, "Averaging was not checked: {why}.", why=a["skipped"])
    return claim("gradients_averaged", a["averaged"],
                 "Rank 0's update 1 is one process's update with the {world} ranks' mean gradient to {vs_mean:.0e} "
                 "of its size (every parameter within {worst_gap:.0e}), {vs_sum:.1f} sizes from the sum's: the "
                 "gradients were averaged.",
                 "Rank 0's weights after update 1 are {vs_mean:.2g} sizes from one process's mean-gradient update "
                 "and {vs_sum:.2g} from the sum's (furthest: {worst}, {worst_gap:.2g}; same batches: {same}): the "
                 "update was not the mean gradient.",
                 world=world, vs_mean=a["vs_mean"], vs_sum=a["vs_sum"], worst=a["worst_parameter"],
                 worst_gap=a["worst_parameter_vs_mean"], same=a["same_batches"])


def chapter00_claims(r: dict) -> list[Claim]:
    """Claims from chapter 00's recorded values ``r`` (the dict passed to ``record_results``)."""
    world, finished, steps = r["world_size"], r["ranks_finished"], r["steps"]
    out = [
        claim("ranks_finished", finished == world and world > 0,
              "{finished} of {world} ranks ran all {steps} steps and wrote a summary.",
              "Only {finished} of {world} ranks ran all {steps} steps.",
              finished=finished, world=world, steps=steps),
        claim("weights_identical", r["weights_identical"] and r["distinct_first_batches"] > 1,
              "All {world} ranks ended with one parameter sha256 after first batches of {distinct} different "
              "class mixes: they applied the same updates.",
              "The ranks did not end with one parameter checksum, or they all read the same batch "
              "({distinct} distinct first-step class mixes): synchronisation is not shown.",
              world=world, distinct=r["distinct_first_batches"]),
        averaging_claim(r.get("averaging") or {"skipped": "it was not run"}, world),
    ]
    times = r.get("conv_seconds_per_step") or {}
    if times:
        faster = min(times, key=times.get)
        slower = max(times, key=times.get)
        out.append(claim("conv_impl", r["conv_impl"] == faster,
                         "conv_impl='{impl}' ran, the faster on this CPU: {slower} took {ratio:.1f}x as long per step.",
                         "conv_impl='{impl}' ran although {faster} was measured faster ({ratio:.1f}x).",
                         impl=r["conv_impl"], faster=faster, slower=slower, ratio=times[slower] / times[faster]))
    else:
        out.append(claim("conv_impl", None, "conv_impl='{impl}' ran on {device} (no CPU timing: the native kernel).",
                         impl=r["conv_impl"], device=r["device_target"]))
    out += _card_claims(r) + _two_node_claims(r)
    out.append(claim("rank_num_invalid", r["rank_num_is_invalid"],
                     "The seed's get_auto_parallel_context('rank_num') raises ValueError in MindSpore {version}: "
                     "use get_group_size() after init().",
                     "get_auto_parallel_context('rank_num') was accepted by MindSpore {version}.",
                     version=r["seed_api"]["version"]))
    seed = r["seed_api"]
    out.append(claim("parameter_broadcast", seed["parameter_broadcast_read_back"]
                     and "parameter_broadcast" in seed["context_keys_accepted"],
                     "set_auto_parallel_context(parameter_broadcast=True) is accepted by MindSpore {version} "
                     "(read back True); this course gets identical initial weights from the seed instead.",
                     "set_auto_parallel_context(parameter_broadcast=True) was not accepted by MindSpore {version}.",
                     version=seed["version"]))
    out.append(claim("device_id", seed["msrun_sets_device_id"] and seed["set_device_negotiates_under_msrun"],
                     "msrun sets DEVICE_ID to each worker's local rank and set_device negotiates the card under msrun: "
                     "a script no longer reads DEVICE_ID to pick its card; a node's cards are chosen with "
                     "CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES.",
                     "This MindSpore's msrun does not set DEVICE_ID per worker, or set_device does not negotiate the "
                     "card under msrun: check how this version selects cards."))
    return out


def _card_claims(r: dict) -> list[Claim]:
    """On a card: the job ran with float32 kept and deterministic kernels, or the identity claims mean less."""
    card = r.get("card") or {}
    if r["device_target"] == "CPU" or not card:
        return []
    if "float32" in card:                  # the rank's own verdict (helpers.core.card_settings.float32_kept)
        kept = card["float32"] is True
    else:
        kept = (str(card.get("precision_mode", "")).startswith(ASCEND_KEEP_DTYPE) if r["device_target"] == "Ascend"
                else card.get("precision_mode") == f"{GPU_CONV_TF32}=False")
    kernels, unlike = "deterministic kernels", "not run-to-run noise or reduced-precision matmuls"
    if r["device_target"] == "GPU":
        kernels = f"deterministic mode, where {GPU_DETERMINISM_SCOPE}"
        unlike = "not TF32 convolutions; a repeated run may still differ in the last bits"
    return [claim("card_settings", kept and card.get("deterministic") is True,
                  "On {device} (chip {chip}) the jobs ran with precision mode {mode} and {kernels}, so the "
                  "bit-for-bit comparisons compare layouts, {unlike}.",
                  "On {device} (chip {chip}) the jobs ran with precision mode {mode}, float32 kept {f32}{why}, "
                  "deterministic {det}: a bit-for-bit comparison may then show run-to-run noise or reduced-precision "
                  "arithmetic.",
                  device=r["device_target"], chip=card.get("chip"), mode=card.get("precision_mode"),
                  det=card.get("deterministic"), f32=card.get("float32", kept), kernels=kernels, unlike=unlike,
                  why=f" ({card['float32_note']})" if card.get("float32_note") else "")]


# What the namespaced demo cannot show on a card host (multinode.py: both namespaces keep one hostname).
TWO_NODE_LINK = {
    "GPU": "On GPU both simulated nodes are one host to NCCL (it tells hosts apart by hostname and boot id, which "
           "both namespaces share), so the halves may have exchanged gradients over shared memory or peer-to-peer "
           "links rather than the veth pair.",
    "Ascend": "On Ascend each simulated node gave HCCL its own address (HCCL_IF_IP) and the NPUs had device IPs; "
              "which link carried the gradients (the chips' links inside the server or their RoCE ports) was not "
              "recorded.",
}
ROUNDING = 1e-5   # a first loss difference below this (losses ~1-3 in float32: a few ulps) is rounding


def _two_node_claims(r: dict) -> list[Claim]:
    if r.get("multinode_skipped"):
        return [claim("two_node", None, "The 2-node demo did not run: {reason}.", reason=r["multinode_skipped"])]
    cmp = r["multinode_vs_single"]
    link = [] if r["device_target"] == "CPU" else [claim(
        "two_node_link", None, TWO_NODE_LINK[r["device_target"]] + " So on a card host this demo shows the two-node "
        "launch and compares the results; the path and speed of a link between servers are not measured here.")]
    same_start = cmp["same_data"] and cmp["first_losses_equal"]
    out = [claim("two_node_same_start", same_start and r["multinode_weights_identical"],
                 "As 2 nodes x {half} workers every rank read the same batches as on 1 node, with a bit-identical "
                 "step-1 loss, and all {world} ranks again ended with one checksum.",
                 "The 2-node job did not reproduce the single-node start (same data: {data}, step-1 losses equal: "
                 "{first}, one checksum on all ranks: {ident}).",
                 half=r["multinode_world_size"] // 2, world=r["multinode_world_size"], data=cmp["same_data"],
                 first=cmp["first_losses_equal"], ident=r["multinode_weights_identical"])]
    first = cmp["first_divergent_step"]
    consistent = cmp["same_checksum"] == (first is None)
    if first is None:
        out.append(claim("two_node_checksum", consistent,
                         "Every step's loss was bit-identical in both layouts and the final checksums are equal.",
                         "Every loss was bit-identical but the final checksums differ.",
                         steps=cmp["steps"]))
    else:
        rounding = same_start and cmp["loss_diff_at_divergence"] < ROUNDING
        if not consistent:
            wrong = "The losses differ from step {first} on, yet the final checksums are equal."
        else:
            wrong = ("The final checksums differ and the losses first differ at step {first} by {d:.1e}: more than "
                     "float rounding, or after a different start, so the two jobs did not compute the same steps.")
        out.append(claim("two_node_checksum", consistent and rounding,
                         "The final checksums differ: the losses first differ at step {first} by {d:.1e} (float "
                         "rounding) after {prev} bit-identical step(s): across two nodes the AllReduce adds the "
                         "{world} gradients in another order (float addition is not associative); parameter sums "
                         "differ by {rel:.1e} (relative).",
                         wrong, first=first, prev=first - 1, d=cmp["loss_diff_at_divergence"],
                         world=r["multinode_world_size"], rel=cmp["param_sum_rel_diff"]))
    return out + link
