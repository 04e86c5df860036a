"""The course runner's index page: one row per chapter linking its HTML handout, with status, time and a link to
its recorded results, the website when built, and a failed chapter shown as failed (no notebook is executed here)."""

import json

from helpers.course import ChapterRun, write_index


def test_index_links_every_handout_with_its_results_and_failures(tmp_path):
    runs = [ChapterRun("00_environment_setup", True, 91.0, str(tmp_path / "00.ipynb"),
                       str(tmp_path / "00_environment_setup.html"),
                       {"weights_identical": True, "claims": [{"holds": True}, {"holds": None}]}),
            ChapterRun("01_load_imbalance", False, 12.0, "", "", {}, "PapermillExecutionError: cell 7 <boom>")]
    page = write_index(runs, tmp_path, "ci").read_text(encoding="utf-8")
    assert '<a href="00_environment_setup.html">00_environment_setup</a>' in page and "91 s" in page
    # the results are a link, not the JSON dumped in the table; the status is a word a browser can always draw
    assert ('<a href="results/00_environment_setup.json">results/00_environment_setup.json</a> (2 claims: 1 held)'
            in page)
    assert "weights_identical" not in page
    assert '<b class="ok">✓ ok</b>' in page and "✅" not in page
    assert '<b class="failed">✗ failed</b>: PapermillExecutionError: cell 7 &lt;boom&gt;' in page
    assert "(no results recorded)" in page and "website" not in page
    assert "preset <code>ci</code>" in page and "total 103 s" in page
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["stem"] for r in summary] == ["00_environment_setup", "01_load_imbalance"]
    with_site = write_index(runs, tmp_path, "ci", site=tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'The course as a website: <a href="site/index.html">site/index.html</a>' in with_site


def test_index_names_the_options_and_summary_keeps_each_chapters_parameters(tmp_path):
    params = {"preset": "gpu8", "rehearse": True, "device_target": "Ascend"}
    runs = [ChapterRun("00_environment_setup", True, 5.0, "", "", {}, "", params)]
    page = write_index(runs, tmp_path, "gpu8", {"device_target": "Ascend", "rehearse": True}).read_text(encoding="utf-8")
    assert "options: device_target=Ascend, rehearse=True; rehearsed on CPU, standing for Ascend" in page
    assert json.loads((tmp_path / "summary.json").read_text())[0]["parameters"] == params
    assert "options: the preset&#x27;s" in write_index(runs, tmp_path, "ci").read_text(encoding="utf-8")


def test_a_failed_chapter_is_named_by_its_cells_error_not_the_last_log_line():
    from papermill.exceptions import PapermillExecutionError

    from helpers.course import failure_line

    exc = PapermillExecutionError(20, 1, "chapter.amp_levels(ch)", "JobFailed",
                                  "job crash on rank 0: NameError: FOLD_ENV\n  --- tail of the log ---\n  [INFO] dispatch",
                                  ["Traceback", "[INFO] DISTRIBUTED ... Event base dispatch success!"])
    assert failure_line(exc) == "JobFailed: job crash on rank 0: NameError: FOLD_ENV"
    assert failure_line(ValueError("a\nlast line")) == "ValueError: last line"
