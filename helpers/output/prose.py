"""Counts the prose a reader meets in an executed chapter: its markdown cells and the markdown its cells print.

Tables, code blocks, images and collapsed ``<details>`` blocks (a chapter's appendix) are not prose to read
through, so they are left out; a line of words is counted as ``str.split`` counts it.

    python -m helpers.output.prose runs/course/ci/*.ipynb
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FENCE = re.compile(r"^\s*(```|~~~)")
DETAILS_OPEN, DETAILS_CLOSE = re.compile(r"<details\b", re.I), re.compile(r"</details>", re.I)
IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
TAG = re.compile(r"<[^>]+>")


def prose_words(markdown: str) -> int:
    """Words in ``markdown`` outside tables, fenced code, images, HTML tags and ``<details>`` blocks."""
    words, fenced, details = 0, False, 0
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        opened, closed = len(DETAILS_OPEN.findall(line)), len(DETAILS_CLOSE.findall(line))
        was_inside, details = details, max(0, details + opened - closed)
        if fenced or was_inside or opened or line.lstrip().startswith("|"):
            continue
        words += len(TAG.sub(" ", IMAGE.sub(" ", line)).split())
    return words


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
