"""Chapter 03 exercises: a 2x4 hybrid layout of a 100k-class classifier (public via ``helpers.exercises``)."""

from __future__ import annotations

from helpers.exercises.common import checker, as_int, say, tuple_error

EX03_FEATURES, EX03_CLASSES = 2048, 100_000   # ResNet-50's 2048 features, a 100k-class classifier
EX03_DP, EX03_MP = 2, 4                       # 2 data-parallel groups x 4 model-parallel ranks
EX03_RANK = 5


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
