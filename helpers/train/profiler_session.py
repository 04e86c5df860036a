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


# The record a rank writes as its profile's analysis starts: a phase to the watchdog (helpers.job.watch, stall).
ANALYSIS_EVENT = "profile_analysis"


def announced(handler, before):
    """``handler`` (the profiler's ``on_trace_ready``) that first calls ``before()``: the analysis runs inside the
    ``prof.step()`` that ends the schedule, so a rank says so before it starts, not after."""
    # mindspore/profiler/profiler_action_controller.py: the step whose action goes RECORD_AND_SAVE -> NONE runs stop,
    # finalize and on_trace_ready; tensorboard_trace_handler's handler (profiler.py) then calls analyse() in that
    # thread (on Ascend: CANN's msprof export), before the worker's loop gets its next turn.
    def on_trace_ready(prof_inst):
        if before is not None:
            before()
        return handler(prof_inst)

    return on_trace_ready


def profiling_session(cfg: JobConfig, run_dir: Path, before_analysis=None):
    """``mindspore.profiler.profile`` on this rank when ``cfg.profile``, else a :class:`NoProfiler`.

    The schedule skips ``profile_skip_steps`` (graph compilation) and profiles the remaining steps; each
    rank writes under ``<run_dir>/profile/`` (on CPU: ``trace_view.json`` plus the CPU op tables).
    ``before_analysis()`` runs just before the analysis (see ``announced``).
    """
    if not cfg.profile:
        return NoProfiler()
    from mindspore.profiler import profile, schedule, tensorboard_trace_handler

    active = cfg.steps - cfg.profile_skip_steps
    return profile(activities=profiler_activities(cfg.device_target),
                   schedule=schedule(wait=0, warmup=0, active=active, repeat=1, skip_first=cfg.profile_skip_steps),
                   on_trace_ready=announced(tensorboard_trace_handler(str(run_dir / "profile")), before_analysis))
