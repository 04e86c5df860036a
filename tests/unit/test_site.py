"""The course website (helpers.output.site): links between the repository's pages rewritten into the site, a chapter's
figures and results, and a build of the real README, INSTRUCTOR.md and docs/ around tiny fake executed chapters
with every internal link checked in the HTML (tests/browser/test_website.py does it in Chromium on the real chapters)."""

import base64
import io
import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

from helpers import course
from helpers.conclusions import Claim, as_records, claims_markdown
from helpers.output.site import handout_links, prepare_notebook, repo_pages, rewrite_links

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")   # Sphinx 11's, in the themes

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CLAIMS = [Claim(f"c{i}", f"claim number {i} held", True) for i in range(8)]


def tiny_png(shade: int = 0) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (12, 8), (200, 30, shade)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def fake_executed(path: Path, stem: str, png: str) -> None:
    """An executed chapter as papermill leaves it: a title, a figure with its alt text, the claims (the first six and
    where the rest are) and the recorded results shown; a link to its appendix when it has one, as the chapters do."""
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"}})
    alt = f"Figure: {stem}, loss against step"
    figure = nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": alt,
                                                          "text/markdown": f"![{alt}](data:image/png;base64,{png})"},
                                    metadata={"image/png": {"alt": alt}})
    claims = nbformat.v4.new_output("display_data", data={
        "text/markdown": "**What this run showed**\n\n" + claims_markdown(CLAIMS, recorded_in=f"results/{stem}.json"),
        "text/plain": "<IPython.core.display.Markdown object>"})
    shown = nbformat.v4.new_output("display_data", data={"application/json": {"steps": 4,
                                                                              "claims": as_records(CLAIMS)},
                                                         "text/plain": "<IPython.core.display.JSON object>"},
                                   metadata={"application/json": {"expanded": True, "root": "root"}})
    returned = nbformat.v4.new_output("execute_result", data={"text/plain": "{'steps': 4}"}, execution_count=2)
    appendix = REPO / "docs" / "appendix" / f"{stem}.md"
    details = (f"\n\nDetails for experts: [appendix](../docs/appendix/{stem}.md#errata-of-the-source-blog)."
               if appendix.is_file() else "")
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {stem}\n\nWhat you will see.\n\n## Section one\n\nText.{details}"),
                nbformat.v4.new_code_cell("ch.plot()", execution_count=1, outputs=[figure]),
                nbformat.v4.new_code_cell("record_results(...)", execution_count=2,
                                          outputs=[claims, shown, returned])]
    nbformat.write(nb, path)


def test_links_of_the_repository_pages_point_into_the_site(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "helpers").mkdir()
    (tmp_path / "data.json").write_text("{}")
    (tmp_path / "NOTES.md").write_text("# Notes\n\nBack to [start](README.md#top).\n")
    (tmp_path / "INSTRUCTOR.md").write_text("# Instructor\n")
    (tmp_path / "docs" / "a.md").write_text("# A\n\n[home](../README.md) and [agenda](../INSTRUCTOR.md#agenda)\n")
    readme = ("# Course\n\n[00](notebooks/00_x.ipynb), [A](docs/a.md#part), [notes](NOTES.md), [data](data.json),\n"
              "[code](helpers/), [gone](missing.txt), [web](https://example.org/a.md), [here](#chapters).\n\n"
              "```\n[not a link](docs/a.md)\n```\n\nIn code: `[x](helpers/)`.\n")
    (tmp_path / "README.md").write_text(readme)
    pages = repo_pages(tmp_path)
    assert pages == {"README.md": "index.md", "INSTRUCTOR.md": "INSTRUCTOR.md", "docs/a.md": "docs/a.md",
                     "NOTES.md": "NOTES.md"}      # NOTES.md: linked from the README, so it is a page too
    site = {**pages, "notebooks/00_x.ipynb": "notebooks/00_x.ipynb"}
    copies, dropped = set(), []
    text = rewrite_links(readme, "README.md", "index.md", site, tmp_path, copies, dropped)
    assert "[00](notebooks/00_x.ipynb)" in text and "[A](docs/a.md#part)" in text and "[data](data.json)" in text
    assert "[web](https://example.org/a.md)" in text and "[here](#chapters)" in text
    assert "\ncode, gone, [web]" in text                       # a folder and a missing file: their text, unlinked
    assert "[not a link](docs/a.md)" in text and "`[x](helpers/)`" in text     # code is left as it is
    assert copies == {"data.json"} and dropped == ["README.md: helpers/", "README.md: missing.txt"]
    back = rewrite_links((tmp_path / "docs" / "a.md").read_text(), "docs/a.md", "docs/a.md", site, tmp_path, copies,
                         dropped)
    assert "[home](../index.md)" in back and "[agenda](../INSTRUCTOR.md#agenda)" in back


def test_a_chapter_keeps_its_figures_alt_text_and_links_its_results(tmp_path):
    png = tiny_png()
    fake_executed(tmp_path / "00_x.ipynb", "00_x", png)
    alts = prepare_notebook(tmp_path / "00_x.ipynb", tmp_path / "site" / "00_x.ipynb", "../results/00_x.json")
    import hashlib

    assert alts == {hashlib.sha256(base64.b64decode(png)).hexdigest(): "Figure: 00_x, loss against step"}
    outputs = json.loads((tmp_path / "site" / "00_x.ipynb").read_text())["cells"][2]["outputs"]
    assert len(outputs) == 2, "the dict record_results returned is the same values: left out"
    listed, shown = outputs
    page = listed["data"]["text/markdown"]
    assert all(c.text in page for c in CLAIMS), "the website lists every recorded claim"
    assert "2 more from this run" in page and "recorded in" not in page
    assert list(shown["data"]) == ["text/html"]
    assert '<a href="../results/00_x.json">00_x.json</a>' in shown["data"]["text/html"]
    assert "&quot;steps&quot;: 4" in shown["data"]["text/html"] and "<details>" in shown["data"]["text/html"]


def test_a_handouts_links_to_the_repositorys_pages_lead_to_the_runs_website():
    body = ('<a href="../docs/appendix/03_x.md#errata-of-the-source-blog">appendix</a> <a href="../README.md">start</a> '
            '<a href="https://example.org/a.md">web</a> <a href="#here">here</a>')
    assert handout_links(body) == ('<a href="site/docs/appendix/03_x.html#errata-of-the-source-blog">appendix</a> '
                                   '<a href="site/index.html">start</a> <a href="https://example.org/a.md">web</a> '
                                   '<a href="#here">here</a>')


class Links(HTMLParser):
    """The hrefs, image sources and element ids of one HTML page."""

    def __init__(self):
        super().__init__()
        self.hrefs, self.images, self.ids = [], [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag == "img":
            self.images.append(a)


def parse(page: Path) -> Links:
    links = Links()
    links.feed(page.read_text(encoding="utf-8"))
    return links


def dead_links(site: Path) -> list[str]:
    """Every internal link of every page of ``site`` whose file or anchor is missing."""
    dead, parsed = [], {}
    for page in sorted(site.rglob("*.html")):
        for href in parse(page).hrefs:
            url = urlsplit(href)
            if url.scheme or url.netloc:
                continue
            target = (page.parent / unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                dead.append(f"{page.relative_to(site)}: {href}")
            elif url.fragment and target.suffix == ".html":
                ids = parsed.setdefault(target, parse(target).ids)
                if unquote(url.fragment) not in ids:
                    dead.append(f"{page.relative_to(site)}: {href} (no such anchor)")
    return dead


def test_the_real_pages_and_fake_chapters_build_with_no_dead_link(tmp_path, capsys):
    run = tmp_path / "ci"
    (run / "results").mkdir(parents=True)
    for i, stem in enumerate(CHAPTERS):
        fake_executed(run / f"{stem}.ipynb", stem, tiny_png(i))
        (run / "results" / f"{stem}.json").write_text(json.dumps({"steps": 4, "claims": [{"holds": True}]}))
    (run / "summary.json").write_text(json.dumps([{"stem": CHAPTERS[0], "ok": True, "seconds": 80.0,
                                                   "peak_host_mb": 3900.0}]))
    assert course.main(["site", "--run", str(run)]) == 0
    said = capsys.readouterr().out
    assert "The course as a website (5 chapters" in said and "link dropped" not in said
    assert "WARNING" not in said, said                     # Sphinx's warnings are printed: there must be none
    site = run / "site"
    assert not dead_links(site), dead_links(site)
    for stem in CHAPTERS:
        appendix = REPO / "docs" / "appendix" / f"{stem}.md"
        if appendix.is_file():
            assert f"../docs/appendix/{stem}.html#errata-of-the-source-blog" in parse(
                site / "notebooks" / f"{stem}.html").hrefs, "a chapter's link to its appendix leads into the site"
            assert f"../../notebooks/{stem}.html" in parse(site / "docs" / "appendix" / f"{stem}.html").hrefs
    start = parse(site / "index.html").hrefs
    assert all(f"notebooks/{stem}.html" in start for stem in CHAPTERS)      # the README's chapter table
    assert "INSTRUCTOR.html#a-one-day-agenda" in start and "docs/presets.html#what-your-machine-needs" in start
    for stem in CHAPTERS:
        page = site / "notebooks" / f"{stem}.html"
        images = parse(page).images
        figures = [i["alt"] for i in images if i["src"].startswith("../_images/")]
        assert figures == [f"Figure: {stem}, loss against step"]
        assert '<a href="../results/' + stem + '.json">' in page.read_text(encoding="utf-8")
        assert json.loads((site / "results" / f"{stem}.json").read_text())["steps"] == 4
    run_page = (site / "run.html").read_text(encoding="utf-8")
    assert "✓ ok" in run_page and "80 s" in run_page and "(1 claims: 1 held)" in run_page
    assert (site / "search.html").is_file() and (site / "searchindex.js").is_file()
