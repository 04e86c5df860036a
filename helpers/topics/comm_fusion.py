"""Gradient fusion settings: ``index``-mode split points, and a compile cache of its own for graph-changing switches."""

from __future__ import annotations

import hashlib
import json

from helpers.core.config import JobConfig
from helpers.job.compile_cache import compile_cache_dir


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
