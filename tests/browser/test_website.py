"""The course as a website, in a real browser: the site built from executed ``ci`` chapters (helpers.output.site),
served over HTTP on 127.0.0.1 and walked in headless Chromium from its start page: every internal link is followed
(no 404, no missing anchor, nothing fetched from another host), each chapter's figures are loaded images, and the
search page finds a chapter.

The chapters are the ones this session's chapter tests executed (tests/notebooks/test_chNN.py hand them over;
this test is put after them and waits for them to end); without those, a course run's ``runs/course/ci`` (a copy);
else it is skipped, saying how to get them.
"""

from __future__ import annotations

import functools
import json
import shutil
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

import pytest

from helpers.output.site import build_site
from tests.browser.chromium import launch
from tests.notebooks.chapter_run import BASETEMP, CHAPTER_TESTS, finished_marker, handoff_dir

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

REPO = Path(__file__).resolve().parents[2]
COURSE_RUN = REPO / "runs" / "course" / "ci"
WAIT_FOR_CHAPTERS_S = 3600     # the chapter tests, two at a time on 2 cores, take ~12 min; this test is put last
MAX_PAGES = 200


def figures_in(ipynb: Path) -> int:
    """How many figures (image/png outputs) an executed notebook holds."""
    nb = json.loads(ipynb.read_text(encoding="utf-8"))
    return sum("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))


@pytest.fixture(scope="module")
def executed_course(request, tmp_path_factory):
    """A folder of executed ci chapters with their results: this session's chapter tests', else a course run's."""
    chapter_tests = request.config.stash.get(CHAPTER_TESTS, [])
    if chapter_tests:
        basetemp = request.config.stash[BASETEMP]
        deadline = time.monotonic() + WAIT_FOR_CHAPTERS_S
        while not all(finished_marker(basetemp, n).exists() for n in chapter_tests):
            if time.monotonic() > deadline:
                pytest.fail(f"the chapter tests of this session did not end within {WAIT_FOR_CHAPTERS_S} s")
            time.sleep(5)
        folder = handoff_dir(basetemp)
        if not list(folder.glob("[0-9][0-9]_*.ipynb")):
            pytest.skip("this session's chapter tests left no executed notebook (none ran to its end: see them)")
        return folder
    # the chapters that ran to their end (a chapter being run has no results file yet)
    done = [p for p in sorted(COURSE_RUN.glob("[0-9][0-9]_*.ipynb"))
            if (COURSE_RUN / "results" / f"{p.stem}.json").is_file()]
    if done:
        copy = tmp_path_factory.mktemp("course-run") / "ci"
        (copy / "results").mkdir(parents=True)
        for nb in done:
            shutil.copy2(nb, copy / nb.name)
            shutil.copy2(COURSE_RUN / "results" / f"{nb.stem}.json", copy / "results" / f"{nb.stem}.json")
        return copy
    pytest.skip("no executed ci chapters: run the chapter tests in the same session "
                "(`pytest tests/notebooks tests/browser/test_website.py`) or `python -m helpers.course run --preset ci`")


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture()
def served_site(executed_course, tmp_path):
    """The website built from ``executed_course``, served on 127.0.0.1 (a free port) for the length of a test."""
    built = build_site(executed_course, out=tmp_path / "site")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path / "site")))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield built, f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


PAGE_JS = """async () => {
  const imgs = [...document.querySelectorAll('img')];
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => i.decode().catch(() => null)));
  return {
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id)
           .concat([...document.querySelectorAll('a[name]')].map(a => a.name)),
    images: [...document.querySelectorAll('article img, main img')].map(i => ({src: i.currentSrc || i.src,
             alt: i.alt, width: i.naturalWidth, complete: i.complete})),
  };
}"""


def crawl(page, start: str) -> tuple[dict, list[str]]:
    """Every page reachable from ``start`` by internal links: {url: what PAGE_JS saw}, and the broken links."""
    origin = urlsplit(start).netloc
    seen, todo, broken, files = {}, [start], [], {}
    wanted: list[tuple[str, str, str]] = []        # (from page, page url, anchor)
    while todo and len(seen) < MAX_PAGES:
        url = todo.pop(0)
        if url in seen:
            continue
        response = page.goto(url, wait_until="load")
        if response is None or response.status != 200:
            broken.append(f"{url}: HTTP {response.status if response else 'no response'}")
            seen[url] = {"links": [], "ids": [], "images": []}
            continue
        seen[url] = info = page.evaluate(PAGE_JS)
        for link in info["links"]:
            target, anchor = urldefrag(link)
            parts = urlsplit(target)
            if parts.scheme not in ("http", "https") or parts.netloc != origin:
                continue
            target = parts._replace(query="").geturl()
            if target.endswith((".html", "/")):
                todo.append(target)
                if anchor:
                    wanted.append((url, target, anchor))
            elif target not in files:
                files[target] = page.request.get(target).status
    broken += [f"{f}: HTTP {status}" for f, status in files.items() if status != 200]
    broken += [f"{src} -> {target}#{anchor}: no such anchor" for src, target, anchor in wanted
               if target in seen and anchor not in seen[target]["ids"]]
    return seen, broken


def test_the_course_website_has_no_dead_link_and_shows_every_figure(chromium, executed_course, served_site, tmp_path):
    from playwright.sync_api import sync_playwright

    built, base = served_site
    assert not built.warnings, built.warnings
    # a link is dropped only when it names a chapter this run does not have (its text stays)
    absent = [d for d in built.dropped if not any(d.endswith(f"notebooks/{c}.ipynb") for c in built.chapters)
              and "notebooks/" in d]
    assert sorted(absent) == sorted(built.dropped), built.dropped
    t0 = time.monotonic()
    with sync_playwright() as pw:
        browser = launch(pw, chromium, tmp_path / "browser-home")
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            failed, elsewhere = [], []
            page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.url}: HTTP {r.status}"))
            page.on("requestfailed", lambda r: failed.append(f"{r.url}: {r.failure}"))
            page.on("request", lambda r: urlsplit(r.url).scheme in ("http", "https")
                    and not r.url.startswith(base) and elsewhere.append(r.url))
            pages, broken = crawl(page, base + "index.html")
            page.goto(base + "search.html?q=accumulation")
            page.wait_for_selector("#search-results ul.search li", timeout=30_000)
            # Sphinx's search fetches each hit's page for its summary; leaving before they end aborts them
            page.wait_for_function("document.querySelector('#search-results .search-summary')"
                                   "?.innerText.startsWith('Search finished')", timeout=30_000)
            page.wait_for_load_state("networkidle")
            hits = page.locator("#search-results ul.search li a").all_inner_texts()
            page.goto(base + "notebooks/" + built.chapters[-1] + ".html")
            page.screenshot(path=str(tmp_path / "site_chapter.png"))
        finally:
            browser.close()
    report = {"pages": len(pages), "chapters": built.chapters, "build_s": round(built.seconds, 1),
              "walk_s": round(time.monotonic() - t0, 1)}
    print(json.dumps(report))

    assert not broken, "dead internal links:\n" + "\n".join(broken)
    assert not failed, "requests that failed:\n" + "\n".join(failed)
    assert not elsewhere, f"the site fetched from another host (it must work offline): {elsewhere[:5]}"
    assert len(pages) >= 10 + len(built.chapters), sorted(pages)
    for stem in built.chapters:
        url = base + f"notebooks/{stem}.html"
        assert url in pages, f"no link reaches chapter {stem}"
        images = [i for i in pages[url]["images"] if "/_images/" in i["src"]]
        expected = figures_in(executed_course / f"{stem}.ipynb")
        assert expected >= 1, f"{stem}: the executed notebook holds no figure"
        assert len(images) >= expected, f"{stem}: {len(images)} figure images on its page, {expected} in the notebook"
        not_loaded = [i["src"] for i in images if not (i["complete"] and i["width"] > 0)]
        assert not not_loaded, f"{stem}: figures that did not load: {not_loaded}"
        assert all(i["alt"] for i in images), f"{stem}: a figure without its alt text"
    assert hits, "the search page found nothing for 'accumulation'"
