"""The README is a start page and every page it leads to is there (issue 44): README.md at most 120 lines,
docs/ and INSTRUCTOR.md present, every relative link in README.md, INSTRUCTOR.md, docs/*.md, the chapters'
appendices (docs/appendix/*.md) and the notebooks' markdown cells resolving to a file (and a ``#anchor`` to one of
that file's headings, slugged as GitHub does), and the README's test command the one ``.ci/run`` runs."""

import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 120
APPENDICES = sorted((REPO / "docs" / "appendix").glob("*.md"))
PAGES = [REPO / "README.md", REPO / "INSTRUCTOR.md", *sorted((REPO / "docs").glob("*.md")), *APPENDICES]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
FENCE = re.compile(r"^```.*?^```", re.S | re.M)   # a fenced code block
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (links there are not links)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and code marks dropped) lower-cased, punctuation other
    than '-' and '_' removed, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The relative link targets of a markdown page or a notebook's markdown cells (web, mail, ... left out)."""
    text = path.read_text() if path.suffix != ".ipynb" else "\n\n".join(
        c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    return [t for t in LINK.findall(prose(text)) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def shown(path: Path) -> str:
    """A path as the message shows it: from the repository's root when inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def broken(page: Path, target: str) -> str | None:
    """Why ``target`` (a link on ``page``) does not resolve, or None."""
    file, _, anchor = target.partition("#")
    dest = (page.parent / file).resolve() if file else page
    if not dest.exists():
        return f"{target}: no file {shown(dest)}"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{target}: no heading '#{anchor}' in {shown(dest)}"
    return None


def test_slug_is_githubs():
    assert slug("Running on 8 GPUs/NPUs") == "running-on-8-gpusnpus"
    assert slug("How a job runs: `%%ranks` cells") == "how-a-job-runs-ranks-cells"
    assert slug("Multi-node, Slurm, and one shared server") == "multi-node-slurm-and-one-shared-server"
    assert slug("Checking the room's setup in a browser") == "checking-the-rooms-setup-in-a-browser"


def test_broken_links_are_found(tmp_path):
    (tmp_path / "b.md").write_text("# Some title\n\n## Part two\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#part-two) [gone](c.md) [bad](b.md#part-three) `[code](d.md)` "
                    "[web](https://x.org)\n")
    found = {t: broken(page, t) for t in links(page)}
    assert set(found) == {"b.md#part-two", "c.md", "b.md#part-three"}
    assert found["b.md#part-two"] is None and found["c.md"] and found["b.md#part-three"]


def test_readme_is_a_start_page():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_docs_and_instructor_guide_exist():
    assert (REPO / "INSTRUCTOR.md").is_file()
    docs = sorted((REPO / "docs").glob("*.md"))
    assert docs, "docs/ holds the guides the README links"
    index = (REPO / "README.md", REPO / "docs" / "README.md")
    linked = {(p.parent / t.partition("#")[0]).resolve() for p in index for t in links(p)
              if t.partition("#")[0]}
    assert not [d.name for d in docs + APPENDICES if d.name != "README.md" and d.resolve() not in linked], \
        "every docs/ page and chapter appendix is linked from README.md or docs/README.md"


def test_each_appendix_links_back_to_its_chapter_and_the_chapter_to_it():
    for page in APPENDICES:
        chapter = REPO / "notebooks" / f"{page.stem}.ipynb"
        assert chapter.is_file(), f"{shown(page)}: no chapter {page.stem}.ipynb"
        assert f"../../notebooks/{chapter.name}" in links(page), f"{shown(page)} links back to its chapter"
        assert any(t.partition("#")[0] == f"../docs/appendix/{page.name}" for t in links(chapter)), \
            f"{chapter.name} links to its appendix"


@pytest.mark.parametrize("page", PAGES + NOTEBOOKS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    bad = [why for t in links(page) if (why := broken(page, t))]
    assert not bad, f"{shown(page)}: " + "; ".join(bad)


def test_readme_has_the_test_command_ci_runs():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index("# The README's test command:") + 1].strip()
    assert command in (REPO / "README.md").read_text()
