"""Chapter 00's steps (notebooks/00_environment_setup.ipynb): the pre-flight verdict, the convolution choice, the
code cell's job summary and checksums, the same cell on 2 nodes and through Slurm, the errata checks and the values
the chapter records.

Each ``show_*`` displays one notebook output; the pure parts it shows (rows, sentences) are separate functions.
"""

from __future__ import annotations

import inspect

from helpers.cells.run import CONFIG_NAME, RANK_MAIN, cell_config, cell_job
from helpers.cells.program import CELL_FILE
from helpers.conclusions.ch00 import (WEIGHTS_SHA256, WEIGHTS_SUM, conv_benchmark, seed_api_facts,
                                      two_node_comparison)
from helpers.core.card_settings import NOT_APPLICABLE
from helpers.core.config import config_table
from helpers.core.rehearsal import stand_in_rows
from helpers.job.launch import msrun_command
from helpers.job.multinode import two_node_unavailable
from helpers.preflight.preflight import preflight_checks
from helpers.output.tables import md_table, show_md, show_table
from helpers.topics.averaging import first_update_check
from helpers.train.conv_autoselect import resolve_conv_impl


def show_torch_table() -> None:
    """The PyTorch -> MindSpore table (``helpers.chapters.torch_to_mindspore``; its names are tested against the wheel)."""
    from helpers.chapters.torch_to_mindspore import table_markdown

    show_md(table_markdown())


def show_config(cfg) -> None:
    """The settings of the chapter's job, before it runs."""
    show_table(config_table(cfg), ["setting", "value"])


# ---------------------------------------------------------------- 1. what this machine has
def shows_stand_ins(cfg, preset: str) -> bool:
    """Whether the chapter shows which card-only parts ran as on the cards (a rehearsal, or gpu8 on a card)."""
    return cfg.rehearsal or (cfg.device_target != "CPU" and preset == "gpu8")


def preflight_rows(checks) -> list[tuple]:
    """Table rows (check, value, ✅/⚠️/❌, note) for the preflight checks."""
    return [(c.name, c.value, "❌" if not c.ok else "⚠️" if c.warn else "✅", c.note) for c in checks]


def preflight_md(checks) -> str:
    """A one-line verdict, the failed and warned checks in full (what they mean, the fix), then the passed ones
    compact (check, found): the reader's eye goes to what needs doing."""
    failed = [c for c in checks if not c.ok]
    warned = [c for c in checks if c.ok and c.warn]
    passed = [c for c in checks if c.ok and not c.warn]
    verdict = (f"**Pre-flight: {len(failed)} of {len(checks)} checks failed**" if failed
               else f"**Pre-flight: all {len(checks)} checks passed**")
    verdict += f", {len(warned)} with a warning" if warned else ""
    parts = [verdict + (": the fixes are in the first table." if failed else ".")]
    if failed or warned:
        parts.append(md_table(preflight_rows(failed + warned), ["check", "found", "ok", "what it means / the fix"]))
    if passed:
        parts.append(md_table([(c.name, c.value) for c in passed], ["passed", "found"]))
    return "\n\n".join(parts)


def show_preflight(cfg, preset: str) -> list[str]:
    """The pre-flight verdict and tables for this config (and, where it applies, the stand-in table); the failed
    checks' names."""
    checks = preflight_checks(cfg, preset)
    show_md(preflight_md(checks))
    if shows_stand_ins(cfg, preset):
        card = f", standing for {cfg.rehearsed_target}" if cfg.rehearsed_target else ""
        show_md(f"**Which parts ran as on the cards** (device target {cfg.device_target}{card}):")
        show_table(stand_in_rows(cfg.device_target, cfg.rehearsed_target),
                   ["on 8 cards", "in this run", "where the branch is"])
    return [c.name for c in checks if not c.ok]


def conv_choice_md(cfg, impl: str, evidence: dict, bench: dict) -> str:
    """Which convolution runs and why, this run's timing (when measured) next to the committed benchmark."""
    times = evidence.get("seconds_per_step")
    why = (f"timed here (`{evidence['cpu']}`) per training step: native {times['native']:.3f} s, im2col "
           f"{times['im2col']:.3f} s (native/im2col = {times['native'] / times['im2col']:.2f})" if times
           else evidence["reason"])
    return (f"This run uses **conv_impl = `{impl}`** on **{cfg.device_target}**: {why}.  \n"
            f"Committed benchmark (`benchmarks/results/conv_cpu.json`, {bench['cpu']}): native took "
            f"**{bench['min_ratio']:.1f}-{bench['max_ratio']:.1f}x** as long as im2col over its {bench['cases']} cases.")


def choose_conv_impl(cfg):
    """``cfg`` with its convolution resolved (``auto``: timed once per machine), shown with the evidence; returns
    ``(cfg, seconds per step by implementation)`` (empty when nothing was timed)."""
    impl, evidence = resolve_conv_impl(cfg)
    cfg = cfg.replace(conv_impl=impl)
    show_md(conv_choice_md(cfg, impl, evidence, conv_benchmark()))
    return cfg, evidence.get("seconds_per_step") or {}


# ---------------------------------------------------------------- 2. the first 8-rank job
def msrun_command_line(cfg) -> str:
    """The msrun command the launcher runs for a code cell on ``cfg`` (a fixed port and placeholder paths)."""
    return " ".join(msrun_command(cfg.replace(master_port=12345), "runs/00/<run>/config.json", "runs/00/<run>/logs",
                                  worker=(*RANK_MAIN, CELL_FILE, CONFIG_NAME)))


def steps_applied(result) -> int:
    """Steps whose update was applied on rank 0 (an AMP step that overflowed in float16 is skipped)."""
    return sum(not rec.get("overflow", False) for rec in result.steps[0])


def card_of(result) -> dict:
    """What the first rank recorded of its card (``helpers.core.card_settings.card_record``): chip, precision
    mode in force, deterministic, whether float32 stayed float32 and why; ``n/a`` on CPU."""
    rec = result.summaries[result.ranks[0]] if result.ranks else {}
    return {k: rec.get(k, NOT_APPLICABLE) for k in ("chip", "precision_mode", "deterministic", "float32",
                                                      "float32_note")}


def job_summary_md(cfg, result) -> str:
    """How many ranks finished, the wall time, the run directory; on a card, its chip and settings."""
    card = card_of(result)
    on_card = (f" On {cfg.device_target} (chip `{card['chip']}`): precision mode `{card['precision_mode']}`, "
               f"float32 kept `{card['float32']}` ({card['float32_note']}), deterministic `{card['deterministic']}`."
               if cfg.device_target != "CPU" else "")
    return (f"Finished: **{len(result.ranks)} of {cfg.world_size} ranks** wrote a summary, wall time "
            f"**{result.wall_s:.1f} s** (run directory `{result.run_dir}`).{on_card}")


def loss_scale_md(cfg, result) -> str:
    """With a dynamic loss scale: how many steps were applied, how many overflowed ("" without one)."""
    if not any("overflow" in rec for rec in result.steps[0]):
        return ""
    applied = steps_applied(result)
    skipped = cfg.steps - applied
    what = (f"; {skipped} overflowed in float16 and were skipped while the scale halved" if skipped
            else ", none overflowed in float16")
    return (f"AMP {cfg.amp_level} with a dynamic loss scale: **{applied} of {cfg.steps}** steps were applied{what} "
            f"(scale after the last step: {result.steps[0][-1]['loss_scale']:g}).")


def show_job_summary(cfg, result) -> None:
    """Show how the job finished and, with a dynamic loss scale, its overflowed steps."""
    show_md(job_summary_md(cfg, result))
    if loss_scale_md(cfg, result):
        show_md(loss_scale_md(cfg, result))


# ---------------------------------------------------------------- 3. were the gradients averaged?
def distinct_first_batches(result) -> int:
    """How many different class mixes the ranks' first batches had (each rank reads its own shard)."""
    return len({tuple(sorted(result.steps[r][0]["labels"])) for r in result.ranks})


def weights_identical(result) -> bool:
    """Whether every rank of the code cell's job finished with the same sha256 of its weights."""
    sums = {(v or {}).get(WEIGHTS_SHA256) for v in result.returns.values()}
    return len(sums) == 1 and None not in sums


def checksum_rows(result) -> list[tuple]:
    """Per rank: first loss, the weights' sha256 and sum, to show the ranks hold the same weights."""
    return [(r, f"{result.steps[r][0]['loss']:.4f}", result.returns[r][WEIGHTS_SHA256][:16],
             f"{result.returns[r][WEIGHTS_SUM]:.6f}") for r in result.ranks]


def checksum_md(result) -> str:
    """Each rank's step-1 loss on its own data, then how many distinct sha256 (and sums) of the trainable weights
    the ranks ended with: one line each, as the full per-rank values are in the cell's own table above."""
    rows = checksum_rows(result)
    shas, sums = sorted({r[2] for r in rows}), sorted({r[3] for r in rows})
    return (f"Step-1 loss per rank {rows[0][0]}-{rows[-1][0]} (own data): "
            f"{', '.join(r[1] for r in rows)}.  \n"
            f"Weights at the end: **{len(shas)} distinct sha256** over the {len(rows)} ranks "
            f"({', '.join(f'`{h}`' for h in shas)}), sum {', '.join(sums)}.")


def show_rank_checksums(result) -> None:
    """Each rank's step-1 loss on its own data, then the distinct sha256 and sums of the ranks' trainable weights."""
    show_md(checksum_md(result))


def averaging_rows(check: dict) -> list[tuple]:
    """The ranks' weights after update 1 against one process's update with the mean and with the sum."""
    return [("the gradients' mean", f"{check['vs_mean']:.1e}"),
            ("the gradients' sum", f"{check['vs_sum']:.2f}"),
            (f"the mean, furthest parameter ({check['worst_parameter']})", f"{check['worst_parameter_vs_mean']:.1e}")]


def show_averaging(result) -> dict:
    """Redo update 1 in one process (``helpers.topics.averaging``) and show how far the ranks' weights are from
    the mean-gradient and the sum-gradient update."""
    check = first_update_check(result.run_dir)
    if "skipped" in check:
        show_md(f"**Not checked:** {check['skipped']}.")
        return check
    show_table(averaging_rows(check), ["update 1 replayed with", "rank 0's distance (sizes of the mean update)"])
    return check


# ---------------------------------------------------------------- 4. two nodes x 4 workers
def two_node_skip_reason(run_multinode: bool, cfg, **checks) -> str:
    """Why the 2-node demo does not run here for ``cfg`` ("" when it runs); ``checks``: ``which``/``run`` for the
    Ascend device-network check (``helpers.job.multinode.two_node_unavailable``)."""
    if not run_multinode:
        return "run_multinode=False"
    return two_node_unavailable(cfg.device_target, range(cfg.world_size), **checks) or ""


def two_node_rows(result, multi, cmp: dict) -> list[tuple]:
    """Per step the largest loss difference over the ranks between the layouts, then the final checksums."""
    return ([(i + 1, f"{d:.1e}") for i, d in enumerate(cmp["loss_diff_per_step"])]
            + [("final sha256", f"{result.returns[0][WEIGHTS_SHA256][:16]} vs {multi.returns[0][WEIGHTS_SHA256][:16]}")])


def show_two_node_comparison(cfg, result, multi, skipped: str) -> dict:
    """The 2-node job against the single-node one (``two_node_comparison``), or why it was skipped ({})."""
    if skipped:
        show_md(f"**Skipped the 2-node demo:** {skipped}.")
        return {}
    cmp = two_node_comparison(result, multi)
    nodes = sorted({p.parent.name for p in multi.log_dir.rglob("worker_*.log")})
    show_md(f"2 nodes x {cfg.world_size // 2} workers: **{len(multi.ranks)} ranks** finished "
            f"(logs per node: {', '.join(nodes)}).")
    show_table(two_node_rows(result, multi, cmp),
               ["step", "largest |loss difference| over the ranks, 1 vs 2 nodes"])
    return cmp


# ---------------------------------------------------------------- 5. on a cluster (Slurm)
def slurm_config(cfg, nodes: int = 2):
    """The chapter's job as a Slurm job over ``nodes`` nodes (the notebook's own ``slurm`` settings kept)."""
    return cfg.replace(name="slurm", launcher="slurm", slurm={**cfg.slurm, "nodes": nodes})


def run_two_nodes(cfg, result, progress: str = "auto"):
    """The code cell of ``result`` again, as 2 nodes x ``world_size/2`` workers (``helpers.job.multinode``)."""
    from helpers.job.multinode import run_two_node_job

    job = cell_job(result)
    return run_two_node_job(cell_config(cfg, job["files"]).replace(name="two-nodes"), progress=progress, **job)


def show_on_a_cluster(cfg, result, progress: str = "auto"):
    """Run the code cell of ``result`` through Slurm as 2 nodes x 4 ranks and compare it with the local job;
    without a reachable controller, print the batch script it would submit. Returns the Slurm job's result, or
    None."""
    from helpers.core.paths import resolve
    from helpers.job.launch import run_job
    from helpers.job.launchers.slurm import script_preview
    from helpers.job.slurm_queue import slurm_unreachable

    job = cell_job(result)
    scfg = slurm_config(cell_config(cfg, job["files"]))
    reason = slurm_unreachable()
    if reason:
        show_md(f"**No Slurm cluster here** ({reason}). The batch script `run_job` would submit with "
                "`sbatch --parsable` (`<token>` is random per job):")
        print(script_preview(scfg, resolve(f"runs/{cfg.chapter}/<stamp>-slurm"), worker=job["worker"]))
        return None
    multi = run_job(scfg, progress=progress, **job)
    show_two_node_comparison(cfg, result, multi, "")
    return multi


# ---------------------------------------------------------------- errata
def rank_num_error() -> str | None:
    """The error MindSpore raises for the seed blog's ``get_auto_parallel_context("rank_num")`` (None: accepted)."""
    import mindspore as ms

    try:
        ms.get_auto_parallel_context("rank_num")
    except ValueError as exc:
        return str(exc)
    return None


def show_errata_checks() -> dict:
    """The seed blog's 1.10-era calls checked against the installed MindSpore: ``{rank_num_error, seed_api}``."""
    import mindspore as ms
    from mindspore.communication import get_group_size, get_rank

    error, seed_api = rank_num_error(), seed_api_facts()
    show_md(f"`get_auto_parallel_context('rank_num')` → **ValueError**: `{error}`  \n"
            f"Real API: `get_rank{inspect.signature(get_rank)}`, `get_group_size{inspect.signature(get_group_size)}`.")
    show_table(list(seed_api.items()), [f"checked in MindSpore {ms.__version__}", "found"])
    return {"rank_num_error": error, "seed_api": seed_api}


# ---------------------------------------------------------------- what the chapter records
def recorded_values(preset: str, rehearse: bool, cfg, result, *, conv_times: dict, preflight_failed: list[str],
                    multi, multinode_skipped: str, two_node: dict, errata: dict, averaging: dict) -> dict:
    """The values ``record_results`` stores and ``chapter00_claims`` reads."""
    return dict(
        preset=preset,
        rehearsal=rehearse,
        world_size=len(result.ranks),
        steps=cfg.steps,
        ranks_finished=sum(1 for r in result.ranks if len(result.steps.get(r, [])) == cfg.steps),
        weights_identical=weights_identical(result),
        averaging=averaging,
        distinct_first_batches=distinct_first_batches(result),
        multinode_world_size=len(multi.ranks) if multi else 0,
        multinode_weights_identical=bool(multi and weights_identical(multi)),
        multinode_skipped=multinode_skipped,
        multinode_vs_single=two_node,
        job_wall_s=result.wall_s,
        conv_impl=cfg.conv_impl,
        conv_seconds_per_step=conv_times,
        device_target=cfg.device_target,
        card=card_of(result),                          # chip, precision mode, deterministic (n/a on CPU)
        rehearsed_target=cfg.rehearsed_target,         # the card a rehearsal stands for (None outside one)
        rank_num_is_invalid=errata["rank_num_error"] is not None,
        seed_api=errata["seed_api"],
        steps_applied=steps_applied(result),
        preflight_failed=preflight_failed,
    )
