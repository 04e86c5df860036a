"""``mindspore.profiler`` around a rank's training loop: what it records on each device, and when."""

from __future__ import annotations

from pathlib import Path

from helpers.core.config import JobConfig


def profiler_activities(device_target: str) -> list:
    """What ``mindspore.profiler.profile`` records on this device: host ops always, plus the device's kernels."""
    from mindspore.profiler import ProfilerActivity

    extra = {"CPU": [], "GPU": [ProfilerActivity.GPU], "Ascend": [ProfilerActivity.NPU]}
    if device_target not in extra:
        raise ValueError(f"device_target must be CPU, GPU or Ascend, got {device_target!r}")
    return [ProfilerActivity.CPU] + extra[device_target]


class NoProfiler:
    """Stands in for the profiler when ``cfg.profile`` is off: a context manager with a ``step()`` that does nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def step(self):
        pass


def profiling_session(cfg: JobConfig, run_dir: Path):
    """``mindspore.profiler.profile`` on this rank when ``cfg.profile``, else a :class:`NoProfiler`.

    The schedule skips ``profile_skip_steps`` (graph compilation) and profiles the remaining steps; each
    rank writes under ``<run_dir>/profile/`` (on CPU: ``trace_view.json`` plus the CPU op tables).
    """
    if not cfg.profile:
        return NoProfiler()
    from mindspore.profiler import profile, schedule, tensorboard_trace_handler

    active = cfg.steps - cfg.profile_skip_steps
    return profile(activities=profiler_activities(cfg.device_target),
                   schedule=schedule(wait=0, warmup=0, active=active, repeat=1, skip_first=cfg.profile_skip_steps),
                   on_trace_ready=tensorboard_trace_handler(str(run_dir / "profile")))
