"""Prose counting (helpers.output.prose) and the claims list a chapter ends with (six open, verdicts first)."""

import json

from helpers.conclusions import Claim, claims_markdown
from helpers.output.prose import notebook_prose, prose_words


def test_prose_leaves_out_tables_code_images_tags_and_collapsed_blocks():
    text = ("## Two words\n\n| a | b |\n|---|---|\n```\ncode here\n```\n![Figure: x y](data:png)\n"
            "<details><summary>appendix words</summary>\n\nmany more words here\n\n</details>\none <b>two</b>")
    assert prose_words(text) == 3 + 2     # '## Two words' and 'one two'


def test_a_notebook_counts_its_markdown_cells_and_its_markdown_outputs(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "source": ["three words here"]},
                    {"cell_type": "code", "source": ["x"], "outputs": [
                        {"output_type": "display_data", "data": {"text/markdown": ["two words"]}},
                        {"output_type": "stream", "name": "stdout", "text": ["progress lines are not prose"]}]}]}
    path = tmp_path / "c.ipynb"
    path.write_text(json.dumps(nb))
    assert notebook_prose(path) == {"markdown": 3, "generated": 2, "total": 5}


def test_the_claims_list_shows_six_failures_and_verdicts_first_and_collapses_the_rest():
    claims = [Claim(f"o{i}", f"observation {i}", None) for i in range(3)] + \
             [Claim(f"v{i}", f"verdict {i}", True) for i in range(4)] + [Claim("x", "failed one", False)]
    text = claims_markdown(claims)
    open_part, hidden = text.split("<details>")
    assert open_part.splitlines()[0] == "- ✗ failed one" and open_part.count("- ✓") == 4
    assert open_part.count("- •") == 1 and "2 more from this run" in hidden and hidden.count("- •") == 2
    assert prose_words(text) < prose_words(claims_markdown(claims, shown=100))
    assert "<details>" not in claims_markdown(claims[:6])
