"""What msrun runs on every rank for a cell: ``python -m helpers.cells.rank_main cell.py [cfg name...] config.json``.

It opens the rank's records, loads the notebook values the cell reads, then runs the cell as the module
``course_cell`` from its file (so ``inspect`` finds the source MindSpore's GRAPH mode parses), on the device,
threads and card settings of the config; the rank's start record and heartbeat begin when the cell's ``init()``
returns. An error becomes the rank's failure record naming the cell's line, and only the cell's frames are shown;
the cell's ``finish(value)`` goes into the rank's summary; with ``--then`` the config's worker task runs next, in the
same process, and the launch's further jobs after it (``helpers.train.chain``). msrun's scheduler goes straight to
``init()``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import pickle
import sys
import traceback
from pathlib import Path

from helpers.cells import reporting
from helpers.cells.program import MODULE_NAME, SAME_GRAPH_ENV, VALUES_FILE
from helpers.core.card_settings import card_record
from helpers.core.config import JobConfig
from helpers.core.errors import failure_kind, readable_error
from helpers.core.metrics import THEN_ENV, MetricsWriter
from helpers.train.card_runtime import ascend_soc
from helpers.train.chain import failure_where, fresh_start, run_more
from helpers.train import worker
from helpers.train.worker import leave_together, setup_runtime


def cell_frames(exc: BaseException, cell_file: str) -> tuple[list, int | None, str]:
    """The traceback from the cell's first frame on (the runner's own frames dropped), the innermost cell line
    and its code."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [i for i, f in enumerate(frames) if f.filename == cell_file]
    if not ours:
        return frames, None, ""
    return frames[ours[0]:], frames[ours[-1]].lineno, (frames[ours[-1]].line or "").strip()


def failure_text(exc: BaseException, cell_file: str) -> tuple[str, str]:
    """(one-line error naming the cell line, the traceback from the cell's frames on)."""
    frames, line, code = cell_frames(exc, cell_file)
    where = f" (cell line {line}: {code})" if line is not None else ""
    tb = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) \
        + "".join(traceback.format_exception_only(exc))
    return readable_error(f"{type(exc).__name__}: {exc}") + where, tb


def notebook_values(run_dir: Path) -> dict:
    """The notebook's values and modules the cell reads (``helpers.cells.program``), ready to use."""
    packed = pickle.loads((run_dir / VALUES_FILE).read_bytes())
    out = {name: pickle.loads(blob) for name, blob in packed["values"].items()}
    out.update({alias: importlib.import_module(mod) for alias, mod in packed["modules"].items()})
    return out


def run_cell(cell_file: Path, given: dict) -> None:
    """Execute the cell file as module ``course_cell`` with ``given`` names in its globals."""
    spec = importlib.util.spec_from_file_location(MODULE_NAME, cell_file)
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(given)
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)


def release_cell() -> None:
    """Drop the cell's module and what it holds (its model, its data pipeline's threads), so that a follow-on job
    starts with the memory and threads a fresh job would have."""
    import gc

    module = sys.modules.pop(MODULE_NAME, None)
    if module is not None:
        module.__dict__.clear()
    gc.collect()


def after_init(then) -> None:
    """Call ``then()`` each time the cell's ``mindspore.communication.init`` returns: the rank's start record and
    heartbeat thread begin there, as in the worker. A Python thread alive during ``init()`` made the ranks'
    registration with msrun's scheduler take 30-60 s instead of 4-9 s (8 ranks on 2 cores, 3 runs each way)."""
    from mindspore import communication
    from mindspore.communication import management

    original = management.init

    @functools.wraps(original)
    def init(*args, **kwargs):
        value = original(*args, **kwargs)
        then()
        return value

    communication.init = management.init = init


def share_graphs(cfg: JobConfig, rank: int, world: int, run_dir: Path, out: MetricsWriter) -> None:
    """``%%ranks ... --same-graph``: every rank but 0 loads each graph rank 0 compiles instead of compiling the same
    one at once on the shared cores (``helpers.train.shared_graphs``, as in the worker's train step). Each waits at
    its compile, not after ``init()``, which keeps the ranks in step with any collective run before it."""
    from helpers.train.shared_graphs import share_every_graph

    share_every_graph(cfg, rank, world, run_dir, lambda **kw: out.write("graph_share", **kw))


def follow_on(cfg: JobConfig, run_dir: Path, rank: int, world: int, out: MetricsWriter) -> dict:
    """``%%ranks ... --then``: the config's worker task on this rank after the cell (same ``init()``, same records
    file), started as a fresh job would start (``helpers.train.chain.fresh_start``); its summary."""
    reporting.started()
    fresh_start(cfg, out, more=0)
    return worker.run_task(cfg, run_dir, rank, world, out)


def main(argv=None) -> int:
    """Run the cell on this rank (or, in msrun's scheduler, until its ``init()``); returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    cfg_path = Path(argv[-1]).resolve()             # the rank guard passes the config last
    run_dir = cfg_path.parent
    cell_file = run_dir / argv[0]
    cfg = JobConfig.load(cfg_path)
    applied = setup_runtime(cfg)    # the launcher's part: cfg's device, its threads per rank, a card's settings
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        from mindspore.communication import init

        init()              # the scheduler needs nothing of the cell, and never returns from here
        return 0
    given = {**notebook_values(run_dir), **{name: cfg for name in argv[1:-1]}}   # the job's config by its names
    from helpers.train.heartbeat import Heartbeat

    rank, world = int(os.environ.get("RANK_ID", "0")), int(os.environ.get("RANK_SIZE", cfg.world_size))
    out = MetricsWriter(run_dir, rank)
    card = card_record(cfg.device_target, applied, ascend_soc() if cfg.device_target == "Ascend" else "")
    reporting.attach(out, pid=os.getpid(), world=world,
                     host=os.uname().nodename, **card)
    if os.environ.get(SAME_GRAPH_ENV) == "1":
        share_graphs(cfg, rank, world, run_dir, out)
    if os.environ.get(THEN_ENV) == "1":       # the follow-on shares its graphs when the ranks' counts agree
        from helpers.train.shared_graphs import count_compiles

        count_compiles()
    heartbeat = Heartbeat(run_dir, rank, ours=(str(cell_file),))
    after_init(lambda: (reporting.started(), heartbeat.start()))    # the watch reads a start record as "joined"
    try:
        try:
            run_cell(cell_file, given)
            summary = {}
            if os.environ.get(THEN_ENV) == "1":
                release_cell()
                summary = follow_on(cfg, run_dir, rank, world, out)
                run_more(worker.run_task, cfg, run_dir, rank, world, out, card, before=release_cell,
                         own=(THEN_ENV, SAME_GRAPH_ENV))
        finally:
            heartbeat.stop()
    except BaseException as exc:
        error, tb = failure_text(exc, str(cell_file))
        error += failure_where()
        reporting.started()
        out.write("failure", kind=failure_kind(tb), error=error, traceback=tb[-4000:])
        out.close()
        print(tb, file=sys.stderr, flush=True)
        return 1
    reporting.started()
    # chip, precision mode, deterministic as the worker writes them; a follow-on's summary; the cell's finish value
    out.write("summary", **card, **summary, **reporting.summary())
    out.close()
    leave_together(world)
    return 0


if __name__ == "__main__":
    sys.exit(main())
