"""Runs one chapter notebook with papermill (preset ci) and checks what every chapter owes: figures, results, claims."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from helpers.course import run_chapter, warning_lines
from helpers.output.claims import SHOWN, ranked
from helpers.output.prose import notebook_prose
from helpers.output.site import prepare_notebook

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
MIN_CLAIMS = 4
CHAPTER_TESTS = pytest.StashKey[list]()    # node ids of this session's chapter tests (tests/conftest.py)
BASETEMP = pytest.StashKey[Path]()         # this process's pytest temp folder (tests/conftest.py)
PROSE_WORDS = 1500    # a chapter of the best tutorials, generated text included (helpers.output.prose)


def output_text(ipynb: Path) -> str:
    """Every text and markdown output of an executed notebook, joined (what a reader sees below the cells)."""
    nb = json.loads(Path(ipynb).read_text(encoding="utf-8"))
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            parts += out.get("text", [])
            for mime in ("text/markdown", "text/plain"):
                parts += out.get("data", {}).get(mime, [])
    return "".join(parts)


def handoff_dir(basetemp: Path) -> Path:
    """Where this session's chapter tests leave their executed notebooks for the website test
    (tests/browser/test_website.py): one folder for every xdist worker of the session, in pytest's own temp root."""
    root = basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp
    return root / "executed-ci"


def finished_marker(basetemp: Path, nodeid: str) -> Path:
    """The file that says a chapter test of this session ended (passed, failed, errored or skipped)."""
    return handoff_dir(basetemp) / "finished" / re.sub(r"[^\w.-]", "_", nodeid)


def hand_off(run, tmp_path: Path) -> None:
    """A chapter that ran to its end: its executed notebook and results, for the website test."""
    folder = handoff_dir(tmp_path.parent)           # tmp_path is <basetemp>/<test name>N
    (folder / "results").mkdir(parents=True, exist_ok=True)
    shutil.copy2(run.notebook, folder / Path(run.notebook).name)
    results = tmp_path / "results" / f"{Path(run.notebook).stem}.json"
    if results.is_file():
        shutil.copy2(results, folder / "results" / results.name)


def execute(stem: str, tmp_path: Path) -> dict:
    run = run_chapter(NOTEBOOKS / f"{stem}.ipynb", "ci", tmp_path)
    if run.ok:
        hand_off(run, tmp_path)
    assert run.ok, f"{stem} failed: {run.error} (executed notebook: {run.notebook})"
    assert not warning_lines(run.notebook), f"warnings reach the reader: {warning_lines(run.notebook)}"
    prose = notebook_prose(run.notebook)
    assert prose["total"] <= PROSE_WORDS, f"{stem}: {prose} words of prose a reader meets (at most {PROSE_WORDS})"
    page = Path(run.html).read_text(encoding="utf-8")
    assert "data:image/png;base64" in page, "the HTML handout embeds the chapter's figures"
    assert (tmp_path / "results" / f"{stem}.json").exists()
    claims = run.results.get("claims", [])
    assert len(claims) >= MIN_CLAIMS, f"{stem} records {len(claims)} computed claims"
    check_claims_shown(stem, run.notebook, claims, tmp_path)
    return run.results


def check_claims_shown(stem: str, notebook: Path, claims: list[dict], tmp_path: Path) -> None:
    """The notebook shows the first SHOWN claims and where the rest are; the website page shows all; all hold."""
    shown = output_text(notebook)
    for c in ranked(claims)[:SHOWN]:
        assert c["text"] in shown, f"claim {c['id']!r} is among the first {SHOWN} but not shown: {c['text']!r}"
    if len(claims) > SHOWN:
        assert f"{len(claims) - SHOWN} more claim" in shown and f"results/{stem}.json`" in shown, \
            "the notebook says how many more claims were recorded, and where"
    page = tmp_path / "site-page" / f"{stem}.ipynb"
    prepare_notebook(Path(notebook), page, None)
    listed = output_text(page)
    for c in claims:
        assert c["text"] in listed, f"claim {c['id']!r} is recorded but not on the website: {c['text']!r}"
        assert c["holds"] is not False, f"claim {c['id']!r} did not hold in the ci run: {c['text']!r}"
