"""The msrun command of one node of a job, the environment its processes get, and a free master port."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

from helpers.core.config import JobConfig
from helpers.core.errors import ConfigError
from helpers.core.paths import LAUNCHER_PID_ENV, code_root
from helpers.job.compile_cache import compile_cache_dir
from helpers.job.processes import JOB_ID_ENV
from helpers.job.rank_guard import LAUNCHER_START_ENV, process_start


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


RETRY_INTERVAL_ENV = ("MS_RETRY_INTERVAL_LOWER", "MS_RETRY_INTERVAL_UPPER")   # MindSpore's heartbeat interval, s
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
    # A rank learns that every rank has registered (the end of the cluster build in init()) only from its next
    # heartbeat, sent every MS_RETRY_INTERVAL_LOWER..UPPER whole seconds (default 3..5, libmindspore_cluster.so).
    # At 1 s the last rank is out 1.3 s after the last registration instead of 3.8 s, and every rank through
    # init() 4.1 s after it instead of 6.7 s (8 ranks on 2 cores, medians of 3 alternated runs,
    # benchmarks/results/startup_env.json); the 3 s left are a fixed sleep(3) in mccl's address exchange
    # (libmindspore_cpu.so) that no setting shortens. A ci job's first step came only ~1 s sooner (the ranks
    # then contend for the cores instead of waiting). A user's own setting wins.
    for name in RETRY_INTERVAL_ENV:
        env.setdefault(name, "1")
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
