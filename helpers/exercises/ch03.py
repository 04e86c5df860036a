"""Chapter 03 exercises: a 2x4 hybrid layout of a 100k-class classifier, the code cell's ``/ mp`` (public via
``helpers.exercises``)."""

from __future__ import annotations

import ast

import numpy as np

from helpers.exercises.common import RUN_NAME, as_int, cell_run, checker, read_count, say, tuple_error

EX03_FEATURES, EX03_CLASSES = 2048, 100_000   # ResNet-50's 2048 features, a 100k-class classifier
EX03_DP, EX03_MP = 2, 4                       # 2 data-parallel groups x 4 model-parallel ranks
EX03_RANK = 5
EX03_RATIO_KEY = "gradient / reference"       # in the code cell's finish(...): |gradient| / |reference's slice|


def _layout_bytes_hint(got: int, want: int) -> str:
    """Why ``got`` is not the classifier bytes one rank holds under 2x4, naming the usual confusion."""
    from helpers.core.memory_planner import classifier_param_bytes

    rows = -(-EX03_CLASSES // EX03_MP)
    hints = {
        classifier_param_bytes(EX03_FEATURES, EX03_CLASSES, 1): "that is the whole layer (pure data parallel): "
        f"the {EX03_MP} model-parallel ranks split its classes",
        classifier_param_bytes(EX03_FEATURES, EX03_CLASSES, EX03_DP * EX03_MP): f"that splits the classes over "
        f"all {EX03_DP * EX03_MP} ranks; only the {EX03_MP} model-parallel ranks split them, each data-parallel "
        "group holds a whole copy",
        classifier_param_bytes(EX03_FEATURES, EX03_CLASSES, EX03_DP): f"that splits the classes over {EX03_DP} "
        f"ranks, the data-parallel degree; the model-parallel degree is {EX03_MP}",
        rows * EX03_FEATURES * 4: f"the bias is missing: each class row holds {EX03_FEATURES} weights + 1 bias",
        rows * (EX03_FEATURES + 1): "that is the parameter count; float32 takes 4 bytes per parameter",
        round(want / 2**20): "that is MiB; the exercise asks for bytes",
        round(want / 1e6): "that is MB; the exercise asks for bytes",
    }
    return hints.get(got, f"each rank holds ceil({EX03_CLASSES} / {EX03_MP}) rows of ({EX03_FEATURES} "
                          "weights + 1 "
                          f"bias) x 4 bytes = {want:,} bytes, not {got:,}")


@checker
def check_03_layout_bytes(answer) -> bool:
    """(layout string, classifier bytes per rank) for 2 data-parallel groups x 4 model-parallel ranks."""
    if answer is None:
        return say(None, 'set answer = ("<dp>x<mp>", bytes of classifier weight + bias on one rank, fp32)')
    error = tuple_error(answer, '("<dp>x<mp>", bytes)', 2, str_at=0)
    if error:
        return say(False, error)
    from helpers.core.errors import ConfigError
    from helpers.core.memory_planner import classifier_param_bytes
    from helpers.train.strategy_layout import Layout

    try:
        layout = Layout.parse(answer[0])
    except ConfigError as exc:
        return say(False, str(exc))
    want_layout = Layout(EX03_DP, EX03_MP)
    if (layout.dp, layout.mp) == (EX03_MP, EX03_DP):
        return say(False, f"swapped: '{layout.name}' is {layout.dp} data-parallel groups of {layout.mp} "
                           "model-parallel "
                           f"ranks; the layout string is <dp>x<mp>, so '{want_layout.name}'")
    if layout != want_layout:
        return say(False, f"{layout.name} is {layout.dp} data-parallel groups of {layout.mp} model-parallel "
                           "ranks; "
                           f"the exercise wants {EX03_DP} groups of {EX03_MP}: '{want_layout.name}'")
    got, want = as_int(answer[1]), classifier_param_bytes(EX03_FEATURES, EX03_CLASSES, want_layout.mp)
    if got != want:
        return say(False, _layout_bytes_hint(got, want))
    full = classifier_param_bytes(EX03_FEATURES, EX03_CLASSES, 1)
    return say(True, f"'{layout.name}': {want:,} bytes ({want / 2**20:.0f} MiB) per rank instead of "
                      f"{full / 2**20:.0f} MiB for the whole classifier")


@checker
def check_03_same_slice(answer) -> bool:
    """The ranks that hold the same classifier slice as rank 5 (and average its gradient) under 2x4: a tuple
    of ints, in any order, rank 5 included."""
    if answer is None:
        return say(None, f"set answer = the ranks (a tuple) holding the same classifier slice as rank "
                          f"{EX03_RANK}")
    error = tuple_error(answer, "of ranks")
    if error:
        return say(False, error)
    from helpers.train.strategy_layout import Layout

    layout = Layout(EX03_DP, EX03_MP)
    got, want = tuple(sorted(as_int(r) for r in answer)), layout.dp_group(EX03_RANK)
    mp_index = layout.coords(EX03_RANK)[1]
    if got == want:
        return say(True, f"{want}: rank r sits at (dp, mp) = divmod(r, {layout.mp}), so rank {EX03_RANK} is "
                          f"{layout.coords(EX03_RANK)}; the ranks with the same mp index hold the same slice")
    if len(set(got)) != len(got) or not all(0 <= r < layout.world for r in got):
        return say(False, f"each rank once, from 0..{layout.world - 1}, got {answer!r}")
    if got == layout.mp_group(EX03_RANK):
        return say(False, f"{got} is rank {EX03_RANK}'s model-parallel group: they hold the *other* slices "
                           f"(and gather the logits); the same slice is on {want}")
    if got == tuple(r for r in want if r != EX03_RANK):
        return say(False, f"include rank {EX03_RANK} itself: the group that holds the slice and averages its "
                           f"gradient is {want}")
    if got in layout.dp_groups():
        return say(False, f"{got} hold the slice of mp index {got[0] % layout.mp}; rank {EX03_RANK} has mp index "
                           f"{mp_index} (rank r sits at divmod(r, {layout.mp}))")
    return say(False, f"the same slice as rank {EX03_RANK} is on {want}: the ranks with the same model-parallel "
                       f"index ({mp_index}) in each of the {layout.dp} data-parallel groups")


def _divides_by_mp(tree: ast.AST) -> bool:
    """Whether a ``forward`` in the cell's CPU branch (the whole cell if it has none) still divides by ``mp``."""
    branch = next((n.body for n in ast.walk(tree) if isinstance(n, ast.If) and "CPU" in ast.unparse(n.test)),
                  [tree])
    forwards = [f for stmt in branch for f in ast.walk(stmt)
                if isinstance(f, ast.FunctionDef) and f.name == "forward"]
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and isinstance(n.right, ast.Name)
               and n.right.id == "mp" for f in forwards for n in ast.walk(f))


def _factor_hint(answer, want: int, ratio: float, returns: dict) -> str | None:
    """Why ``answer`` is not the factor ``want`` (``ratio`` unrounded), naming the usual confusion, or None."""
    mp, dp = (len({v[k] for v in returns.values()}) for k in ("model shard", "data shard"))
    seen = f"{EX03_RATIO_KEY} is {ratio:g} on every rank ({RUN_NAME}.returns)"
    if isinstance(answer, (float, np.floating)) and want > 1 and abs(answer - 1 / want) < 0.01:
        return f"{answer!r} is the reference over the gradient; the gradient is the larger one: {seen}"
    if isinstance(answer, (float, np.floating)) and answer == want:
        return f"the exercise asks for a whole number (int), got the float {answer!r}: write {want}"
    got = as_int(answer)
    if got == 1 and want != 1:
        return f"1 would mean unchanged, but {seen}: each rank's gradient is {want} x the reference's"
    if got == len(returns) != want:
        return (f"{got} is the number of ranks; the AllReduce that gathers the logits spans one model-parallel "
                f"group, mp = {mp} ranks")
    if got == dp != want:
        return (f"{got} is the number of data-parallel groups; the AllReduce that gathers the logits spans one "
                f"model-parallel group, mp = {mp} ranks")
    return None


def _ratios(run, todo: str):
    """``(each rank's EX03_RATIO_KEY, returns, None)`` from a CPU run of the edited cell, else ``(None, None,
    verdict)`` once the reason is said."""
    returns, tree, verdict = cell_run(run, ("model shard", "data shard"), todo)
    if returns is None:
        return None, None, verdict
    if not all(EX03_RATIO_KEY in v for v in returns.values()):
        return None, None, say(False, f"the code cell's finish(...) returns no {EX03_RATIO_KEY!r}: run the "
                                      "chapter's code cell as the course gives it, with the edit")
    device = getattr(getattr(run, "config", None), "device_target", "CPU")
    if device != "CPU":
        return None, None, say(None, f"{RUN_NAME} ran on {device}: the CPU branch (and its / mp) runs only with "
                                     "device_target CPU; on cards MindSpore splits the layer itself")
    if _divides_by_mp(tree):
        return None, None, say(None, f"the cell that made {RUN_NAME} still divides the loss by mp in the CPU "
                                     f"forward: {todo}, then answer")
    ratios = [float(v[EX03_RATIO_KEY]) for v in returns.values()]
    if not all(np.isfinite(ratios)) or len({round(r) for r in ratios}) != 1:
        return None, None, say(False, f"the ranks' {EX03_RATIO_KEY} ({', '.join(f'{r:g}' for r in ratios)}) do "
                                      "not agree on one whole factor: run the code cell again")
    return ratios, returns, None


@checker
def check_03_without_mp_division(answer, run=None) -> bool:
    """The whole factor each rank's gradient is off from the one-process reference once the code cell's CPU
    ``forward`` no longer divides by ``mp``, read from ``run``: the cell's ``JobResult`` (``on_ranks``)."""
    ratios, returns, verdict = _ratios(run, "remove the / mp from the CPU branch's forward and run the code "
                                            "cell again")
    if ratios is None:
        return verdict
    want, ratio = round(ratios[0]), ratios[0]
    hint = None if answer is None else _factor_hint(answer, want, ratio, returns)
    if hint:
        return say(False, hint)
    got, verdict = read_count(answer, "the whole factor by which each rank's gradient is off from the reference")
    if got is None:
        return verdict
    mp = len({v["model shard"] for v in returns.values()})
    if got != want:
        return say(False, f"{EX03_RATIO_KEY} is {ratio:g} on every rank ({RUN_NAME}.returns): {want}, not {got}")
    if want != mp:
        return say(True, f"{want}: {EX03_RATIO_KEY} is {ratio:g} on every rank ({RUN_NAME}.returns)")
    return say(True, f"{want}: each rank's gradient is {want} x the reference's. The mp = {mp} members of a "
                      "group compute the same loss on the same gathered logits, and AllReduce's backward sums "
                      f"their {mp} identical gradients: the / mp undid that")
