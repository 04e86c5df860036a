"""Whether a ``set_auto_parallel_context(comm_fusion=...)`` value is one MindSpore takes (a config field's check)."""

from __future__ import annotations

FUSION_MODES = {"allreduce": ("auto", "size", "index"), "allgather": ("auto", "size"),
                "reducescatter": ("auto", "size")}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def comm_fusion_problem(value) -> str | None:
    """What is wrong with a ``set_auto_parallel_context(comm_fusion=...)`` value, or None if MindSpore takes it.

    None or {}; else ``{type: {"mode": m, "config": c}}`` with types and modes of ``FUSION_MODES`` ("size":
    threshold in MB, an int > 0; "index": ascending distinct ints; "auto": config unused, None), and
    optionally ``"openstate": bool`` (MindSpore's switch for all fusion)."""
    accepted = ('None, {} or {"allreduce"|"allgather"|"reducescatter": {"mode": ..., "config": ...}}: modes '
                + "; ".join(f"{k} {'/'.join(m)}" for k, m in FUSION_MODES.items())
                + '; "size" config an int > 0 (MB), "index" config a non-empty ascending list of distinct ints')
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        return f"must be {accepted}"
    for kind, spec in value.items():
        if kind == "openstate":
            if not isinstance(spec, bool):
                return f'"openstate" must be a bool; {accepted}'
            continue
        if kind not in FUSION_MODES:
            return f"unknown communication type {kind!r}; must be {accepted}"
        if not isinstance(spec, dict) or set(spec) != {"mode", "config"}:
            return f'{kind} must be a dict with exactly the keys "mode" and "config"; {accepted}'
        mode, conf = spec["mode"], spec["config"]
        if mode not in FUSION_MODES[kind]:
            return f"{kind} mode must be one of {FUSION_MODES[kind]}; {accepted}"
        if mode == "size" and not (_is_int(conf) and conf > 0):
            return f'{kind} mode "size" needs config = a threshold in MB, an int > 0; {accepted}'
        if mode == "index" and not (isinstance(conf, list) and conf and all(_is_int(i) for i in conf)
                                    and conf == sorted(set(conf))):
            return f'{kind} mode "index" needs config = a non-empty ascending list of distinct ints; {accepted}'
    return None
