"""The course as a website: a course run's executed notebooks, the README, INSTRUCTOR.md and docs/ in one static site.

    build_site(run_dir) -> SiteBuild        (python -m helpers.course site [--preset ci])

Sphinx + myst-nb render the notebooks' stored outputs (``nb_execution_mode = "off"``: nothing is executed again);
ARCHITECTURE.md says why this tool. The pages are laid out as in the repository (README.md becomes the start page),
so the relative links between them resolve as they do on GitHub; a link to another file of the repository copies that
file into the site, one that cannot be followed (a folder, a missing file) keeps its text without the link and is
listed in ``SiteBuild.dropped``. The site's source (with the generated ``conf.py``) is ``<run_dir>/.site/src``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import posixpath
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.core.errors import DataError
from helpers.core.paths import code_root
from helpers.output.claims import HEADING, page_claims

START_PAGES = ("README.md", "INSTRUCTOR.md")            # with docs/*.md: the pages every site has
DOC_PAGES = ("docs/*.md", "docs/appendix/*.md")        # the guides, and each chapter's appendix for experts
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)\)")   # [label](target), ![alt](target)
CODE = re.compile(r"(^(?:```|~~~).*?^(?:```|~~~)[^\n]*$|`[^`\n]*`)", re.DOTALL | re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
ALT_FILE = "_alt_texts.json"                          # figures' alt texts by PNG sha256, read by ``setup``
CHAPTER_GLOB = "[0-9][0-9]_*.ipynb"
ANSI = re.compile(r"\x1b\[[0-9;]*m")                    # Sphinx colours its warnings


@dataclass
class SiteBuild:
    """What one build made: the start page, its seconds, Sphinx's warnings and the links it could not keep."""

    index: Path
    seconds: float
    chapters: list[str]
    warnings: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def link_targets(text: str) -> list[str]:
    """The targets of the markdown links of ``text`` outside code."""
    return [m.group(3) for part in prose_parts(text)[::2] for m in LINK.finditer(part)]


def prose_parts(text: str) -> list[str]:
    """``text`` split at code: even items are prose, odd items fenced blocks or inline code (links there stay)."""
    return CODE.split(text)


def repo_path(target: str, from_rel: str) -> tuple[str, str] | None:
    """A link target as (path from the repository root, '#anchor' or ''), or None when it leaves the repository,
    is a URL, or is an anchor of the same page."""
    if SCHEME.match(target) or target.startswith(("#", "/")):
        return None
    path, _, anchor = target.partition("#")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(from_rel), path))
    return (None if joined.startswith("..") else (joined, f"#{anchor}" if anchor else ""))


def repo_pages(repo: Path) -> dict[str, str]:
    """The markdown pages of the site, repository path -> site path: README.md (as index.md), INSTRUCTOR.md,
    docs/*.md, the chapters' appendices (docs/appendix/*.md) and every repository page they link to, and so on."""
    todo = [p for p in START_PAGES if (repo / p).is_file()]
    todo += [p.relative_to(repo).as_posix() for pattern in DOC_PAGES for p in sorted(repo.glob(pattern))]
    pages: dict[str, str] = {}
    while todo:
        rel = todo.pop(0)
        if rel in pages:
            continue
        pages[rel] = "index.md" if rel == "README.md" else rel
        for target in link_targets((repo / rel).read_text(encoding="utf-8")):
            found = repo_path(target, rel)
            if found and found[0].endswith(".md") and (repo / found[0]).is_file():
                todo.append(found[0])
    return pages


def rewrite_links(text: str, from_rel: str, to_rel: str, site: dict[str, str], repo: Path,
                  copies: set[str], dropped: list[str]) -> str:
    """``text`` (the page ``from_rel``, written at ``to_rel``) with each repository link pointing into the site:
    a page or chapter at its site path, another file copied (added to ``copies``), anything else unlinked."""
    here = posixpath.dirname(to_rel) or "."

    def one(m: re.Match) -> str:
        bang, label, target = m.groups()
        found = repo_path(target, from_rel)
        if found is None:
            return m.group(0)
        path, anchor = found
        if path in site:
            dest = site[path]
        elif (repo / path).is_file() and not path.endswith((".md", ".ipynb")):
            copies.add(path)
            dest = path
        else:
            dropped.append(f"{from_rel}: {target}")
            return label if not bang else ""
        return f"{bang}[{label}]({posixpath.relpath(dest, here)}{anchor})"

    parts = prose_parts(text)
    return "".join(LINK.sub(one, p) if i % 2 == 0 else p for i, p in enumerate(parts))


def results_html(values, href: str | None) -> str:
    """A chapter's recorded results in its page: a link to the JSON file and the values in a collapsed block."""
    link = f'<p>Recorded results: <a href="{href}">{html.escape(href.rsplit("/", 1)[-1])}</a></p>' if href else ""
    body = html.escape(json.dumps(values, indent=1))
    return f"{link}<details><summary>The recorded values</summary><pre>{body}</pre></details>"


def prepare_notebook(src: Path, dest: Path, results_href: str | None) -> dict[str, str]:
    """Copy an executed notebook for the site, its results display made a link and a collapsed block (the dict the
    recording call returned, the same values again, left out) and its claims list made whole (``all_claims``);
    returns its figures' alt texts by the sha256 of each PNG (the name myst-nb gives the image file)."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    alts = {}
    for cell in nb.get("cells", []):
        outputs = cell.get("outputs", [])
        for out in outputs:
            data = out.get("data", {})
            alt = out.get("metadata", {}).get("image/png", {}).get("alt")
            if "image/png" in data and alt:
                png = base64.b64decode("".join(data["image/png"]))
                alts[hashlib.sha256(png).hexdigest()] = alt
            if "application/json" in data:
                all_claims(outputs, data["application/json"].get("claims"))
                out["data"] = {"text/html": results_html(data["application/json"], results_href)}
                out.get("metadata", {}).pop("application/json", None)
                cell["outputs"] = [o for o in outputs if o.get("output_type") != "execute_result"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(nb), encoding="utf-8")
    return alts


def all_claims(outputs: list[dict], claims: list[dict] | None) -> None:
    """The notebook shows a chapter's first claims; its page on the site lists every recorded one (in place)."""
    for out in outputs if claims else []:
        if "".join(out.get("data", {}).get("text/markdown", "")).startswith(HEADING):
            out["data"] = {"text/markdown": page_claims(claims)}


HANDOUT_LINK = re.compile(r'href="\.\./([^"#:]+)\.md(#[^"]*)?"')   # a chapter's link to a page, from notebooks/


def handout_links(body: str) -> str:
    """A handout's links to repository pages (``../docs/x.md``, from notebooks/) made links into ``site/``."""
    def one(m: re.Match) -> str:
        page = "index" if m.group(1) == "README" else m.group(1)
        return f'href="site/{page}.html{m.group(2) or ""}"'

    return HANDOUT_LINK.sub(one, body)


def run_page(run_dir: Path, chapters: list[str]) -> str:
    """The page of this course run: per chapter its status, time, peak memory and a link to its results JSON."""
    summary = run_dir / "summary.json"
    runs = {r["stem"]: r for r in json.loads(summary.read_text())} if summary.is_file() else {}
    rows = ["| chapter | status | time | peak host memory | recorded results |", "|---|---|---|---|---|"]
    for stem in chapters:
        r = runs.get(stem, {})
        status = "✓ ok" if r.get("ok", True) else f"✗ failed: {r.get('error', '')}"
        res = run_dir / "results" / f"{stem}.json"
        held = claims_line(json.loads(res.read_text())) if res.is_file() else ""
        link = f'<a href="results/{stem}.json">{stem}.json</a>{held}' if res.is_file() else "(none recorded)"
        seconds = f"{r['seconds']:.0f} s" if "seconds" in r else "-"
        memory = f"{r['peak_host_mb']:.0f} MB" if r.get("peak_host_mb") else "-"
        rows.append(f"| [{stem}](notebooks/{stem}.ipynb) | {status} | {seconds} | {memory} | {link} |")
    total = sum(r.get("seconds", 0) for r in runs.values())
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime((summary if summary.is_file() else run_dir).stat().st_mtime))
    head = (f"# This course run\n\nThe executed notebooks of `{run_dir.name}` ({when}"
            + (f", {total:.0f} s in all" if runs else "") + "), shown with their outputs as they ran.\n\n")
    return head + "\n".join(rows) + "\n"


def claims_line(results: dict) -> str:
    """' (n claims: h held, f failed)' for a results dict with claims, else ''."""
    claims = results.get("claims") or []
    if not claims:
        return ""
    held = sum(c.get("holds") is True for c in claims)
    failed = sum(c.get("holds") is False for c in claims)
    return f" ({len(claims)} claims: {held} held" + (f", {failed} failed" if failed else "") + ")"


def toctree(caption: str, docs: list[str]) -> str:
    """A hidden toctree block (the site's navigation) of ``docs`` (site paths, suffix dropped)."""
    if not docs:
        return ""
    entries = "\n".join(str(Path(d).with_suffix("")) for d in docs)
    return f"\n\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{entries}\n```\n"


CONF = '''# Written by helpers.output.site (python -m helpers.course site): the course website's Sphinx configuration.
project = {title!r}
html_title = {title!r}
root_doc = "index"
extensions = ["myst_nb"]
nb_execution_mode = "off"        # the course run's stored outputs; nothing is executed again
myst_heading_anchors = 4         # links such as INSTRUCTOR.md#a-one-day-agenda
html_theme = "sphinx_book_theme"
html_theme_options = {{"show_navbar_depth": 1, "use_download_button": True, "show_toc_level": 2,
                      "footer_content_items": []}}   # no author, copyright or date line
html_extra_path = ["_extra"]     # results/<chapter>.json at the site's root
exclude_patterns = ["_extra", "{alts}"]
html_show_sourcelink = False
html_last_updated_fmt = None
suppress_warnings = ["misc.highlighting_failure"]   # a shell block with <placeholders> is shown unhighlighted
from helpers.output.site import setup  # noqa: E402,F401  (figures' alt texts)
'''


def setup(app) -> dict:
    """Sphinx hook of the generated conf.py: each notebook figure gets its alt text (myst-nb keeps none)."""
    def add_alts(app, doctree):
        path = Path(app.srcdir) / ALT_FILE
        alts = json.loads(path.read_text()) if path.is_file() else {}
        from docutils import nodes

        for node in doctree.findall(nodes.image):
            alt = alts.get(Path(node.get("uri", "")).stem)
            if alt and not node.get("alt"):
                node["alt"] = alt

    app.connect("doctree-read", add_alts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def chapters_of(run_dir: Path) -> list[Path]:
    """The executed chapter notebooks of a course run, in order; a DataError naming the folder when none."""
    found = sorted(run_dir.glob(CHAPTER_GLOB))
    if not found:
        there = ", ".join(sorted(p.name for p in run_dir.parent.glob("*") if any(p.glob(CHAPTER_GLOB)))) or "none"
        raise DataError(f"no executed chapter notebook ({CHAPTER_GLOB}) in {run_dir}: run "
                        f"`python -m helpers.course run --preset <preset>` first (course runs there: {there})")
    return found


def write_sources(run_dir: Path, src: Path, repo: Path) -> tuple[list[str], list[str]]:
    """Lay out the site's source in ``src``: pages, chapters, results, conf.py; returns (chapters, dropped links)."""
    notebooks = chapters_of(run_dir)
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    pages = repo_pages(repo)
    site = {**pages, **{f"notebooks/{p.name}": f"notebooks/{p.name}" for p in notebooks}}
    copies: set[str] = set()
    dropped: list[str] = []
    for rel, to in pages.items():
        text = rewrite_links((repo / rel).read_text(encoding="utf-8"), rel, to, site, repo, copies, dropped)
        if to == "index.md":
            text += nav(pages, notebooks)
        (src / to).parent.mkdir(parents=True, exist_ok=True)
        (src / to).write_text(text, encoding="utf-8")
    for rel in copies:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, src / rel)
    alts = {}
    for nb in notebooks:
        res = run_dir / "results" / f"{nb.stem}.json"
        if res.is_file():
            (src / "_extra" / "results").mkdir(parents=True, exist_ok=True)
            shutil.copy2(res, src / "_extra" / "results" / res.name)
        alts.update(prepare_notebook(nb, src / "notebooks" / nb.name,
                                     f"../results/{nb.stem}.json" if res.is_file() else None))
    (src / "run.md").write_text(run_page(run_dir, [p.stem for p in notebooks]), encoding="utf-8")
    (src / ALT_FILE).write_text(json.dumps(alts))
    title = (repo / "README.md").read_text(encoding="utf-8").splitlines()[0].lstrip("# ").split(":")[0]
    (src / "conf.py").write_text(CONF.format(title=title or "The course", alts=ALT_FILE), encoding="utf-8")
    return [p.stem for p in notebooks], dropped


def nav(pages: dict[str, str], notebooks: list[Path]) -> str:
    """The start page's navigation: chapters, their appendices, guides (INSTRUCTOR.md, docs/), the rest, this run."""
    appendices = [to for rel, to in pages.items() if rel.startswith("docs/appendix/")]
    guides = [to for rel, to in pages.items()
              if to not in appendices and (rel == "INSTRUCTOR.md" or rel.startswith("docs/"))]
    rest = [to for to in pages.values() if to not in guides + appendices and to != "index.md"]
    return (toctree("Chapters", [f"notebooks/{p.name}" for p in notebooks]) + toctree("Appendices", appendices)
            + toctree("Guides", guides) + toctree("Reference", rest) + toctree("This run", ["run.md"]))


def build_site(run_dir: str | Path, out: str | Path | None = None, repo: str | Path | None = None) -> SiteBuild:
    """Build the website of the course run in ``run_dir`` into ``out`` (default ``<run_dir>/site``)."""
    run_dir = Path(run_dir)
    repo = Path(repo) if repo else code_root()
    out = Path(out) if out else run_dir / "site"
    t0 = time.monotonic()
    work = run_dir / ".site"
    chapters, dropped = write_sources(run_dir, work / "src", repo)
    from sphinx.application import Sphinx  # after the checks: a run with no notebook fails without it
    from sphinx.util.docutils import docutils_namespace, patch_docutils

    for stale in ("html", "jupyter_execute"):   # myst-nb writes its images to <outdir>/../jupyter_execute
        shutil.rmtree(work / stale, ignore_errors=True)
    warnings = io.StringIO()
    with patch_docutils(str(work / "src")), docutils_namespace():   # as sphinx-build: a second build is clean
        app = Sphinx(str(work / "src"), str(work / "src"), str(work / "html"), str(work / "doctrees"), "html",
                     status=None, warning=warnings, freshenv=True, keep_going=True)
        app.build(force_all=True)
    if out.exists():
        shutil.rmtree(out)
    shutil.move(work / "html", out)
    lines = [ANSI.sub("", w) for w in warnings.getvalue().splitlines() if w.strip()]
    return SiteBuild(out / "index.html", time.monotonic() - t0, chapters, lines, dropped)
