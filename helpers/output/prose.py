"""Counts the prose a reader meets in an executed chapter: its markdown cells and the markdown its cells print.

Every word on the page counts, tables and collapsed ``<details>`` blocks included (a table's notes are read like
any sentence); only images and HTML tags are left out. A word is what the course's convention check counts: a run
of letters, digits and ``'.,%+-/_`` starting with a letter or digit, so table rules and bullets are not words.

    python -m helpers.output.prose runs/course/ci/*.ipynb
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
TAG = re.compile(r"<[^>]+>")
WORD = re.compile(r"[A-Za-z0-9][\w'.,%+\-/]*")


def prose_words(markdown: str) -> int:
    """Words in ``markdown``, tables and collapsed blocks included, images and HTML tags left out."""
    return len(WORD.findall(TAG.sub(" ", IMAGE.sub(" ", markdown))))


def notebook_prose(ipynb) -> dict:
    """``{"markdown": words in markdown cells, "generated": words in markdown outputs, "total": both}``."""
    nb = json.loads(Path(ipynb).read_text(encoding="utf-8"))
    written = sum(prose_words("".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "markdown")
    generated = sum(prose_words("".join(o.get("data", {}).get("text/markdown", "")))
                    for c in nb["cells"] for o in c.get("outputs", []))
    return {"markdown": written, "generated": generated, "total": written + generated}


def main(argv=None) -> int:
    """Print each executed notebook's prose count (the command line)."""
    for path in (argv if argv is not None else sys.argv[1:]):
        counts = notebook_prose(path)
        print(f"{Path(path).name}: {counts['total']} words ({counts['markdown']} written, "
              f"{counts['generated']} generated)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
