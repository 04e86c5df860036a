"""Prose counting (helpers.output.prose) and the claims list a chapter ends with: six shown, verdicts first, one line
saying where the rest are recorded (the results file) and listed (the course website lists every claim)."""

import json

from helpers import conclusions
from helpers.conclusions import Claim, as_records, claims_markdown, show_claims
from helpers.output.claims import page_claims
from helpers.output.prose import notebook_prose, prose_words




def test_prose_counts_tables_and_collapsed_blocks_and_leaves_out_images_and_tags():
    text = ("## Two words\n\n| a | b |\n|---|---|\n![Figure: x y](data:png)\n"
            "<details><summary>appendix words</summary>\n\nmore words\n\n</details>\none <b>two</b> - 3.5 %")
    assert prose_words(text) == 2 + 2 + 2 + 2 + 3    # 'Two words', 'a b', 'appendix words', 'more words', 'one two 3.5'


def test_a_notebook_counts_its_markdown_cells_and_its_markdown_outputs(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "source": ["three words here"]},
                    {"cell_type": "code", "source": ["x"], "outputs": [
                        {"output_type": "display_data", "data": {"text/markdown": ["two words"]}},
                        {"output_type": "stream", "name": "stdout", "text": ["progress lines are not prose"]}]}]}
    path = tmp_path / "c.ipynb"
    path.write_text(json.dumps(nb))
    assert notebook_prose(path) == {"markdown": 3, "generated": 2, "total": 5}


CLAIMS = [Claim(f"o{i}", f"observation {i}", None) for i in range(3)] + \
         [Claim(f"v{i}", f"verdict {i}", True) for i in range(4)] + [Claim("x", "failed one", False)]
WHERE = ("2 more claims are recorded in `runs/results/03_x.json` and listed on this chapter's page of the course "
         "website (`python -m helpers.course site`).")


def test_the_claims_list_shows_six_failures_and_verdicts_first_and_says_where_the_rest_are():
    text = claims_markdown(CLAIMS, recorded_in="runs/results/03_x.json")
    listed, where = text.split("\n\n")
    assert listed.splitlines()[0] == "- ✗ failed one" and listed.count("- ✓") == 4
    assert listed.count("- •") == 1 and "observation 0" in listed and len(listed.splitlines()) == 6
    assert "observation 1" not in text and "observation 2" not in text and "<details>" not in text
    assert where == WHERE
    assert "more" not in claims_markdown(CLAIMS[:6]) and "recorded in" not in claims_markdown(CLAIMS[:6])
    assert "`results_path`" in claims_markdown(CLAIMS), "no path given: the parameter's name"


def test_the_website_lists_every_claim_six_open_and_the_rest_collapsed():
    page = page_claims(as_records(CLAIMS))
    open_part, hidden = page.split("<details>")
    assert open_part.startswith("**What this run showed**") and "- ✗ failed one" in open_part
    assert open_part.count("- ✓") == 4 and open_part.count("- •") == 1
    assert "2 more from this run" in hidden and hidden.count("- •") == 2
    assert all(c.text in page for c in CLAIMS)


def test_show_claims_names_the_notebooks_results_path_and_returns_every_claim(monkeypatch, tmp_path):
    shown = []
    monkeypatch.setattr("helpers.output.tables.show_md", shown.append)
    monkeypatch.setenv("COURSE_HOME", str(tmp_path))
    monkeypatch.setattr(conclusions, "notebook_results_path", lambda: "runs/results/03_x.json")
    assert show_claims(CLAIMS) == as_records(CLAIMS)
    assert shown[0].startswith("**What this run showed**\n\n- ✗ failed one") and shown[0].endswith(WHERE)
    show_claims(CLAIMS, results_path=tmp_path / "runs" / "results" / "03_x.json")
    assert shown[1] == shown[0], "a path under the course home is shown from it"
