"""What ``msrun`` runs on every rank: ``python -m helpers.train.worker <run_dir>/config.json``.

init() -> data, model, train step from the config -> train in GRAPH_MODE with DATA_PARALLEL and
gradient averaging -> one metrics line per step, then a summary line with a checksum of the parameters.
msrun also starts a scheduler process with this same command (``MS_ROLE=MS_SCHED``); it never returns
from ``init()``, so nothing before ``init()`` may have side effects worth doing twice.
"""

from __future__ import annotations

import hashlib
import os
import resource
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from helpers.core.card_settings import card_record
from helpers.core.config import JobConfig
from helpers.core.errors import failure_kind, readable_error
from helpers.core.metrics import MetricsWriter
from helpers.train.card_runtime import ascend_soc, prepare_card
from helpers.train.profiler_session import ANALYSIS_EVENT, NoProfiler, profiling_session
from helpers.train.chain import failure_where, run_more
from helpers.train.shared_compile import CACHE_PATH_ENV   # one name for MindSpore's cache folder variable

@contextmanager
def recording_failures(out: MetricsWriter, capped: bool = False):
    """Around a rank's work: an exception becomes the rank's ``failure`` record (its kind ``oom``/``crash``,
    the error, the traceback's tail), which the launcher reads to raise one readable ``JobFailed`` instead of
    msrun's exit code; it is then re-raised so msrun sees the failure. The metrics file is closed either way."""
    try:
        yield out
    except BaseException as exc:
        text = "".join(traceback.format_exception(exc))
        out.write("failure", kind=failure_kind(text, capped),
                  error=readable_error(f"{type(exc).__name__}: {exc}") + failure_where(), traceback=text[-4000:])
        raise
    finally:
        out.close()


def param_checksum(net) -> tuple[str, float]:
    """sha256 over the trainable parameters (name order) and their plain sum.

    Only trainable parameters: BatchNorm running statistics are local to each rank under DATA_PARALLEL.
    """
    h = hashlib.sha256()
    total = 0.0
    for p in sorted(net.trainable_params(), key=lambda p: p.name):
        a = np.ascontiguousarray(p.asnumpy(), dtype=np.float32)   # fp32: no copy (asnumpy shares the storage)
        h.update(a)   # a.tobytes()'s bytes without that copy (chapter 03: a capped rank's 50 MB classifier slice)
        total += float(a.sum(dtype=np.float64))
    return h.hexdigest(), total


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux ``ru_maxrss``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def setup_runtime(cfg: JobConfig) -> dict:
    """GRAPH_MODE on the config's device, then its per-device settings, all before ``init()``; returns what
    ``helpers.train.card_runtime.prepare_card`` set on a card (precision, determinism)."""
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device(cfg.device_target)
    if cfg.device_target == "CPU":
        from mindspore.device_context.cpu.op_tuning import threads_num

        threads_num(cfg.threads_per_rank)
    elif cfg.mem_cap_mb:
        ms.runtime.set_memory(max_size=f"{cfg.mem_cap_mb / 1024:.3f}GB")
    return prepare_card(cfg, ms)


def apply_cpu_memory_cap(cfg: JobConfig) -> None:
    """On CPU, cap this rank's address space (RLIMIT_AS): a batch that does not fit then fails with
    MindSpore's 'Memory not enough' (reported as kind ``oom``) instead of swapping or hanging the machine.
    Applied after ``init()``, so communication set-up is not affected; the cap counts virtual memory,
    which peaks at 2-3x the resident size, so size it from a measured run (``vms_peak_mb``)."""
    if cfg.caps_address_space:
        cap = int(cfg.mem_cap_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


STATUS_PATH, STATUS_KB = "/proc/self/status", {"VmRSS": "rss_mb", "VmSize": "vms_mb", "VmPeak": "vms_hwm_mb"}  # in kB


def memory_now_mb() -> dict:
    """This process's current RSS and VMS, its peak RSS (``ru_maxrss``) and its peak VMS (``VmPeak``: transients in a
    step included), in MB. One read of /proc/self/status (the kernel's ``task_mem``: the pages psutil reads from statm)
    instead of a ``psutil.Process`` per step (issue 31); psutil where /proc has none, the peak VMS then the VMS now."""
    try:
        with open(STATUS_PATH) as f:
            mem = {STATUS_KB[k]: int(v.split()[0]) / 1024.0 for k, _, v in map(lambda ln: ln.partition(":"), f)
                   if k in STATUS_KB}
    except OSError:
        mem = {}
    if len(mem) < len(STATUS_KB):
        import psutil

        info = psutil.Process().memory_info()
        mem = {"rss_mb": info.rss / 2**20, "vms_mb": info.vms / 2**20, "vms_hwm_mb": info.vms / 2**20}
    return {**mem, "rss_peak_mb": peak_rss_mb(), "vms_hwm_mb": max(mem["vms_hwm_mb"], mem["vms_mb"])}


def device_memory_mb(cfg: JobConfig, reset_peak: bool = False) -> dict:
    """GPU/Ascend: the device allocator's memory in use (``device_mb``) and its peak (``device_peak_mb``), in MB,
    from ``mindspore.runtime`` (both read 0 on CPU, so nothing is recorded there); ``reset_peak`` then restarts
    the peak from what is in use now (``reset_peak_memory_stats``)."""
    if cfg.device_target == "CPU":
        return {}
    from mindspore import runtime

    now = {"device_mb": runtime.memory_allocated() / 2**20, "device_peak_mb": runtime.max_memory_allocated() / 2**20}
    if reset_peak:
        runtime.reset_peak_memory_stats()
    return now


def _build_train_step(cfg: JobConfig, num_classes: int):
    import mindspore as ms

    from helpers.train.models import build_model
    from helpers.train.recipe import build_loss, build_optimizer, build_train_step

    ms.set_seed(cfg.seed)  # every rank starts from the same weights: DATA_PARALLEL does not broadcast them
    net = build_model(cfg.arch, num_classes, cfg.width, cfg.stem, cfg.conv_impl)
    if cfg.cell_comm_fusion:
        # The source blog's per-layer fusion ids (stem, layer1..4, fc -> 1..6). Parameter.comm_fusion is read
        # where the framework inserts the communication; chapter 04 measures what it does under DATA_PARALLEL.
        for i, cell in enumerate(net.name_cells().values(), start=1):
            cell.set_comm_fusion(i)
    step = build_train_step(cfg, net, build_loss(cfg), build_optimizer(cfg, net.trainable_params()))
    return net, step


BN_DIAGNOSTIC_ENV = "COURSE_BN_DIAGNOSTIC"   # benchmarks.ch01_seeds sets it, with compile_cache off (one graph more)


def train(cfg: JobConfig, run_dir: Path, rank: int, world: int, out: MetricsWriter) -> dict:
    """Train for ``cfg.steps`` steps on this rank, writing one metrics line per step; returns the summary."""
    from mindspore import context
    from mindspore.context import ParallelMode

    from helpers.train.data import build_dataset
    from helpers.train.evaluation import calibration_batches, judge
    from helpers.train.image_folder import scan_split
    from helpers.train.shared_compile import take_leader_graph
    from helpers.train.shared_graphs import share_every_graph

    parallel = dict(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True, device_num=world)
    if not cfg.grad_reduce:   # no DistributedGradReducer, so no gradient AllReduce: each rank trains alone
        parallel = dict(parallel_mode=ParallelMode.STAND_ALONE)
    elif cfg.comm_fusion:
        parallel["comm_fusion"] = cfg.comm_fusion
    context.set_auto_parallel_context(**parallel)
    import mindspore.dataset as ds

    ds.config.set_seed(cfg.seed)   # same shuffle on every rank, so the shards stay disjoint
    num_classes = len(scan_split(cfg.data_dir, "train").classes)
    if cfg.strategy_file:   # chapter 03: hybrid parallel per the strategy file (classifier split, see helpers.train.hybrid_step)
        from helpers.train.hybrid_classifier import num_classes_of
        from helpers.train.hybrid_step import build_hybrid_step

        num_classes = num_classes_of(cfg)
        net, step = build_hybrid_step(cfg, num_classes, rank, world)
    else:
        net, step = _build_train_step(cfg, num_classes)
    if cfg.accumulation_steps > 1:
        from helpers.train.grad_accumulation import accumulating_step

        step = accumulating_step(step, cfg.accumulation_steps, cfg.accumulation_code)
    # every rank but 0 loads rank 0's compiled graphs (train step, evaluation, split steps) instead of compiling them
    # at the same time: one "graph_share" record per graph on ranks 1.., one on rank 0 (or where nothing is shared)
    shared = share_every_graph(cfg, rank, world, run_dir, lambda **kw: out.write("graph_share", **kw))
    if rank == 0 or not shared:
        out.write("graph_share", result=take_leader_graph(cfg, rank, world))
    if cfg.phase_samplers:   # chapter 01: one phase per sampler, one launch
        return _train_phases(cfg, rank, world, out, net, step, num_classes)
    data = build_dataset(cfg, "train", rank, world, batch_size=cfg.micro_batch_size).repeat()
    it = data.create_tuple_iterator(num_epochs=-1)
    calibration = calibration_batches(cfg, rank, world) if cfg.evaluate else []
    # memory before the first step (chapter 02 subtracts it); on GPU/Ascend the device peak restarts here
    out.write("ready", **memory_now_mb(), **device_memory_mb(cfg, reset_peak=True))
    t_start = time.perf_counter()
    step_times = profiled_loop(cfg, run_dir, rank, step, it, out)
    train_s = time.perf_counter() - t_start
    out.write("trained", train_s=train_s)
    closing = judge(cfg, net, rank, world, out, calibration, it) if cfg.evaluate else {"accuracy": None}
    checksum, psum = param_checksum(net)
    summary = dict(steps=len(step_times), train_s=train_s, **closing,
                   checksum=checksum, param_sum=psum, peak_rss_mb=peak_rss_mb(),
                   conv_impl=cfg.conv_impl, device_target=cfg.device_target, num_classes=num_classes)
    if cfg.strategy_file:   # per-rank checkpoints under <run_dir>/ckpt/rank_<r>/ (merged by helpers.topics.strategy)
        from helpers.train.hybrid_classifier import optimizer_state_norms, save_rank_checkpoint

        summary.update(save_rank_checkpoint(net, run_dir, rank), **optimizer_state_norms(step, net))
    return summary


def profiled_loop(cfg: JobConfig, run_dir: Path, rank: int, step, it, out: MetricsWriter) -> list[float]:
    """The training loop, inside the profiler when ``cfg.profile``. The profile's analysis runs within the last
    step's ``prof.step()``; the rank records ``profile_analysis`` as it starts, so the launcher's watchdog gives it
    the compile allowance (``helpers.job.stall``) instead of timing it as a stalled step."""
    with profiling_session(cfg, run_dir, before_analysis=lambda: out.write(ANALYSIS_EVENT)) as prof:
        return _loop(cfg, rank, step, it, out, prof)


def _train_phases(cfg: JobConfig, rank: int, world: int, out: MetricsWriter, net, step, num_classes: int) -> dict:
    """``cfg.phase_samplers`` trained in turn on one train step (``helpers.train.phases``); the job's summary."""
    from helpers.train.batchnorm import sync_batchnorm_error
    from helpers.train.evaluation import calibration_batches, evaluate, judge
    from helpers.train.phases import train_phases

    calibration = calibration_batches(cfg, rank, world) if cfg.evaluate else []

    def finish(upcoming):    # BN_DIAGNOSTIC_ENV set: also the BatchNorm diagnostic, after the checksum
        closing = dict(**(judge(cfg, net, rank, world, out, calibration, upcoming) if cfg.evaluate else
                          {"accuracy": None}), **dict(zip(("checksum", "param_sum"), param_checksum(net))))
        return closing | ({"accuracy_batch_stats": evaluate(cfg, net, rank, world, batch_stats=True, out=out)}
                          if cfg.evaluate and os.environ.get(BN_DIAGNOSTIC_ENV) else {})

    def run_steps(stp, it, steps, phase, job_step0):
        _loop(cfg, rank, stp, it, out, NoProfiler(), steps, phase, job_step0)

    def fresh_params(seed: int) -> dict:     # the weights ``seed`` initialises, as _build_train_step does
        import mindspore as ms

        from helpers.train.models import build_model

        ms.set_seed(seed)
        fresh = build_model(cfg.arch, num_classes, cfg.width, cfg.stem, cfg.conv_impl)
        return {p.name: p.asnumpy() for p in fresh.get_parameters()}

    return dict(train_phases(cfg, rank, world, out, step, run_steps, finish, memory_now_mb, fresh_params),
                sync_batchnorm_error=sync_batchnorm_error() if world > 1 else None, steps=cfg.steps,
                peak_rss_mb=peak_rss_mb(), conv_impl=cfg.conv_impl, device_target=cfg.device_target,
                num_classes=num_classes)


def _maybe_fail(cfg: JobConfig, rank: int, i: int) -> None:
    if cfg.fail_rank == rank and i == cfg.fail_step and cfg.fail_mode in ("raise", "hang"):
        if cfg.fail_mode == "hang":   # a Python loop that never returns: the process stays alive, its peers wait
            while True:
                time.sleep(1.0)
        raise RuntimeError(f"injected failure on rank {rank} at step {i} (config fail_rank)")


def class_counts(labels) -> list[list[int]]:
    """``[[class, images], ...]`` of one batch, classes present only: small at 1,000 classes too."""
    ids, counts = np.unique(np.asarray(labels), return_counts=True)
    return [[int(i), int(c)] for i, c in zip(ids, counts)]


_SPLIT_STEPS: dict = {}   # id(train step) -> its SplitStep, built once (phases call _loop once per chunk)
# MindSpore names a cached graph by its compile order: "compile_cache_" + n, in "graph_cache" (tests/contract pins them)
CACHED_GRAPH_NAMES = {"lib/libmindspore_backend_common.so": "compile_cache_", "lib/libmindspore_frontend.so": "graph_cache"}


def split_cache_folder(cfg: JobConfig, env) -> None:
    """A job whose steps are split compiles three more graphs in step 0, and MindSpore numbers cached graphs by
    compile order (``<cache>/rank_<r>/graph_cache/MS_WORKERcompile_cache_<n>.mindir``): such a job caches in a
    sub-folder of its own, else a later job of the same config would load a split graph as its evaluation graph
    (seen: "Parameter[1] has no default param" in chapter 01 after a split job of the ci config)."""
    from helpers.train.time_split import split_every

    if env.get(CACHE_PATH_ENV) and cfg.accumulation_steps == 1 and split_every(cfg.steps, env):
        env[CACHE_PATH_ENV] = os.path.join(env[CACHE_PATH_ENV], "time_split")


def _split_of(cfg: JobConfig, step):
    """(``SplitStep`` or None, its period, the first profiled step): the sampled steps of
    ``helpers.train.time_split``; profiled steps stay fused, so the profile reads the job's own graph."""
    from helpers.train.time_split import split_step_for

    part, every = split_step_for(step, cfg.steps, _SPLIT_STEPS) if cfg.accumulation_steps == 1 else (None, 0)
    return part, every, cfg.profile_skip_steps if cfg.profile else cfg.steps


def _one_step(step, batch, i: int, split) -> tuple[float, dict]:
    """One train step: fused, or on a sampled step as three timed graphs (their times in the dict); the fused
    step before the first sampled one also compiles the split graphs, so no sampled step carries a compilation."""
    from helpers.train.recipe import step_loss
    from helpers.train.time_split import is_split_step

    part, every, profiled_from = split
    if part is not None and part.compiled and is_split_step(i, every) and i < profiled_from:
        out, times = part(*batch)
        loss, extra = step_loss(out)
        return loss, {**extra, **times}
    out = step_loss(step(*batch))
    if part is not None and not part.compiled:
        part.compile(*batch)
    return out


def _loop(cfg, rank, step, it, out, prof, steps=None, phase=None, job_step0=0) -> list[float]:
    """The training steps (``steps``: a range, default all): one metrics line per step, tagged with ``phase``
    and numbered from ``job_step0`` across the job when phases share it; returns each step's wall time."""
    from helpers.train.recipe import lr_per_step

    steps = range(cfg.steps) if steps is None else steps
    lrs = lr_per_step(cfg) if cfg.lr_schedule != "constant" or cfg.warmup_fraction else None
    step_times = []
    vms_peak = 0.0
    split = _split_of(cfg, step)
    for i in steps:
        t0 = time.perf_counter()
        if cfg.accumulation_steps == 1:
            batches = [next(it)]
            t1 = time.perf_counter()
            _maybe_fail(cfg, rank, i)
            loss, scale_info = _one_step(step, batches[0], i, split)
        else:
            # data time = fetching all K micro-batches (the pipeline prefetches, so this is the wait)
            batches = [next(it) for _ in range(cfg.accumulation_steps)]
            t1 = time.perf_counter()
            _maybe_fail(cfg, rank, i)
            loss, scale_info = step(batches), {}
        t2 = time.perf_counter()
        lab = np.concatenate([b[1].asnumpy() for b in batches])
        mem = memory_now_mb()
        vms_peak = max(vms_peak, mem["vms_mb"])
        rec = dict(step=i, loss=loss, step_s=t2 - t0, data_s=t1 - t0, compute_s=t2 - t1,
                   samples=int(len(lab)), rss_peak_mb=mem["rss_peak_mb"], rss_mb=mem["rss_mb"],
                   vms_peak_mb=vms_peak, vms_hwm_mb=mem["vms_hwm_mb"], lr=lrs[i] if lrs else None, **scale_info)
        rec.update(device_memory_mb(cfg))   # GPU/Ascend: the device allocator's own figures
        rec["class_counts"] = class_counts(lab)
        if phase is not None:
            rec.update(phase=phase, job_step=job_step0 + i - steps.start)
        out.write("step", **rec)
        step_times.append(t2 - t0)
        prof.step()
    return step_times


def leave_together(world: int) -> None:
    """CPU: wait until every rank is done (a one-number AllReduce) before tearing down. A rank that exits while
    its peers still work can die in MindSpore's communication thread (SIGSEGV in ``RECV_EVENT_LOOP``) after
    writing its summary, and msrun then kills the peers: seen with uneven checkpoint saves (chapter 03) and with
    a one-step job without gradient reduction (chapter 04), where ranks finish seconds apart."""
    import mindspore as ms
    from mindspore import ops
    from mindspore.communication import GlobalComm

    if world > 1 and GlobalComm.INITED and ms.get_context("device_target") == "CPU":
        ops.AllReduce()(ms.Tensor(np.ones(1, np.float32))).asnumpy()


def run_task(cfg: JobConfig, run_dir: Path, rank: int, world: int, out: MetricsWriter) -> dict:
    """The config's task on this rank, after ``init()`` (here, or a ``%%ranks --then`` cell's): its summary."""
    apply_cpu_memory_cap(cfg)
    if cfg.task == "grad_check":   # chapter 02: accumulated vs full-batch gradients, on every rank
        from helpers.train.accumulation_check import run_task as grad_check

        return grad_check(cfg, rank, world)
    return train(cfg, run_dir, rank, world, out) if cfg.task == "train" else {}


def main(argv=None) -> int:
    """The per-rank entry point: init(), run the config's task, write its summary line."""
    argv = sys.argv[1:] if argv is None else argv
    cfg_path = Path(argv[0])
    cfg = JobConfig.load(cfg_path)
    run_dir = cfg_path.parent
    split_cache_folder(cfg, os.environ)     # before MindSpore is imported
    applied = setup_runtime(cfg)
    from mindspore.communication import get_group_size, get_rank, init

    init()                          # the scheduler process never returns from here
    rank, world = get_rank(), get_group_size()
    out = MetricsWriter(run_dir, rank)
    card = card_record(cfg.device_target, applied, ascend_soc() if cfg.device_target == "Ascend" else "")
    out.write("start", pid=os.getpid(), world=world, host=os.uname().nodename, **card)
    from helpers.train.heartbeat import Heartbeat

    with recording_failures(out, cfg.caps_address_space), Heartbeat(run_dir, rank):
        summary = run_task(cfg, run_dir, rank, world, out)
        run_more(run_task, cfg, run_dir, rank, world, out, card)   # the launch's further jobs (run_job's ``more``)
        out.write("summary", **{**card, **summary})   # chip, precision mode, deterministic: in the JobResult too
        leave_together(world)
    return 0


if __name__ == "__main__":
    sys.exit(main())
