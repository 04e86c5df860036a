"""Start a real multi-process MindSpore job with ``msrun`` from a notebook cell, watch it, end it cleanly.

    result = run_job(job_config("ci", name="smoke"))

The kernel stays light: it writes ``<run_dir>/config.json``, starts ``msrun`` (in its own session; msrun runs
each rank under ``helpers.job.rank_guard``), tails the ranks' records for live progress (``helpers.job.watch``)
and returns a ``JobResult``. A failing, killed or hung rank, a timeout or an interrupt ends the job and
raises ``JobFailed`` naming the rank. Ending a job: SIGINT to msrun, a short wait, then SIGKILL to every
process carrying this job's id in its environment. Logs are always kept. Benchmarks run another per-rank
script (``worker=``) through the same start, watch and stop.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from helpers.core.config import JobConfig
from helpers.core.errors import ConfigError, JobFailed
from helpers.core.metrics import metrics_path, read_records
from helpers.core.paths import code_root, new_run_dir, resolve
from helpers.core.step_times import img_per_s
from helpers.job.progress import make_progress
from helpers.job.compile_cache import claim_compile_cache, compile_cache_dir
from helpers.job.input_checks import check_job_inputs
from helpers.job.processes import JOB_ID_ENV, end_orphan_job, job_workers, stop_job
from helpers.job.registry import register, reap_orphans, unregister
from helpers.job.watch import JobWatch, Verdict, log_tail
from helpers.job.rank_guard import LAUNCHER_PID_ENV, LAUNCHER_START_ENV, process_start

log = logging.getLogger(__name__)

POLL_S = 0.5
FAIL_GRACE_S = 2.0      # a failed job: how long msrun gets to stop its workers before the sweep
FINISH_GRACE_S = 0.5    # all summaries written: how long the ranks get to exit by themselves before they are ended
STOP_AFTER_FINISH_S = 0.3   # ranks gone: what msrun and the scheduler get after SIGINT before SIGKILL


# ---------------------------------------------------------------- command and environment
def python_bin_dir() -> Path:
    """The running interpreter's ``bin`` folder, where its environment's msrun lives."""
    return Path(sys.executable).parent


def find_msrun(bin_dir: str | os.PathLike | None = None) -> str:
    """msrun from ``bin_dir`` (another Python environment) or the running interpreter's environment, then PATH."""
    first = Path(bin_dir) if bin_dir else python_bin_dir()
    path = shutil.which("msrun", path=f"{first}{os.pathsep}{'' if bin_dir else os.environ.get('PATH', '')}")
    if not path:
        raise ConfigError(f"msrun not found in {first}{'' if bin_dir else ' or on PATH'}: install mindspore into "
                          f"that Python environment ({sys.executable if not bin_dir else first}); msrun ships with it")
    return path


PORT_LOCK_DIR = Path(tempfile.gettempdir()) / "ms-course-ports"
PORT_HOLD_S = 120.0     # a port handed out is not handed out again for this long (msrun binds it within seconds)


def free_port() -> int:
    """A free TCP port, reserved host-wide for ``PORT_HOLD_S`` so that launchers running at the same time
    (two notebooks, a room of workshop users on one server) never get the same one.

    The kernel's ``bind(port 0)`` alone is not enough: the port is released at once and msrun binds it
    seconds later, and the kernel hands released ports out again (600 calls in a row gave 14 repeats).
    Each port given out leaves a file ``<tmp>/ms-course-ports/<port>`` created with O_EXCL; a port whose
    file is younger than ``PORT_HOLD_S`` is skipped, whoever took it.
    """
    try:
        PORT_LOCK_DIR.mkdir(exist_ok=True)
        os.chmod(PORT_LOCK_DIR, 0o1777)          # shared by every user of the machine (sticky, like /tmp)
    except OSError:
        pass
    now = time.time()
    for old in (PORT_LOCK_DIR.iterdir() if PORT_LOCK_DIR.is_dir() else []):   # forget old reservations
        try:
            if now - old.stat().st_mtime > PORT_HOLD_S:
                old.unlink()
        except OSError:
            pass
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        lock = PORT_LOCK_DIR / str(port)
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return port
        except FileExistsError:
            continue                                   # reserved by a launcher moments ago: take another
        except OSError:
            return port                                # no shared folder to reserve in: the kernel's choice
    raise RuntimeError(f"no free TCP port found that is not reserved in {PORT_LOCK_DIR}")


def bind_core_map(local_workers: int, cores: int | None = None) -> dict:
    """msrun's ``--bind_core`` dict pinning local rank r to core ``r % cores``: ``{"device0": ["0"], ...}``.

    ``--bind_core=True`` binds nothing on a machine with fewer cores than workers (MindSpore's automatic
    plan needs one core per worker at least), which is every laptop running 8 CPU ranks."""
    cores = cores or os.cpu_count() or 1
    return {f"device{r}": [str(r % cores)] for r in range(local_workers)}


def binds_cores(cfg: JobConfig, cores: int | None = None) -> bool:
    """Pin ranks to cores only on CPU and only when the ranks outnumber the cores (a laptop, CI): there it
    was measured 1.4x faster (``benchmarks/results/knobs.json``). With enough cores the OS places the ranks
    better than a fixed map would, and on a shared server every user's rank r would land on core r."""
    cores = cores or os.cpu_count() or 1
    return cfg.bind_cores and cfg.device_target == "CPU" and cfg.local_workers > cores


def msrun_command(cfg: JobConfig, config_path: Path, log_dir: Path, msrun: str = "msrun",
                  worker: tuple[str, ...] = ()) -> list[str]:
    """The msrun invocation for this node of the job (multi-node fields pass straight through); ``worker``
    names another per-rank program for the rank guard (default ``-m helpers.train.worker``)."""
    bind = [f"--bind_core={json.dumps(bind_core_map(cfg.local_workers))}"] if binds_cores(cfg) else []
    return [msrun, f"--worker_num={cfg.world_size}", f"--local_worker_num={cfg.local_workers}",
            f"--master_addr={cfg.master_addr}", f"--master_port={cfg.master_port}",
            f"--node_rank={cfg.node_rank}", f"--log_dir={log_dir}", "--join=True", *bind,
            "python", "-u", "-m", "helpers.job.rank_guard", str(config_path), *worker]


def job_env(cfg: JobConfig, job_id: str, base: dict | None = None, bin_dir: str | os.PathLike | None = None) -> dict:
    """msrun starts workers with plain ``python``: put this interpreter's (or ``bin_dir``'s) bin folder first on PATH."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{bin_dir or python_bin_dir()}{os.pathsep}{env.get('PATH', '')}"
    if bin_dir:
        env.pop("VIRTUAL_ENV", None)                         # the other environment's python decides for itself
    env["GLOG_v"] = str(cfg.glog_v)
    env["PYTHONUNBUFFERED"] = "1"
    env[JOB_ID_ENV] = job_id
    env[LAUNCHER_PID_ENV] = str(os.getpid())                 # the rank guards end the job if this process dies
    env[LAUNCHER_START_ENV] = repr(process_start(os.getpid()))
    code = str(code_root())                                  # workers import the helpers this launcher uses
    env["PYTHONPATH"] = os.pathsep.join([code] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    # MindSpore's cluster build retries (a worker asking the scheduler for its peers) and heartbeats every
    # 3-5 s by default; at 1 s every rank is through init() ~4 s sooner (bare msrun, 8 ranks on 2 cores:
    # 16-19 s -> 12-13 s), though a ci job's first step came only ~1 s sooner (the ranks then contend for the
    # cores instead of waiting). A user's own setting wins.
    env.setdefault("MS_RETRY_INTERVAL_LOWER", "1")
    env.setdefault("MS_RETRY_INTERVAL_UPPER", "1")
    if cfg.device_target == "CPU":
        env["OMP_NUM_THREADS"] = str(cfg.threads_per_rank)
        # A CPU collective waits 30 s for a peer by default (collective_ops_impl.h: kCollectiveCommTimeout), less
        # than one rank can take longer than another to compile its first step when two jobs share 2 cores (a
        # CI run's chapter 00 failed so: "Ring ReduceScatter wait receiving [3,1] failed"). Hangs are the
        # launcher's to name (helpers.job.stall), so the wait gets its compile allowance. A user's setting wins.
        env.setdefault("MS_CPU_COMM_OP_TIMEOUT", str(int(cfg.compile_stall_s)))
    if cfg.compile_cache:
        # Graph compilation is most of a small job's first step; MindSpore checks the cache against the
        # network's source, so a changed model compiles afresh.
        env["MS_COMPILER_CACHE_ENABLE"] = "1"
        env["MS_COMPILER_CACHE_PATH"] = str(compile_cache_dir(cfg))
    env.update({k: str(v) for k, v in cfg.env.items()})
    return env


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

    @property
    def log_dir(self) -> Path:
        return self.run_dir / "logs"

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
    def weights_identical(self) -> bool:
        sums = set(self.summary("checksum"))
        return len(sums) == 1 and None not in sums

    @property
    def phases(self) -> list[str]:
        return list(self.config.phase_samplers)

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
        cfg = self.config.replace(name=f"{self.config.name}:{name}", sampler=name, phase_samplers=())
        return JobResult(self.run_dir, cfg, self.returncode, wall, steps, closing)


def load_result(run_dir: str | Path, returncode: int = 0, wall_s: float = float("nan")) -> JobResult:
    """Rebuild a JobResult from a run directory (also for runs made earlier or elsewhere)."""
    run_dir = Path(run_dir)
    cfg = JobConfig.load(run_dir / "config.json")
    steps, summaries, phases = {}, {}, {}
    for r in range(cfg.world_size):
        recs = read_records(metrics_path(run_dir, r))
        steps[r] = [x for x in recs if x["event"] == "step"]
        phases[r] = [x for x in recs if x["event"] == "phase_summary"]
        for x in recs:
            if x["event"] == "summary":
                summaries[r] = x
    return JobResult(run_dir, cfg, returncode, wall_s, steps, summaries, phases)


def _wait_workers_exit(procs, job_id: str, seconds: float) -> None:
    """Wait until every rank process has exited (or msrun has, or ``seconds`` passed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(p.poll() is None for p in procs) and job_workers(job_id):
        time.sleep(0.1)


def oom_hint(cfg: JobConfig) -> str:
    """What to say when a rank ran out of memory: the batch it tried, the planner's estimate, the fix."""
    text = (f"\n  the rank ran out of memory at per-rank batch {cfg.batch_per_rank} "
            f"(micro-batch {cfg.micro_batch_size} x {cfg.accumulation_steps}), cap {cfg.mem_cap_mb} MB")
    try:
        from helpers.core.memory_planner import estimate

        est = estimate(cfg.arch, cfg.micro_batch_size, cfg.image_size, num_classes=10 if cfg.stem == "small" else 1000,
                       width=cfg.width, stem=cfg.stem, conv_impl=cfg.conv_impl)
        text += f"; the planner estimates {est.total_bytes / 2**20:.0f} MB for this micro-batch"
    except Exception:  # noqa: BLE001 - the hint must never hide the real error
        pass
    return text + ("\n  hint: keep the global batch and split it, e.g. micro_batch="
                   f"{max(1, cfg.micro_batch_size // 4)}, accumulation_steps={cfg.accumulation_steps * 4} "
                   "(helpers.core.memory_planner.plan_accumulation picks them for a memory budget)")


def start_msrun(cfg: JobConfig, spec: dict, i: int, n: int, run_dir: Path, config_path: Path, msrun: str,
                env: dict, worker: tuple[str, ...] = ()) -> subprocess.Popen:
    """Start one msrun (node ``spec``) in its own session, its output in ``<run_dir>/msrun[i].log``."""
    node_cfg = cfg.replace(**{k: v for k, v in spec.items() if k not in ("prefix", "env")})
    log_dir = run_dir / "logs" / (f"node{node_cfg.node_rank}" if n > 1 else "")
    cmd = list(spec.get("prefix", [])) + msrun_command(node_cfg, config_path, log_dir, msrun, worker)
    with open(run_dir / f"msrun{i if n > 1 else ''}.log", "wb") as out:
        return subprocess.Popen(cmd, cwd=run_dir, env={**env, **spec.get("env", {})}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def fail(procs, job_id: str, bar, run_dir: Path, verdict, cfg: JobConfig):
    """End the job and raise its ``JobFailed`` (with the blamed rank's log, or msrun's).

    A failed job gets a short grace: its records are already on disk, and a hung rank would not stop anyway."""
    stop_job(procs, job_id, grace_s=FAIL_GRACE_S)
    message = verdict.message + (oom_hint(cfg) if verdict.kind == "oom" else "")
    bar.close(f"{verdict.kind}" + (f" on rank {verdict.rank}" if verdict.rank is not None else ""))
    raise JobFailed(verdict.kind, message, verdict.rank, log_tail(run_dir, verdict.rank), str(run_dir))


def watch_job(cfg: JobConfig, run_dir: Path, procs, bar, job_id: str, t0: float) -> JobWatch:
    """Poll until every rank has its summary (returns the watch) or the job fails, hangs or times out (raises)."""
    watch = JobWatch(cfg, run_dir, procs, bar)
    while True:
        time.sleep(POLL_S)
        watch.poll()
        verdict = watch.verdict() or watch.stall()
        if verdict:
            fail(procs, job_id, bar, run_dir, verdict, cfg)
        if len(watch.summaries) == cfg.world_size:
            # Every rank has written its summary (fsync'ed): the job's work is done, what is left is
            # MindSpore's teardown (a closing AllReduce, unregistering, the heartbeat thread's join; then the
            # scheduler's next 5 s check in ClusterContext::Finalize and msrun's 1 s poll): 2.5-8 s of an
            # 8-rank job on 2 cores that produces nothing. Give the ranks a moment, then end the job.
            _wait_workers_exit(procs, job_id, FINISH_GRACE_S)
            return watch
        if all(p.poll() is not None for p in procs):
            time.sleep(POLL_S)
            watch.poll()
            if len(watch.summaries) == cfg.world_size:
                return watch
            fail(procs, job_id, bar, run_dir, watch.verdict(final=True) or Verdict(
                "crash", None, f"msrun exited; ranks without a summary: "
                f"{[r for r in range(cfg.world_size) if r not in watch.summaries]}"), cfg)
        if time.monotonic() - t0 > cfg.timeout_s:
            fail(procs, job_id, bar, run_dir, Verdict("timeout", None, f"not finished after {cfg.timeout_s:.0f} s "
                                                      "(config timeout_s)"), cfg)


def prepare_job(cfg: JobConfig) -> JobConfig:
    """What a job needs before it starts: a valid config, its inputs checked, its data made, ``conv_impl`` chosen."""
    cfg = cfg.validate()
    check_job_inputs(cfg)                 # strategy_file / init_checkpoint exist and fit this model
    if cfg.task == "train":
        from helpers.train.data import prepare_data

        prepare_data(cfg)
    if cfg.conv_impl == "auto" and cfg.task == "train":
        from helpers.train.conv_autoselect import resolve_conv_impl

        cfg = cfg.replace(conv_impl=resolve_conv_impl(cfg)[0])
    return cfg


def end_orphans() -> None:
    """End what is left of jobs whose launcher died (their processes would hold cores and ports)."""
    for left in (x for x in reap_orphans(end_orphan_job) if x["processes"]):
        log.warning("ended %d processes of a job whose launcher had died: %s", left["processes"], left["run_dir"])
        print(f"note: ended {left['processes']} processes left by a job whose launcher died ({left['run_dir']})")


def run_job(cfg: JobConfig, progress: str = "auto", run_root: str | os.PathLike = "runs",
            launches: list[dict] | None = None, worker: tuple[str, ...] = (),
            bin_dir: str | os.PathLike | None = None) -> JobResult:
    """Run ``cfg`` as an msrun job and return its ``JobResult``; raise ``JobFailed`` otherwise.

    ``launches`` (advanced, used for multi-node on one host) lists one dict per msrun invocation with
    optional keys ``node_rank``, ``local_world_size``, ``master_addr``, ``prefix`` (a command prefix such
    as ``["ip", "netns", "exec", "node1"]``) and ``env`` (variables for that node's processes only, e.g. which
    cards it may see); by default a single local msrun starts every rank. ``worker`` (benchmarks) is another
    per-rank program, e.g. ``("-m", "benchmarks.model_train_worker", "--sink", "0")``, run under the same rank
    guard, watch and stop; it gets the config path last and writes the worker's metrics records.
    ``bin_dir``: the bin folder of another Python environment whose msrun and python run the ranks.
    """
    cfg = prepare_job(cfg)
    msrun = find_msrun(bin_dir)
    end_orphans()
    run_dir = new_run_dir(cfg.chapter, cfg.name, run_root)
    if cfg.master_port == 0:
        cfg = cfg.replace(master_port=free_port())
    config_path = cfg.save(run_dir / "config.json")
    job_id = f"{run_dir.name}-{os.getpid()}-{cfg.master_port}"
    env = job_env(cfg, job_id, bin_dir=bin_dir)
    launches = launches or [{}]
    procs = []
    t0 = time.monotonic()
    bar = make_progress(f"{cfg.name} ({cfg.world_size} ranks, {cfg.device_target})", range(cfg.world_size),
                        cfg.steps * max(1, len(cfg.phase_samplers)), progress)
    register(job_id, run_dir)
    try:
        with claim_compile_cache(env, run_dir) as job_env_now:
            for i, spec in enumerate(launches):
                procs.append(start_msrun(cfg, spec, i, len(launches), run_dir, config_path, msrun, job_env_now,
                                         worker))
            watch_job(cfg, run_dir, procs, bar, job_id, t0)
    except KeyboardInterrupt:
        stop_job(procs, job_id)
        bar.close("interrupted")
        raise JobFailed("interrupted", "interrupted by the user; every process of the job was ended",
                        None, "", str(run_dir)) from None
    except BaseException:
        stop_job(procs, job_id)
        raise
    finally:
        unregister(job_id)
    wall = time.monotonic() - t0
    stop_job(procs, job_id, grace_s=STOP_AFTER_FINISH_S)   # nothing of the job may outlive the call
    bar.close(f"finished in {wall:.1f} s")
    result = load_result(run_dir, 0, wall)
    log.info("job %s finished in %.1f s", run_dir, wall)
    return result
