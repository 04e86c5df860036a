"""The PyTorch -> MindSpore table of chapter 00 against the installed wheel: every MindSpore name in it
resolves, every keyword it relies on is the callable's, the full table (the appendix's, notes included) names
exactly MINDSPORE_NAMES (in full, inside backticks), the chapter shows its first three columns, and msrun is the
wheel's console script for the module the table names."""

import configparser
import importlib
import importlib.metadata
import inspect
import re

from pathlib import Path

import pytest

from helpers.chapters import torch_to_mindspore as cheat

# The rule the module follows: MindSpore names are written in full inside backticks, so these are all of them.
BACKTICKED = re.compile(r"`([^`]*)`")
MINDSPORE_NAME = re.compile(r"\bmindspore(?:\.\w+)+")
MAX_NOTE_WORDS = 15
APPENDIX = Path(__file__).resolve().parents[2] / "docs" / "appendix" / "00_environment_setup.md"


def resolve(name: str):
    """The object a dotted name denotes: its longest importable module prefix, then attributes
    ("mindspore.nn.Cell.recompute" -> import mindspore.nn, getattr Cell, getattr recompute)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module_name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            # only "this prefix is not a module" moves on; a module failing to import for another reason fails
            if e.name is None or not (module_name == e.name or module_name.startswith(e.name + ".")):
                raise
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def table_names(text: str) -> set[str]:
    """The ``mindspore.*`` dotted names inside the backticked spans of ``text``."""
    return {m.group(0) for span in BACKTICKED.findall(text) for m in MINDSPORE_NAME.finditer(span)}


def documents_keyword(obj, keyword: str) -> bool:
    """``keyword`` is a parameter of ``obj``'s signature, or an entry of its docstring's argument list
    ("comm_fusion (dict): ..." or "- loss_scale_manager (...)" for ``**kwargs`` functions)."""
    try:
        if keyword in inspect.signature(obj).parameters:
            return True
    except (TypeError, ValueError):
        pass
    doc = inspect.getdoc(obj) or ""
    return re.search(rf"^\s*(?:- )?{re.escape(keyword)} \(", doc, re.MULTILINE) is not None


@pytest.mark.parametrize("name", cheat.MINDSPORE_NAMES)
def test_mindspore_name_exists_in_the_wheel(name):
    try:
        resolve(name)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{name} is not in the installed MindSpore: {e!r}")


@pytest.mark.parametrize(("name", "keyword"), cheat.MINDSPORE_KEYWORDS)
def test_keyword_belongs_to_the_callable(name, keyword):
    assert name in cheat.MINDSPORE_NAMES
    assert documents_keyword(resolve(name), keyword), f"{keyword}: not in {name}'s signature nor its docs"


@pytest.mark.parametrize(("name", "keyword"), cheat.MINDSPORE_KEYWORDS)
def test_table_shows_the_keyword(name, keyword):
    spans = BACKTICKED.findall(cheat.full_table_markdown())
    assert any(re.search(rf"\b{re.escape(keyword)}\b", span) for span in spans), keyword


def test_table_names_exactly_the_listed_mindspore_names():
    """Each listed name is in the full table, in full and backticked; each backticked mindspore.* name of the full
    table, and so of the chapter's, is listed."""
    names = set(cheat.MINDSPORE_NAMES)
    assert len(names) == len(cheat.MINDSPORE_NAMES), "duplicate in MINDSPORE_NAMES"
    shown = table_names(cheat.full_table_markdown())
    assert names - shown == set(), "listed but not in the table"
    assert shown - names == set(), "in the table but not listed"
    assert table_names(cheat.table_markdown()) <= names


def test_no_bare_mindspore_name_outside_backticks():
    """Prose names are backticked too, so the check above sees every MindSpore name the table mentions."""
    text = BACKTICKED.sub("", cheat.full_table_markdown())
    assert MINDSPORE_NAME.search(text) is None


def test_table_shape_and_short_notes():
    text = cheat.table_markdown()
    lines = text.splitlines()
    assert lines[0] == "| what | PyTorch | MindSpore 2.10 |"
    assert len(lines) == len(cheat.ROWS) + 2
    assert cheat.full_table_markdown().splitlines()[0] == "| what | PyTorch | MindSpore 2.10 | note |"
    for what, pytorch, mindspore, note in cheat.ROWS:
        assert what and pytorch and mindspore and note
        assert "|" not in what + pytorch + mindspore + note     # md_table would escape it; none is needed
        assert len(note.split()) <= MAX_NOTE_WORDS, note
    whats = {row[0] for row in cheat.ROWS}
    for topic in ("launcher", "process group init", "rank and world size", "DDP", "DistributedSampler",
                  "custom sampler", "profiler", "bucketed gradient fusion", "FSDP / ZeRO", "tensor parallel",
                  "AMP", "gradient accumulation", "activation checkpointing", "all-reduce"):
        assert topic in whats


def test_the_appendix_holds_the_full_table_with_its_notes():
    """The notes left the chapter for its appendix; the appendix's table is the module's, so it stays true."""
    assert cheat.full_table_markdown() in APPENDIX.read_text(encoding="utf-8")


def test_msrun_is_the_wheels_console_script_for_the_named_module():
    text = importlib.metadata.distribution("mindspore").read_text("entry_points.txt")
    assert text, "the mindspore wheel has no entry_points.txt"
    entry_points = configparser.ConfigParser()
    entry_points.read_string(text)
    assert entry_points["console_scripts"]["msrun"].strip() == cheat.MSRUN_ENTRY_POINT
    module, func = cheat.MSRUN_ENTRY_POINT.split(":")
    assert module in cheat.MINDSPORE_NAMES
    assert callable(resolve(f"{module}.{func}"))
    assert "`msrun`" in cheat.table_markdown()


def test_model_has_no_accumulation_argument():
    """The gradient-accumulation row says so: neither Model nor Model.train takes an accumulation argument."""
    model = resolve("mindspore.train.Model")
    params = [*inspect.signature(model).parameters, *inspect.signature(model.train).parameters]
    assert not [p for p in params if "accum" in p.lower()]


def test_comm_func_all_reduce_is_deprecated_as_the_note_says():
    doc = inspect.getdoc(resolve("mindspore.communication.comm_func.all_reduce")) or ""
    assert "deprecated from version 2.9" in doc
    assert "mindspore.ops.communication.all_reduce" in doc
