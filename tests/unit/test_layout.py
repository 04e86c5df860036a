"""The repository's shape: helpers' packages import only downwards, no module circles, short modules and
functions, thin notebooks (ARCHITECTURE.md, "Where things are")."""

import ast
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
HELPERS = REPO / "helpers"

# package -> the helpers packages it may import (besides itself)
ALLOWED = {
    "core": set(),
    "output": {"core"},
    "train": {"core"},
    "job": {"core", "train"},
    "preflight": {"core", "train", "job"},
    "topics": {"core", "output", "train", "job"},
    "conclusions": {"core", "output", "topics"},
    "chapters": {"core", "output", "train", "job", "preflight", "topics", "conclusions", "cells"},
    "exercises": {"core", "train", "job", "topics"},
    "course": {"core", "output"},
    "cells": {"core", "train", "job"},
}
MAX_MODULE_LINES = 420
MAX_FUNCTION_LINES = 60
MAX_NOTEBOOK_CODE_LINES = 40
MAX_RANK_CELL_LINES = 50     # a %%ranks cell: the MindSpore code a chapter teaches, run on the ranks


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def helpers_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(HELPERS.rglob("*.py"))}


def imported(path: Path) -> set[str]:
    """Every helpers module ``path`` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("helpers")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("helpers"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    mods = helpers_modules()
    return {m for m in found if m in mods}


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_belongs_to_a_package_with_rules():
    loose = [m for m in helpers_modules() if m != "helpers" and package_of(m) not in ALLOWED]
    assert not loose, f"modules outside the packages of ARCHITECTURE.md: {loose}"


def test_packages_import_only_downwards():
    wrong = []
    for mod, path in helpers_modules().items():
        mine = package_of(mod)
        if mine is None:
            continue
        for dep in imported(path):
            theirs = package_of(dep)
            if theirs is not None and theirs != mine and theirs not in ALLOWED[mine]:
                wrong.append(f"{mod} imports {dep}")
    assert not wrong, "imports against the direction of ARCHITECTURE.md:\n" + "\n".join(wrong)


def test_no_module_import_circles():
    graph = {m: {d for d in imported(p) if d != m and d != package_parent(m)} for m, p in helpers_modules().items()}
    circles = []

    def visit(node, stack, done):
        for dep in graph.get(node, ()):
            if dep in stack:
                circles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in done:
                done.add(dep)
                visit(dep, stack + [dep], done)

    for m in graph:
        visit(m, [m], {m})
    assert not circles, "import circles:\n" + "\n".join(sorted(set(circles)))


def package_parent(module: str) -> str:
    return module.rsplit(".", 1)[0]


def test_core_never_imports_data_prep():
    """core is the bottom floor: writing data trees (data_prep) is train's job (helpers.train.data)."""
    wrong = []
    for mod, path in helpers_modules().items():
        if package_of(mod) != "core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            wrong += [f"{mod} imports {n}" for n in names if n.split(".")[0] == "data_prep"]
    assert not wrong, "\n".join(wrong)


def test_helpers_never_import_benchmarks_or_solutions():
    for mod, path in helpers_modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("benchmarks", "solutions", "tests") for n in names), mod


@pytest.mark.parametrize("path", sorted(HELPERS.rglob("*.py")) + sorted((REPO / "benchmarks").glob("*.py")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_modules_and_functions_are_short(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{lines} lines: split where the split has a name"
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines)" for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def code_lines(source: str) -> int:
    """Lines of Python: not blank, not comments, not IPython magics (``%load_ext``, ``%%ranks``)."""
    return sum(1 for ln in source.splitlines() if ln.strip() and not ln.strip().startswith(("#", "%")))


def is_rank_cell(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith("%%ranks")


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_are_thin(path):
    """Outside the parameters cell and the %%ranks cells (the lesson's own code), prose, calls and plots only."""
    nb = nbformat.read(path, as_version=4)
    n = sum(code_lines(c.source) for c in nb.cells
            if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", []) and not is_rank_cell(c))
    assert n <= MAX_NOTEBOOK_CODE_LINES, f"{n} code lines outside the parameters cell (prose, calls, plots only)"
    long = [code_lines(c.source) for c in nb.cells if is_rank_cell(c) and code_lines(c.source) > MAX_RANK_CELL_LINES]
    assert not long, f"%%ranks cells of {long} code lines: a lesson's code fits in {MAX_RANK_CELL_LINES}"


MAX_MODULE_DOCSTRING_LINES = 12


@pytest.mark.parametrize("path", sorted(HELPERS.rglob("*.py")) + sorted((REPO / "benchmarks").glob("*.py")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_docstrings_say_what_briefly(path):
    """One line of purpose per public function and class; module docstrings short (design is in ARCHITECTURE.md)."""
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree) or ""
    assert len(doc.splitlines()) <= MAX_MODULE_DOCSTRING_LINES, "module docstring: purpose, then what a caller needs"
    bare = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
            and not n.name.startswith("_") and not ast.get_docstring(n)]
    assert not bare, f"public without a docstring: {bare}"
