"""Pieces of a notebook cell's code as Python: a cell's classes with its imports, the committed ``%%ranks`` cell,
a file imported as a module. Pure (no MindSpore, no Jupyter): the ranks use it as much as the notebook does."""

from __future__ import annotations

import ast

from helpers.core.errors import CellError


def definitions(text: str, names: list[str]) -> str:
    """A module of the cell ``text``'s imports and its classes/functions ``names``, as written there: the piece of
    a cell an experiment job runs too (e.g. chapter 01's sampler), so there is one definition, the cell's."""
    tree = ast.parse(text)
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    defined = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [name for name in names if name not in defined]
    if missing:
        raise CellError(f"the code cell defines no {', '.join(missing)} at its top level: run the cell as the "
                        "chapter gives it (or with your edits) before the experiment")
    keep += [defined[name] for name in names]
    lines = text.splitlines()
    first = lambda n: min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])])  # noqa: E731
    return "\n\n".join("\n".join(lines[first(n) - 1:n.end_lineno]) for n in keep) + "\n"


def ranks_cell_body(notebook) -> str:
    """The code of a notebook's ``%%ranks`` cell without its magic line, as committed (read with ``json``, so a
    rank needs no Jupyter package)."""
    import json

    cells = json.loads(open(notebook, encoding="utf-8").read())["cells"]
    text = next("".join(c["source"]) for c in cells
                if c["cell_type"] == "code" and "".join(c["source"]).startswith("%%ranks"))
    return text.split("\n", 1)[1]


def load_definitions(path, names: list[str]) -> tuple:
    """The objects ``names`` of the Python file ``path``, imported as a module named by the file's stem (from a
    file and in ``sys.modules``: MindSpore's GRAPH mode reads a ``construct``'s source and its module's names)."""
    import importlib.util
    import sys
    from pathlib import Path

    found = importlib.util.spec_from_file_location(Path(path).stem, str(path))
    module = importlib.util.module_from_spec(found)
    sys.modules[found.name] = module
    found.loader.exec_module(module)
    return tuple(getattr(module, name) for name in names)

