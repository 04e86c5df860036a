"""A chapter's conclusions as data: each claim's text is chosen from the run's own numbers, shown with ✓/✗ and recorded.

A claim is ``{id, text, holds, figures}``. ``holds`` says whether the chapter's expectation held in this run
(``None``: an observation that expects nothing); ``text`` always states what was measured, so it is true either
way. Each chapter's builder lives in ``helpers.conclusions.chNN`` and takes the chapter's recorded values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

MARKS = {True: "✓", False: "✗", None: "•"}


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


SHOWN = 6       # claims in the open list; the rest of the run's claims sit in a collapsed block below it
ORDER = {False: 0, True: 1, None: 2}     # what failed first, then the verdicts that held, then observations


def claims_markdown(claims: list[Claim], shown: int = SHOWN) -> str:
    """The claims as a markdown list, each marked ✓, ✗ or • (an observation): failures and verdicts first, the
    first ``shown`` open and the others in a collapsed ``<details>`` block (every one is still recorded)."""
    ranked = sorted(claims, key=lambda c: ORDER[c.holds])
    lines = [f"- {MARKS[c.holds]} {c.text}" for c in ranked]
    text = "\n".join(lines[:shown])
    if len(lines) > shown:
        text += (f"\n\n<details><summary>{len(lines) - shown} more from this run</summary>\n\n"
                 + "\n".join(lines[shown:]) + "\n\n</details>")
    return text


def show_claims(claims: list[Claim]) -> list[dict]:
    """Display the claims as a ✓/✗ list (markdown) and return them as records for ``record_results``."""
    from helpers.output.tables import show_md

    show_md("**What this run showed**\n\n" + claims_markdown(claims))
    return as_records(claims)


def failed(claims: list[dict]) -> list[dict]:
    """The recorded claims whose expectation did not hold (tests assert this is empty for mechanisms)."""
    return [c for c in claims if c["holds"] is False]
