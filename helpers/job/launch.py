"""Run a real multi-process MindSpore job from a notebook cell: plan it, start its ranks, watch it, end it cleanly.

    result = run_job(job_config("ci", name="smoke"))

The kernel stays light: the plan step (``helpers.job.plan``) decides what runs; a launcher (``helpers.job.launchers``:
``local`` msrun, or ``slurm``) starts the ranks, each under ``helpers.job.rank_guard``; this module writes
``<run_dir>/config.json``, tails the ranks' records for live progress (``helpers.job.watch``) and returns a
``JobResult``. A failing, killed or hung rank, a timeout or an interrupt ends the job and raises ``JobFailed``
naming the rank (and its node). Ending a job is the launcher's: locally SIGINT to msrun, a short wait, then SIGKILL
to every process carrying this job's id in its environment; under Slurm scancel. Logs are always kept. Benchmarks
run another per-rank script (``worker=``) through the same start, watch and stop.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess  # noqa: F401 - tests patch subprocess.Popen through this module (tests/jobs/test_bad_parameters.py)
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from helpers.core.config import JobConfig
from helpers.core.cpu_share import remove_job_groups
from helpers.core.errors import JobFailed
from helpers.core.metrics import FOLLOW_ON_EVENT, MORE_SUMMARY_EVENT, metrics_path, read_records
from helpers.core.paths import MORE_PREFIX, more_dir, new_run_dir
from helpers.core.step_times import img_per_s
from helpers.job.compile_cache import chain_cache, claim_compile_cache
from helpers.job.disk_space import check_disk
from helpers.job.host_memory import NotEnoughHostMemory, admit
from helpers.job.launchers import cancel_orphan, make_launcher
from helpers.job.msrun import (PORT_LOCK_DIR, bind_core_map, binds_cores, find_msrun, free_port,  # noqa: F401
                               job_env, msrun_command, python_bin_dir)
from helpers.job.plan import oom_hint, plan_job, plan_more
from helpers.job.processes import GRACE_S as STOP_GRACE_S, end_orphan_job
from helpers.job.progress import make_progress
from helpers.job.registry import register, reap_orphans, unregister
from helpers.job.straggler import StragglerVerdict, straggler_verdict
from helpers.job.watch import JobWatch, Verdict, log_tail
from helpers.train.chain import more_configs

log = logging.getLogger(__name__)

POLL_S = 0.5
FAIL_GRACE_S = 2.0      # a failed job: how long msrun gets to stop its workers before the sweep
HOST_MEMORY_FILE = "host_memory.json"   # <run_dir>/: the job's need and peak host memory (helpers.core.footprint)
FINISH_GRACE_S = 0.5    # all summaries written: how long the ranks get to exit by themselves before they are ended
STOP_AFTER_FINISH_S = 0.3   # ranks gone: what msrun and the scheduler get after SIGINT before SIGKILL


# ---------------------------------------------------------------- result
@dataclass
class JobResult:
    """What a finished job left: per-rank step records and summaries, timings, paths."""

    run_dir: Path
    config: JobConfig
    returncode: int
    wall_s: float
    steps: dict[int, list[dict]] = field(default_factory=dict)
    summaries: dict[int, dict] = field(default_factory=dict)
    phase_summaries: dict[int, list[dict]] = field(default_factory=dict)   # rank -> its phases' closing records
    hosts: dict[int, str] = field(default_factory=dict)                     # rank -> node (its start record)
    host_memory: dict = field(default_factory=dict)     # HOST_MEMORY_FILE: peak_host_mb, peak_rss_sum_mb, need_mb
    cell_steps: dict[int, list[dict]] = field(default_factory=dict)  # a ``%%ranks --then`` cell's own step records
    more: list["JobResult"] = field(default_factory=list)   # the launch's further jobs (``run_job``'s ``more``)

    @property
    def peak_host_mb(self) -> float:
        """The job's peak host memory (MB): msrun, its scheduler and local ranks together (helpers.core.footprint)."""
        return float(self.host_memory.get("peak_host_mb", float("nan")))

    @property
    def straggler(self) -> StragglerVerdict:
        """The rank the others waited for, its cause and cost, or no straggler (``helpers.job.straggler``)."""
        return straggler_verdict(self.steps, self.hosts)

    @property
    def launch(self) -> str:
        """The launch that ran the job: its run folder's name, and ``/then-<i>`` for one of its further jobs
        (``run_job``'s ``more``)."""
        chained = self.run_dir.name.startswith(MORE_PREFIX)
        return f"{self.run_dir.parent.name}/{self.run_dir.name}" if chained else self.run_dir.name

    @property
    def log_dir(self) -> Path:
        """msrun's logs of the launch that ran the job (a further job's are its launch's)."""
        launch_dir = self.run_dir.parent if self.run_dir.name.startswith(MORE_PREFIX) else self.run_dir
        return launch_dir / "logs"

    @property
    def ranks(self) -> list[int]:
        return sorted(self.summaries)

    def metric(self, name: str) -> np.ndarray:
        """A (ranks x steps) array of one step metric, e.g. ``loss``, ``step_s``, ``data_s``."""
        return np.array([[rec[name] for rec in self.steps[r]] for r in sorted(self.steps)], dtype=float)

    def summary(self, name: str) -> list:
        return [self.summaries[r].get(name) for r in self.ranks]

    def img_per_s(self, skip: int = 1) -> float:
        """Images per second: the global batch over the steady slowest-rank step time (``step_times``)."""
        return img_per_s(self.metric("step_s"), self.config.global_batch, skip)

    @property
    def returns(self) -> dict[int, object]:
        """rank -> what its code handed back (a notebook cell's ``finish(value)``, ``helpers.cells``)."""
        return {r: self.summaries[r].get("result") for r in self.ranks}

    @property
    def weights_identical(self) -> bool:
        sums = set(self.summary("checksum"))
        return len(sums) == 1 and None not in sums

    @property
    def phases(self) -> list[str]:
        from helpers.train.phases import phase_names      # sampler, or sampler@seed with phase_seeds

        return phase_names(self.config)

    def phase(self, name: str) -> "JobResult":
        """One phase of a job whose samplers ran as phases, read as if it had been its own job: its step
        records (numbered from 0), the job's summary with the phase's closing record over it, its config's
        ``sampler``, and as ``wall_s`` the slowest rank's seconds in that phase (its steps and evaluation)."""
        if name not in self.phases:
            raise KeyError(f"{self.run_dir.name} has no phase {name!r}; its phases: {self.phases}")
        steps = {r: [x for x in recs if x.get("phase") == name] for r, recs in self.steps.items()}
        closing = {r: {**self.summaries.get(r, {}), **x} for r, recs in self.phase_summaries.items()
                   for x in recs if x["phase"] == name}
        wall = max((x["train_s"] + x["finish_s"] for x in closing.values()), default=float("nan"))
        cfg = self.config.replace(name=f"{self.config.name}:{name}", sampler=name.split("@")[0], phase_samplers=(),
                                  phase_seeds=())
        return JobResult(self.run_dir, cfg, self.returncode, wall, steps, closing, hosts=self.hosts,
                         host_memory=self.host_memory)


def chain_parts(recs: list[dict]) -> list[list[dict]]:
    """A rank's records cut where each job of its launch began: [a ``%%ranks`` cell's (empty without a cell), the
    job's (a cell's ``--then`` follow-on, or the launched job), then each further job's (``run_job``'s ``more``)]."""
    cell = any(x["event"] == FOLLOW_ON_EVENT and not x.get("more") for x in recs)
    parts, at = [[], []], 0 if cell else 1
    for x in recs:
        if x["event"] == FOLLOW_ON_EVENT:
            if x.get("more"):
                parts.append([])
            at = len(parts) - 1 if x.get("more") else 1
        parts[at].append(x)
    return parts


def split_follow_on(parts: list[list[dict]]) -> tuple[list[dict], list[dict]]:
    """A rank's step records from its ``chain_parts`` as (the job's, a ``%%ranks --then`` cell's before its follow-on
    began): the job's are the follow-on's when there is one, so both number their steps from 0 and are read apart."""
    cell, job = [[x for x in part if x["event"] == "step"] for part in parts[:2]]
    return job, cell


def more_results(run_dir: Path, parts: dict[int, list[list[dict]]], main: "JobResult") -> list["JobResult"]:
    """A launch's further jobs (``run_job``'s ``more``) read as if each had been its own job: its config and folder
    (``then-<i>``), its step records, its summary (with the rank's card fields), and as ``wall_s`` the slowest
    rank's seconds from its start to its summary. ``parts``: each rank's ``chain_parts``."""
    out = []
    for i, cfg in enumerate(more_configs(run_dir), start=1):
        mine = {r: (ranks + [[]] * (i + 2))[i + 1] for r, ranks in parts.items()}
        ends = {r: next((x for x in part if x["event"] == MORE_SUMMARY_EVENT), None) for r, part in mine.items()}
        summaries = {r: end for r, end in ends.items() if end is not None}
        wall = max((end["time"] - mine[r][0]["time"] for r, end in ends.items() if end is not None),
                   default=float("nan"))
        out.append(JobResult(more_dir(run_dir, i), cfg, main.returncode, wall,
                             {r: [x for x in part if x["event"] == "step"] for r, part in mine.items()}, summaries,
                             {r: [x for x in part if x["event"] == "phase_summary"] for r, part in mine.items()},
                             main.hosts, main.host_memory))
    return out


def load_result(run_dir: str | Path, returncode: int = 0, wall_s: float = float("nan")) -> JobResult:
    """Rebuild a JobResult from a run directory (also for runs made earlier or elsewhere)."""
    run_dir = Path(run_dir)
    cfg = JobConfig.load(run_dir / "config.json")
    steps, summaries, phases, hosts, cell_steps, parts = {}, {}, {}, {}, {}, {}
    for r in range(cfg.world_size):
        recs = read_records(metrics_path(run_dir, r))
        parts[r] = chain_parts(recs)
        steps[r], cell_steps[r] = split_follow_on(parts[r])
        phases[r] = [x for part in parts[r][:2] for x in part if x["event"] == "phase_summary"]
        for x in recs:
            if x["event"] == "summary":
                summaries[r] = x
            elif x["event"] == "start" and "host" in x:
                hosts[r] = x["host"]
    memory = run_dir / HOST_MEMORY_FILE
    result = JobResult(run_dir, cfg, returncode, wall_s, steps, summaries, phases, hosts,
                       json.loads(memory.read_text()) if memory.exists() else {},
                       cell_steps if any(cell_steps.values()) else {})
    result.more = more_results(run_dir, parts, result)
    log.info("%s: %s", run_dir.name, result.straggler.line())     # the job's one line on where its time went
    return result


def fail(launcher, job_id: str, bar, run_dir: Path, verdict, cfg: JobConfig):
    """End the job and raise its ``JobFailed`` (with the blamed rank's log, or msrun's; the node it ran on).

    A failed job gets a short grace: its records are already on disk, and a hung rank would not stop anyway."""
    launcher.stop(job_id, FAIL_GRACE_S)
    where = launcher.where(verdict.rank)
    message = verdict.message + (f" (rank {verdict.rank} ran on {where})" if where else "") \
        + (oom_hint(cfg) if verdict.kind == "oom" else "")
    bar.close(f"{verdict.kind}" + (f" on rank {verdict.rank}" if verdict.rank is not None else "")
              + (f" ({where})" if where else ""))
    tail = verdict.tail if verdict.tail is not None else log_tail(run_dir, verdict.rank)
    raise JobFailed(verdict.kind, message, verdict.rank, tail, str(run_dir))


def _wait_workers_exit(launcher, job_id: str, seconds: float) -> None:
    """Wait until every rank process has exited (or the launcher's processes have, or ``seconds`` passed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and launcher.workers_running(job_id):
        time.sleep(0.1)


def watch_job(cfg: JobConfig, run_dir: Path, launcher, bar, job_id: str, t0: float) -> JobWatch:
    """Poll until every rank has its summary (returns the watch) or the job fails, hangs or times out (raises).

    A queued job (Slurm) waits first, its queue state on the progress display; the watch and ``timeout_s`` start
    when its ranks do."""
    while launcher.waiting(bar):
        time.sleep(POLL_S)
    t0 += launcher.queued_s
    watch = JobWatch(cfg, run_dir, launcher.procs, bar)
    try:
        _watch_loop(cfg, run_dir, launcher, bar, job_id, t0, watch)
    finally:                                   # kept for a failed job too: its peak is what the machine gave it
        memory = run_dir / HOST_MEMORY_FILE
        old = json.loads(memory.read_text()) if memory.exists() else {}
        watch.host.save(memory, **{k: v for k, v in old.items() if k == "need_mb"})
    return watch


def _watch_loop(cfg: JobConfig, run_dir: Path, launcher, bar, job_id: str, t0: float, watch: JobWatch) -> None:
    """``watch_job``'s polling: returns once every rank has its summary, raises ``JobFailed`` otherwise."""
    while True:
        time.sleep(POLL_S)
        watch.poll()
        verdict = launcher.check(watch, bar) or watch.verdict() or watch.stall()
        if verdict:
            verdict = launcher.explain(verdict)
            fail(launcher, job_id, bar, run_dir, verdict, cfg)
        if len(watch.summaries) == cfg.world_size:
            # Every rank has written its summary (fsync'ed): the job's work is done, what is left is
            # MindSpore's teardown (a closing AllReduce, unregistering, the heartbeat thread's join; then the
            # scheduler's next 5 s check in ClusterContext::Finalize and msrun's 1 s poll): 2.5-8 s of an
            # 8-rank job on 2 cores that produces nothing. Give the ranks a moment, then end the job.
            _wait_workers_exit(launcher, job_id, FINISH_GRACE_S)
            return
        if launcher.ended():
            time.sleep(POLL_S)
            watch.poll()
            if len(watch.summaries) == cfg.world_size:
                return
            fail(launcher, job_id, bar, run_dir, watch.verdict(final=True) or Verdict(
                "crash", None, f"{launcher.exit_text()}; ranks without a summary: "
                f"{[r for r in range(cfg.world_size) if r not in watch.summaries]}"), cfg)
        if time.monotonic() - t0 > cfg.timeout_s:
            fail(launcher, job_id, bar, run_dir, Verdict("timeout", None, f"not finished after {cfg.timeout_s:.0f} s "
                                                         "(config timeout_s)"), cfg)


def end_orphans() -> None:
    """End what is left of jobs whose launcher died (their processes would hold cores and ports), and their
    ranks' CPU quota groups."""
    for left in (x for x in reap_orphans(end_orphan_job, cancel_orphan) if x["processes"]):
        log.warning("ended %d processes of a job whose launcher had died: %s", left["processes"], left["run_dir"])
        print(f"note: ended {left['processes']} processes left by a job whose launcher died ({left['run_dir']})")
    remove_job_groups()


def run_job(cfg: JobConfig, progress: str = "auto", run_root: str | os.PathLike = "runs",
            launches: list[dict] | None = None, worker: tuple[str, ...] = (),
            bin_dir: str | os.PathLike | None = None, files: dict[str, bytes] | None = None,
            more: tuple[JobConfig, ...] = ()) -> JobResult:
    """Run ``cfg`` as an msrun job and return its ``JobResult``; raise ``JobFailed`` otherwise.

    ``launches`` (advanced, used for multi-node on one host) lists one dict per msrun invocation with
    optional keys ``node_rank``, ``local_world_size``, ``master_addr``, ``prefix`` (a command prefix such
    as ``["ip", "netns", "exec", "node1"]``) and ``env`` (variables for that node's processes only, e.g. which
    cards it may see); by default a single local msrun starts every rank. ``worker`` (benchmarks) is another
    per-rank program, e.g. ``("-m", "benchmarks.model_train_worker", "--sink", "0")``, run under the same rank
    guard, watch and stop; it gets the config path last and writes the worker's metrics records.
    ``bin_dir``: the bin folder of another Python environment whose msrun and python run the ranks.
    ``files``: name -> bytes written into the run directory before the ranks start (a notebook cell's program,
    ``helpers.cells``). ``more``: further jobs the same ranks run after ``cfg``, in turn, each as a fresh job starts
    (``helpers.train.chain``), read back as ``JobResult.more``: one start of the ranks for all.
    """
    check_disk(cfg.validate(), run_root)                     # room for the run folder, cache and data, before any write
    cfg = plan_job(cfg)                                      # what runs: checks, data, convolution
    if more:     # the launch's timeout covers them all
        chained = plan_more(cfg, more)
        cfg = chain_cache(cfg, chained).replace(timeout_s=cfg.timeout_s + sum(job.timeout_s for job in more))
        files = {**(files or {}), **chained}
    launcher = make_launcher(cfg, launches, worker, bin_dir)   # what starts it: msrun here, or sbatch
    end_orphans()
    cfg, run_dir, config_path, job_id = _job_files(launcher.place(cfg), run_root)
    for name, data in (files or {}).items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_bytes(data)
    bar = make_progress(f"{cfg.name} ({cfg.world_size} ranks, {cfg.device_target})", range(cfg.world_size),
                        cfg.progress_steps, progress)
    need = _admit(cfg, job_id, run_dir, launcher, bar)        # host memory: fits, waits, or one clear error
    t0 = time.monotonic()
    try:
        with claim_compile_cache(launcher.env(cfg, job_id), run_dir) as env:
            launcher.start(cfg, run_dir, config_path, env)
            register(job_id, run_dir, **launcher.record(), host_need_mb=need)
            watch_job(cfg, run_dir, launcher, bar, job_id, t0)
    except KeyboardInterrupt:
        launcher.stop(job_id, STOP_GRACE_S)
        bar.close("interrupted")
        raise JobFailed("interrupted", "interrupted by the user; every process of the job was ended",
                        None, "", str(run_dir)) from None
    except BaseException:
        launcher.stop(job_id, STOP_GRACE_S)
        raise
    finally:
        unregister(job_id)
        remove_job_groups(job_id)                  # the ranks' CPU quota groups (empty once they ended)
    wall = time.monotonic() - t0
    launcher.finish(job_id, STOP_AFTER_FINISH_S)   # nothing of the job may outlive the call
    remove_job_groups(job_id)
    bar.close(f"finished in {wall:.1f} s")
    result = load_result(run_dir, 0, wall)
    log.info("job %s finished in %.1f s", run_dir, wall)
    return result


def _admit(cfg: JobConfig, job_id: str, run_dir: Path, launcher, bar) -> float | None:
    """Register the job once its host memory fits (``helpers.job.host_memory.admit``); returns its need (MB).
    Refused: the progress display says why, the fresh run folder goes, and the error is raised; nothing started."""
    try:
        need = admit(cfg, job_id, lambda **kw: register(job_id, run_dir, **launcher.record(), **kw), bar)
    except BaseException as exc:             # refused, or interrupted while waiting for memory
        bar.close("not started: not enough memory" if isinstance(exc, NotEnoughHostMemory) else "not started")
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    (run_dir / HOST_MEMORY_FILE).write_text(json.dumps({"need_mb": round(need)}))
    return round(need) if need else None


def _job_files(cfg: JobConfig, run_root) -> tuple[JobConfig, Path, Path, str]:
    """The run directory, the master port, ``config.json`` and the job id every process of the job carries."""
    run_dir = new_run_dir(cfg.chapter, cfg.name, run_root)
    if cfg.master_port == 0 and cfg.launcher == "local":      # under Slurm the first node picks its own
        cfg = cfg.replace(master_port=free_port())
    config_path = cfg.save(run_dir / "config.json")
    return cfg, run_dir, config_path, f"{run_dir.name}-{os.getpid()}-{cfg.master_port}"
