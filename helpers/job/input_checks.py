"""Before launch: the files a job config names (strategy file, init checkpoint) exist and fit its model, and this
machine can run its data pipeline (dataset workers)."""

from __future__ import annotations

from pathlib import Path

from helpers.core.config import dataset_workers_problem
from helpers.core.errors import ConfigError, DataError
from helpers.core.paths import resolve
from helpers.core.resnet_layout import ARCHS, EXPANSION, stage_widths

MAX_LINES = 6           # per file: the first problems, then "... and N more"


def model_param_shapes(arch: str, num_classes: int | None, width: float, stem: str) -> dict[str, tuple]:
    """``{name: shape}`` of every parameter ``helpers.train.models.build_model`` makes (BatchNorm statistics
    included), worked out on paper from ``helpers.core.resnet_layout``; ``num_classes=None`` leaves the
    classifier's row count unknown (``None`` in its shapes)."""
    kind, depths = ARCHS[arch]
    widths = stage_widths(width)
    shapes: dict[str, tuple] = {}

    def conv_bn(conv, bn, cin, cout, k):
        shapes[f"{conv}.weight"] = (cout, cin, k, k)
        for p in ("moving_mean", "moving_variance", "gamma", "beta"):
            shapes[f"{bn}.{p}"] = (cout,)

    cin = widths[0]
    conv_bn("stem.0", "stem.1", 3, cin, 7 if stem == "imagenet" else 3)
    for i, (w, n) in enumerate(zip(widths, depths), 1):
        for j in range(n):
            p, cout = f"layer{i}.{j}", w * EXPANSION[kind]
            plan = [(cin, w, 3), (w, w, 3)] if kind == "basic" else [(cin, w, 1), (w, w, 3), (w, cout, 1)]
            for k, (a, b, size) in enumerate(plan, 1):
                conv_bn(f"{p}.conv{k}", f"{p}.bn{k}", a, b, size)
            if (i > 1 and j == 0) or cin != cout:                        # stride 2 or a channel change
                conv_bn(f"{p}.down.0", f"{p}.down.1", cin, cout, 1)
            cin = cout
    shapes["fc.weight"], shapes["fc.bias"] = (num_classes, cin), (num_classes,)
    return shapes


def _fits(want: tuple, got) -> bool:
    got = tuple(int(d) for d in got)
    return len(want) == len(got) and all(w is None or w == g for w, g in zip(want, got))


def _shown(shape: tuple) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + (",)" if len(shape) == 1 else ")")


def _capped(field: str, head: str, problems: list[str]) -> list[str]:
    lines = [f"{field}: {head}"] + [f"  - {p}" for p in problems[:MAX_LINES]]
    if len(problems) > MAX_LINES:
        lines.append(f"  - ... and {len(problems) - MAX_LINES} more")
    return lines


def _num_classes(cfg, problems: list[str]) -> int | None:
    """The classifier's rows, as the worker counts them; None when the data is not there (yet)."""
    from helpers.train.hybrid_classifier import num_classes_of as classes_of

    try:
        return classes_of(cfg)
    except ConfigError as e:                   # num_classes below the class folders: the worker would refuse
        problems.append(str(e))
    except DataError:                          # not prepared yet; helpers.train.data.prepare_data reports it
        pass
    return cfg.num_classes


def _strategy_problems(cfg, shapes: dict) -> tuple[list[str], object]:
    """Lines about ``cfg.strategy_file`` and the classifier ``Layout`` it gives (None when it gives none)."""
    from helpers.train.hybrid_classifier import CLASSIFIER, classifier_layout
    from helpers.train.strategy_file import json_tensor_shapes, read_strategy, validate_strategy

    path = resolve(cfg.strategy_file)
    if not path.is_file():
        return [f"strategy_file: no such file {path} (got {cfg.strategy_file!r})"], None
    try:
        strategy = read_strategy(path)
    except DataError as e:
        return [f"strategy_file: not a strategy file helpers.train.strategy_file.read_strategy can read: {e}"], None
    problems, layout = [], None
    # unknown class count: world_size rows, which every split over the job's ranks divides
    probe = {n: tuple(cfg.world_size if d is None else d for d in s) for n, s in shapes.items()}
    try:
        validate_strategy(path, probe, cfg.world_size)
    except ConfigError as e:
        problems += getattr(e, "problems", [str(e)])
    unknown = [n for n in strategy if n not in shapes]
    if len(unknown) > 2:                       # one line, not one per parameter of another network
        problems = [p for p in problems if not p.startswith("unknown parameter")]
        problems.insert(0, f"{len(unknown)} of its {len(strategy)} parameters are not in this job's model, "
                           f"e.g. {unknown[:3]} (written for another arch?)")
    for name, shape in json_tensor_shapes(path).items():
        if name in shapes and not _fits(shapes[name], shape):
            problems.append(f"parameter {name!r}: the file records shape {tuple(shape)}, "
                            f"this job's model has {_shown(shapes[name])}")
    if any(n not in CLASSIFIER for n in strategy):          # a whole-network file: it should list all of it
        stats = ("moving_mean", "moving_variance")           # absent when saved with only_trainable_params
        missing = [n for n in shapes if n not in strategy and not n.endswith(stats)]
        if missing:
            problems.append(f"{len(missing)} parameters of this job's model are not in the file, "
                            f"e.g. {missing[:3]}")
    try:
        layout = classifier_layout(strategy, cfg.world_size)
    except ConfigError as e:
        problems.append(str(e))
    if not problems:
        return [], layout
    head = (f"{path} does not fit this job ({cfg.arch}, width {cfg.width}, stem {cfg.stem!r}, "
            f"classifier {_shown(shapes['fc.weight'])}, {cfg.world_size} ranks):")
    return _capped("strategy_file", head, problems), layout


def _rank_shapes(shapes: dict, layout) -> dict:
    """A rank's shapes: the classifier's rows cut ``layout.mp`` ways (the CPU path's ``cut_classifier``)."""
    mp = layout.mp if layout is not None else 1
    rows, feat = shapes["fc.weight"]
    cut = None if rows is None else rows // mp
    return {**shapes, "fc.weight": (cut, feat), "fc.bias": (cut,)}


def _ckpt_problems(file: Path, want: dict, who: str) -> list[str]:
    """At most two lines about one checkpoint file: parameters it lacks, parameters of another shape."""
    import mindspore as ms

    try:
        params = ms.load_checkpoint(str(file))
    except Exception as e:                     # not a checkpoint, truncated, ...
        return [f"{file} is unreadable: {type(e).__name__}: {e}"]
    missing = [n for n in want if n not in params]
    out = [f"{file} lacks {len(missing)} parameters of this job's model, e.g. {missing[:3]}"] if missing else []
    wrong = [n for n in want if n in params and not _fits(want[n], params[n].shape)]
    if wrong:
        more = f" (and {len(wrong) - 1} more of another shape)" if len(wrong) > 1 else ""
        out.append(f"{file}: {wrong[0]!r} has shape {tuple(params[wrong[0]].shape)}, {who} needs "
                   f"{_shown(want[wrong[0]])}{more}")
    return out


def _checkpoint_problems(cfg, shapes: dict, layout) -> list[str]:
    """CPU: ``rank_<r>/*.ckpt`` (the last file, as ``load_rank_checkpoint`` takes it) for every rank;
    GPU/Ascend with a strategy file: one full checkpoint file (``load_full_checkpoint``)."""
    path = resolve(cfg.init_checkpoint)
    if not path.exists():
        return [f"init_checkpoint: no such file or directory {path} (got {cfg.init_checkpoint!r})"]
    head = f"{path} does not fit this job ({cfg.arch}, width {cfg.width}, {cfg.world_size} ranks):"
    if cfg.device_target != "CPU" and cfg.strategy_file:
        if not path.is_file():
            return [f"init_checkpoint: on GPU/Ascend give the merged full checkpoint file, not the directory "
                    f"{path} (MindSpore slices it per the strategy file when it compiles)"]
        problems = _ckpt_problems(path, shapes, "the full network")
        return _capped("init_checkpoint", head, problems) if problems else []
    if not path.is_dir():
        return [f"init_checkpoint: must be a directory of rank_<r>/*.ckpt, {path} is a file"]
    files = {r: sorted((path / f"rank_{r}").glob("*.ckpt")) for r in range(cfg.world_size)}
    absent = [r for r, found in files.items() if not found]
    problems = [f"no rank_<r>/*.ckpt for ranks {absent} of this job"] if absent else []
    want = _rank_shapes(shapes, layout)
    for r, found in files.items():
        if found:
            problems += _ckpt_problems(found[-1], want, f"rank {r} of this job")
    return _capped("init_checkpoint", head, problems) if problems else []


def check_job_inputs(cfg) -> None:
    """Raise one ``ConfigError`` listing every problem with the files ``cfg`` names: a missing path, a strategy
    file ``helpers.train.strategy_file`` cannot read or written for another model or world size, an ``init_checkpoint``
    without a checkpoint per rank or cut for another model or layout. Relative paths are taken from the
    course home (``helpers.core.paths.resolve``). Builds no model; reads checkpoints with MindSpore. Also refuses
    more ``dataset_workers`` than MindSpore's dataset takes here (``helpers.core.config.dataset_workers_problem``)."""
    cfg = cfg.validate()
    workers = dataset_workers_problem(cfg.dataset_workers)
    if workers:
        raise ConfigError(workers)
    if not (cfg.strategy_file or cfg.init_checkpoint):
        return
    problems: list[str] = []
    shapes = model_param_shapes(cfg.arch, _num_classes(cfg, problems), cfg.width, cfg.stem)
    layout = None
    if cfg.strategy_file:
        lines, layout = _strategy_problems(cfg, shapes)
        problems += lines
    if cfg.init_checkpoint:
        problems += _checkpoint_problems(cfg, shapes, layout)
    if problems:
        err = ConfigError("\n".join(problems))
        err.problems = problems
        raise err
