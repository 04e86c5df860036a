"""Gradient fusion settings: what each ``comm_fusion`` mode does to the AllReduce buckets, ``index``-mode split
points, the settings chapter 04 sweeps and the gradient sizes they split, and a compile cache of its own for
graph-changing switches."""

from __future__ import annotations

import functools
import hashlib
import json

import numpy as np

from helpers.core.config import FUSE_ALL, JobConfig
from helpers.job.compile_cache import compile_cache_dir
from helpers.job.launch import JobResult
from helpers.train.models import build_model

# ``comm_fusion={"allreduce": {"mode": "auto"}}`` is a size threshold, not "everything in one bucket": the wheel's
# mindspore/parallel/_auto_parallel_context.py sets ``set_fusion_threshold_mb(fusion_threshold=64)`` for "auto" and
# the "config" value for "size". Under DATA_PARALLEL the AllReduce fusion pass (ccsrc/backend/common/pass/
# communication_op_fusion.cc ``GetAllReduceSplitSegment``, lib/libmindspore_backend_common.so) multiplies that
# threshold by 262144 bytes (``kDefaultThresholdMb2Byte``; ``shl $0x12`` in the wheel's binary), so a "MB" of the
# setting is 256 KiB and "auto" closes buckets at 16 MiB. Measured on CPU: "size" 1 on the ci model (62 tensors,
# 0.67 MiB) gave 3 AllReduce calls of 299,400 / 268,032 / 138,176 bytes; ResNet-50 (161 tensors, ~90-98 MiB) went
# from 162 calls to 7 with "auto" in the gpu8 rehearsal (6 gradient buckets + the loss scale's overflow flag).
AUTO_FUSION_THRESHOLD = 64
THRESHOLD_UNIT_BYTES = 262144


def fusion_threshold_bytes(comm_fusion: dict) -> int | None:
    """The AllReduce bucket threshold in bytes that ``comm_fusion`` sets under DATA_PARALLEL (None: no threshold)."""
    spec = (comm_fusion or {}).get("allreduce") or {}
    if spec.get("mode") == "auto":
        return AUTO_FUSION_THRESHOLD * THRESHOLD_UNIT_BYTES
    if spec.get("mode") == "size":
        return int(spec["config"]) * THRESHOLD_UNIT_BYTES
    return None


def threshold_buckets(grad_bytes, threshold: int) -> list[int]:
    """Bytes per bucket as the fusion pass cuts ``grad_bytes`` (in the graph's AllReduce order) at ``threshold``: the
    tensor that would overflow a bucket closes it (and is in it), and the next bucket starts from zero."""
    out, acc, cur = [], 0, 0
    for b in grad_bytes:
        cur += b
        if acc + b > threshold:
            out.append(cur)
            acc = cur = 0
        else:
            acc += b
    return out + [cur] if cur else out


def predicted_buckets(param_bytes, comm_fusion: dict) -> int | None:
    """AllReduce calls the gradients should take per step under ``comm_fusion`` (DATA_PARALLEL): one per tensor with
    fusion off, the split points' buckets for "index", the threshold's for "auto"/"size" (cut in backward order,
    the order gradients reach the reducer; which tensor closes a bucket can differ, the count rarely does). A
    prediction to set beside the measured count, which is the figure reported."""
    spec = (comm_fusion or {}).get("allreduce")
    if not spec:
        return len(param_bytes)
    if spec.get("mode") == "index":      # each index ends a bucket (inclusive); the last tensor ends the last one
        ends = [i for i in spec["config"] if i < len(param_bytes)]
        return len(ends) + (0 if ends and ends[-1] == len(param_bytes) - 1 else 1)
    threshold = fusion_threshold_bytes(comm_fusion)
    return len(threshold_buckets(list(param_bytes)[::-1], threshold)) if threshold is not None else None


def fusion_split_indices(param_bytes, bucket_bytes: float) -> list[int]:
    """Split indices for ``comm_fusion={"allreduce": {"mode": "index", "config": [...]}}`` (the same as
    ``all_reduce_fusion_config``) that cut the gradients, in parameter order, into buckets of about
    ``bucket_bytes``: a bucket closes once it holds at least that much. ``[]`` means one bucket."""
    out, acc = [], 0.0
    n = len(param_bytes)
    for i, b in enumerate(param_bytes):
        acc += b
        if acc >= bucket_bytes and i + 1 < n:
            out.append(i + 1)
            acc = 0.0
    return out


def isolate_compile_cache(cfg):
    """``cfg`` with a compile-cache folder of its own when it uses a chapter-04 switch that changes the graph.

    ``helpers.job.compile_cache.compile_cache_dir`` keys the cache by the model's shape and ``comm_fusion``, not by
    ``amp_level``, ``grad_reduce`` or ``cell_comm_fusion``; MindSpore's cache checks the network's source
    files, which these switches do not change, so an O3 job could load an O0 graph. A suffix keeps them apart.
    """
    keys = ("amp_level", "grad_reduce", "cell_comm_fusion")
    default = JobConfig()
    changed = {k: getattr(cfg, k) for k in keys if getattr(cfg, k) != getattr(default, k)}
    if not changed or not cfg.compile_cache:
        return cfg
    tag = hashlib.sha1(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:8]
    return cfg.replace(env={**cfg.env, "MS_COMPILER_CACHE_PATH": f"{compile_cache_dir(cfg)}-{tag}"})


def fusion_settings(plan: dict, param_bytes) -> dict[str, tuple[str, dict]]:
    """Sweep label -> (job name, ``comm_fusion``) of the fused jobs the plan asks for (the baseline is not here)."""
    out = {"auto": ("fused_auto", FUSE_ALL)}
    for mb in plan["bucket_mb"]:
        # the threshold's unit is 256 KiB under data parallel (AUTO_FUSION_THRESHOLD's note), whatever its name says
        size = {"allreduce": {"mode": "size", "config": int(mb)}}
        out[f"size {mb} (~{mb * THRESHOLD_UNIT_BYTES // 1024} KiB)"] = (f"size_{mb}mb", size)
    for kb in plan["index_bucket_kb"]:
        split = fusion_split_indices(param_bytes, kb * 1024)
        out[f"index ~{kb} KB"] = (f"index_{kb}kb", {"allreduce": {"mode": "index", "config": split}})
    return out


def gradient_bytes(cfg: JobConfig, num_classes: int = 10) -> list[int]:
    """Bytes of each float32 gradient, in the order the optimizer hands them to the reducer (what "index" splits),
    for ``cfg``'s model with ``num_classes`` outputs (a job records its own: ``result.summary("num_classes")``)."""
    return list(_gradient_bytes(cfg.arch, cfg.width, cfg.stem, int(num_classes)))


@functools.lru_cache(maxsize=8)
def _gradient_bytes(arch: str, width: float, stem: str, num_classes: int) -> tuple[int, ...]:
    net = build_model(arch, num_classes, width, stem, "native")
    return tuple(4 * int(np.prod(p.shape)) for p in net.trainable_params())


def job_gradient_bytes(result: JobResult) -> list[int]:
    """A finished job's gradient sizes: its model with the class count its rank 0 recorded."""
    classes = result.summary("num_classes")[0] if result.summaries else None
    if classes is None:
        raise ValueError(f"{result.run_dir}: rank 0 recorded no num_classes in its summary")
    return gradient_bytes(result.config, classes)
