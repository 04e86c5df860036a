"""A chapter's closing claims as markdown: the notebook shows the first few and says where the rest are; the
course website lists them all.

A claim record is ``{id, text, holds, figures}`` (``helpers.conclusions``); ``holds`` is True (the expectation
held), False (it did not) or None (an observation). Every record is computed and written to the results file.
"""

from __future__ import annotations

MARKS = {True: "✓", False: "✗", None: "•"}
ORDER = {False: 0, True: 1, None: 2}     # what failed first, then the verdicts that held, then observations
SHOWN = 6                                # claims a notebook shows; the rest are recorded and on the website
HEADING = "**What this run showed**"     # the claims display starts with it (the website finds it by it)
SITE = "this chapter's page of the course website (`python -m helpers.course site`)"


def ranked(claims: list[dict]) -> list[dict]:
    """The claim records in the order they are shown: failures, then verdicts that held, then observations."""
    return sorted(claims, key=lambda c: ORDER[c["holds"]])


def claim_lines(claims: list[dict]) -> list[str]:
    """One markdown list item per claim, ranked, each marked ✓, ✗ or •."""
    return [f"- {MARKS[c['holds']]} {c['text']}" for c in ranked(claims)]


def notebook_claims(claims: list[dict], shown: int = SHOWN, recorded_in: str | None = None) -> str:
    """The first ``shown`` claims, then one line saying how many more are recorded, and where."""
    lines = claim_lines(claims)
    text = "\n".join(lines[:shown])
    more = len(lines) - shown
    if more > 0:
        where = f"`{recorded_in}`" if recorded_in else "this chapter's results file (`results_path`)"
        text += (f"\n\n{more} more {'claim is' if more == 1 else 'claims are'} recorded in {where} "
                 f"and listed on {SITE}.")
    return text


def page_claims(claims: list[dict], shown: int = SHOWN) -> str:
    """The website's claims display: the heading, the first ``shown`` open, the rest in a collapsed block."""
    lines = claim_lines(claims)
    text = HEADING + "\n\n" + "\n".join(lines[:shown])
    if len(lines) > shown:
        text += (f"\n\n<details><summary>{len(lines) - shown} more from this run</summary>\n\n"
                 + "\n".join(lines[shown:]) + "\n\n</details>")
    return text
