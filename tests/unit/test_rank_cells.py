"""Every chapter shows the MindSpore code it teaches in a ``%%ranks`` cell: counted, and each name found in the wheel."""

import ast
import importlib
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
MIN_NAMES = 8        # distinct mindspore names per chapter, in code that runs on the ranks


def rank_cells(path: Path) -> list[str]:
    """The code of a notebook's ``%%ranks`` cells, the magic line cut."""
    nb = nbformat.read(path, as_version=4)
    return [c.source.split("\n", 1)[1] for c in nb.cells
            if c.cell_type == "code" and c.source.lstrip().startswith("%%ranks")]


def dotted(node) -> str | None:
    """``a.b.c`` for an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def mindspore_names(source: str) -> set[str]:
    """Every ``mindspore...`` name the code imports or uses, through its import aliases, fully spelled out."""
    tree = ast.parse(source)
    alias = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            alias.update({(a.asname or a.name.split(".")[0]): (a.name if a.asname else a.name.split(".")[0])
                          for a in node.names if a.name.startswith("mindspore")})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mindspore"):
            alias.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    used = set(alias.values()) - {"mindspore"}
    for node in ast.walk(tree):
        name = dotted(node) if isinstance(node, ast.Attribute) else None
        if name and name.split(".")[0] in alias:
            used.add(alias[name.split(".")[0]] + name[len(name.split(".")[0]):])
    # keep the longest chains only: ms.ParallelMode.DATA_PARALLEL counts once, not also as ms.ParallelMode
    return {n for n in used if not any(o.startswith(n + ".") for o in used)}


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute path on the longest importable module prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            return True
        except AttributeError:
            return False
    return False


def test_names_are_resolved_through_aliases():
    src = ("import mindspore as ms\nfrom mindspore import nn\nfrom mindspore.communication import init\n"
           "ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL)\nnn.Dense(1, 2)\ninit()\n")
    assert mindspore_names(src) == {"mindspore.set_auto_parallel_context", "mindspore.ParallelMode.DATA_PARALLEL",
                                    "mindspore.nn.Dense", "mindspore.communication.init"}
    assert resolves("mindspore.nn.Dense") and not resolves("mindspore.nn.ModelParallelCell")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_chapter_runs_its_mindspore_code_on_the_ranks(path):
    cells = rank_cells(path)
    assert cells, f"{path.name} has no %%ranks cell: the code it teaches is not on the page"
    names = set().union(*(mindspore_names(c) for c in cells))
    assert len(names) >= MIN_NAMES, f"{path.name}: {len(names)} mindspore names on the ranks: {sorted(names)}"
    missing = sorted(n for n in names if not resolves(n))
    assert not missing, f"{path.name} uses names the installed MindSpore does not have: {missing}"
