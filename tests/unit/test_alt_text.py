"""Every figure a chapter shows carries a one-line description: alt text in the notebook and in its HTML handout.

The kernel test executes a tiny notebook for real (nbclient, the environment's python3 kernel) and exports it with
nbconvert's HTMLExporter, as ``helpers.course`` does for the handouts; a control notebook that does not import the
course's helpers shows what nbconvert does without them (a placeholder alt text and a warning)."""

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from bs4 import BeautifulSoup  # noqa: E402
from nbconvert import HTMLExporter  # noqa: E402
from nbconvert.filters.markdown import markdown2html  # noqa: E402

from helpers.output.plots import (class_heatmaps, describe, figure_bundle, loss_per_rank,  # noqa: E402
                                  markdown_image, per_strategy_curves, set_description, strategy_bars)

REPO = Path(__file__).resolve().parents[2]
PLACEHOLDER = "No description has been provided for this image"    # nbconvert/exporters/html.py (7.17)
MISSING = "Alternative text is missing"


class Losses:
    """The one method of a JobResult that ``loss_per_rank`` reads."""

    def metric(self, name):
        return np.array([[2.3, 2.1, 1.9], [2.4, 2.0, 1.8]])


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_a_line_plot_is_described_by_its_title_axes_and_legend():
    fig = per_strategy_curves({"contiguous": [1, 2, 2], "stratified": [9, 10, 10]}, ylabel="distinct classes",
                              title="classes seen per global step")
    text = describe(fig)
    assert text.startswith("Figure: classes seen per global step")
    assert "distinct classes against step" in text and "2 lines (contiguous, stratified)" in text, text


def test_the_course_figures_name_their_panels_marks_and_colour_scale():
    loss = describe(loss_per_rank(Losses(), title="loss on each rank's own batch"))
    assert "training loss against step, 3 lines (rank 0, rank 1, mean)" in loss, loss
    heat = describe(class_heatmaps({"contiguous": np.eye(3), "stratified": np.ones((3, 3))}))
    assert heat.startswith("Figure: images per class seen by each rank. 2 panels: (1) contiguous: rank against class")
    assert "a heatmap (colour: share of the rank's images)" in heat and "colorbar" not in heat.lower(), heat
    bars = describe(strategy_bars({"tv": {"contiguous": 0.9, "stratified": 0.01}}, {"tv": "class-mix distance"}))
    assert "class-mix distance: 2 bars (contiguous, stratified)" in bars, bars


def test_an_explicit_description_wins_and_is_kept_on_one_line():
    fig = per_strategy_curves({"a": [1, 2]}, ylabel="y", title="t")
    assert set_description(fig, "what the figure\n shows") is fig
    assert describe(fig) == "what the figure shows"


def test_the_markdown_image_keeps_the_description_verbatim_as_alt_text():
    alt = 'loss <per> rank [a] & "q" *x* _y_ `c` \\ end ![b](c) &lt;'
    img = BeautifulSoup(markdown2html(markdown_image("iVBORw0KGgo=", alt)), "html.parser").find("img")
    assert img["alt"] == alt and img["src"] == "data:image/png;base64,iVBORw0KGgo="


def test_outside_a_notebook_the_bundle_renders_the_png_itself():
    data, meta = figure_bundle(per_strategy_curves({"a": [1, 2]}, ylabel="y", title="t"))
    assert data["text/markdown"].startswith("![Figure: t") and "](data:image/png;base64,iVBORw0KGgo" in \
        data["text/markdown"]
    assert meta == {"image/png": {"alt": data["text/plain"]}}
    assert figure_bundle(plt.figure()) is None, "an empty figure shows nothing"


CELLS = [
    "import matplotlib.pyplot as plt\nfrom helpers.output.records import record_results\n"
    "from helpers.output.plots import per_strategy_curves, set_description",
    # through a course helper, shown with plt.show() as the notebooks do
    "fig = per_strategy_curves({'contiguous': [1, 2, 2], 'stratified': [9, 10, 10]}, ylabel='distinct classes',\n"
    "                          title='classes seen per global step')\nplt.show()",
    # the notebook's own matplotlib, shown when the cell ends (the inline backend's flush)
    "fig, ax = plt.subplots()\nax.bar(['fp32', 'O2'], [1.0, 0.8])\nax.set(ylabel='seconds per step', title='precision')",
    "fig, ax = plt.subplots()\nax.plot([0, 1])\nset_description(fig, 'an explicit description')\nplt.show()",
]
CONTROL = ["import matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.title('no helpers imported')\nplt.show()"]


def export(cells: list[str], tmp_path: Path) -> tuple[list, str, nbformat.NotebookNode]:
    """Execute a notebook of ``cells`` in the course's folder, export it to HTML; (<img> tags, nbconvert's log, nb)."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    exporter = HTMLExporter()
    log = tmp_path / "nbconvert.log"
    handler = logging.FileHandler(log)
    exporter.log.addHandler(handler)
    try:
        html, _ = exporter.from_notebook_node(nb)
    finally:
        exporter.log.removeHandler(handler)
        handler.close()
    return BeautifulSoup(html, "html.parser").find_all("img"), log.read_text(), nb


def test_without_the_helpers_nbconvert_gives_a_figure_a_placeholder_and_warns(tmp_path):
    imgs, log, _ = export(CONTROL, tmp_path)
    assert [i.get("alt") for i in imgs] == [PLACEHOLDER] and MISSING in log, (imgs, log)


def test_every_figure_of_an_executed_notebook_has_its_description_in_the_html_handout(tmp_path):
    imgs, log, nb = export(CELLS, tmp_path)
    alts = [i.get("alt") for i in imgs]
    assert len(alts) == 3 and all(a and a != PLACEHOLDER for a in alts), alts
    assert alts[0].startswith("Figure: classes seen per global step") and "2 lines (contiguous, stratified)" in alts[0]
    assert alts[1] == "Figure: precision: seconds per step (y axis), 2 bars (fp32, O2)", alts[1]
    assert alts[2] == "an explicit description"
    assert all(i["src"].startswith("data:image/png;base64,") for i in imgs), "the handout embeds the figures"
    assert MISSING not in log, log
    shown = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert [o["metadata"]["image/png"]["alt"] for o in shown] == alts, "the PNG outputs carry it as metadata too"
