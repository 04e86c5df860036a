"""A chapter's conclusions as data: each claim's text is chosen from the run's own numbers, shown with ✓/✗ and recorded.

A claim is ``{id, text, holds, figures}``. ``holds`` says whether the chapter's expectation held in this run
(``None``: an observation that expects nothing); ``text`` always states what was measured, so it is true either
way. Each chapter's builder lives in ``helpers.conclusions.chNN`` and takes the chapter's recorded values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from helpers.output.claims import HEADING, SHOWN, notebook_claims


@dataclass(frozen=True)
class Claim:
    """One conclusion of a run: an id, the sentence, whether the expectation held, the figures it rests on."""

    id: str
    text: str
    holds: bool | None
    figures: dict = field(default_factory=dict)


def claim(id: str, holds: bool | None, if_true: str, if_false: str | None = None, **figures) -> Claim:
    """The sentence for what happened: ``if_true`` when the expectation held (or for an observation), else
    ``if_false``; both are formatted with ``figures`` (e.g. ``"{slow} ranks were {pct:.0f}% slower"``)."""
    text = if_true if holds or holds is None or if_false is None else if_false
    return Claim(id, text.format(**figures), holds, figures)


def as_records(claims: list[Claim]) -> list[dict]:
    """What ``record_results(..., claims=...)`` stores: plain dicts."""
    return [asdict(c) for c in claims]


def claims_markdown(claims: list[Claim], shown: int = SHOWN, recorded_in: str | None = None) -> str:
    """The first ``shown`` claims as a ✓/✗/• list, then one line on how many more are recorded, and where."""
    return notebook_claims(as_records(claims), shown, recorded_in)


def shown_path(results_path) -> str | None:
    """``results_path`` as the notebook names it: from the course home when inside it; None when not given."""
    if not results_path:
        return None
    from helpers.core.paths import course_home, resolve

    path, home = resolve(results_path), course_home()
    return str(path.relative_to(home) if path.is_relative_to(home) else path)


def notebook_results_path() -> str | None:
    """The running notebook's ``results_path`` parameter (every chapter's parameters cell has one), or None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell.user_ns.get("results_path") if shell is not None else None


def show_claims(claims: list[Claim], results_path=None) -> list[dict]:
    """Display the claims (``claims_markdown``; ``results_path`` defaults to the notebook's) and return records."""
    from helpers.output.tables import show_md

    where = shown_path(results_path or notebook_results_path())
    show_md(HEADING + "\n\n" + claims_markdown(claims, recorded_in=where))
    return as_records(claims)


def failed(claims: list[dict]) -> list[dict]:
    """The recorded claims whose expectation did not hold (tests assert this is empty for mechanisms)."""
    return [c for c in claims if c["holds"] is False]
