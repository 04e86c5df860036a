"""A notebook cell made into a rank program: its syntax checked, the notebook values it uses found and packed, written as a file.

Kernel side and pure (no MindSpore): ``cell_program(source, namespace)`` returns what the ranks need, or raises
``CellError`` before anything is launched. The cell runs on the ranks from a real file because MindSpore's GRAPH
mode parses ``construct``'s source with ``inspect``; the file's line n is the cell's line n, so a rank's traceback
names the line the learner wrote.
"""

from __future__ import annotations

import ast
import builtins
import pickle
import symtable
import types
from dataclasses import dataclass, field

from helpers.core.errors import CourseError

CELL_FILE = "cell.py"          # in the run directory: the cell, line for line
VALUES_FILE = "cell_values.pkl"    # in the run directory: the notebook values the cell reads
MODULE_NAME = "course_cell"    # the name the cell runs under on a rank (``__name__``)


class CellError(CourseError):
    """The cell cannot run on the ranks (syntax, an undefined or unpicklable name); nothing was launched."""


@dataclass
class CellProgram:
    """What the ranks run: the file's text, the notebook's values by name, the modules by alias."""

    text: str
    values: dict[str, bytes] = field(default_factory=dict)      # name -> pickle of the notebook's value
    modules: dict[str, str] = field(default_factory=dict)       # alias -> module name (``np`` -> ``numpy``)

    def files(self) -> dict[str, bytes]:
        """The run directory's files for this cell: ``cell.py`` and ``cell_values.pkl``."""
        packed = pickle.dumps({"values": self.values, "modules": self.modules})
        return {CELL_FILE: self.text.encode(), VALUES_FILE: packed}


def cell_text(magic_line: str, body: str) -> str:
    """The file's text: the magic line kept as a comment, so line n of the file is line n of the cell."""
    return f"# {magic_line.strip()}\n{body}"


def check_syntax(text: str) -> None:
    """Raise ``CellError`` naming the cell line of a syntax error."""
    try:
        compile(text, CELL_FILE, "exec")
    except SyntaxError as exc:
        line = (exc.text or "").rstrip()
        raise CellError(f"syntax error in the cell, line {exc.lineno}: {exc.msg}\n    {line}\n"
                        "nothing was launched") from None


def free_names(text: str) -> set[str]:
    """Names the cell reads but never binds at its top level (nor in any function that binds them as global)."""
    top = symtable.symtable(text, CELL_FILE, "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    read: set[str] = set()
    tables = [top]
    while tables:
        t = tables.pop()
        tables.extend(t.get_children())
        for s in t.get_symbols():
            if s.is_referenced() and (t is top or s.is_global()):
                read.add(s.get_name())
            if t is not top and s.is_declared_global() and s.is_assigned():
                bound.add(s.get_name())
    return read - bound - set(dir(builtins)) - {"__name__", "__file__"}


def defined_in_notebook(value) -> bool:
    """A function or class the notebook's kernel defined (pickled by reference to ``__main__``, absent on a rank)."""
    kind = value if isinstance(value, type) else value if callable(value) else type(value)
    return getattr(kind, "__module__", None) == "__main__"


def cell_program(magic_line: str, body: str, namespace: dict, provided: set[str] = frozenset()) -> CellProgram:
    """The rank program of a cell: syntax checked, every name it reads from the notebook packed by value (modules
    by name); ``provided`` names are given on the ranks (the job's config). Raises ``CellError``."""
    text = cell_text(magic_line, body)
    check_syntax(text)
    program = CellProgram(text)
    missing, unpicklable = [], []
    for name in sorted(free_names(text) - set(provided)):
        if name not in namespace:
            missing.append(name)
        elif isinstance(namespace[name], types.ModuleType):
            program.modules[name] = namespace[name].__name__
        elif defined_in_notebook(namespace[name]):
            unpicklable.append(f"{name} (a {type(namespace[name]).__name__} defined in the notebook: the ranks "
                               "cannot import it, and MindSpore needs its source)")
        else:
            try:
                program.values[name] = pickle.dumps(namespace[name])
            except Exception as exc:   # pickle raises TypeError, PicklingError, AttributeError, ... by object
                unpicklable.append(f"{name} ({type(namespace[name]).__name__}: {exc})")
    if missing:
        raise CellError(f"the cell reads {', '.join(missing)}, defined neither in the cell nor in the notebook; "
                        "nothing was launched")
    if unpicklable:
        raise CellError("the cell reads notebook values that cannot be sent to the ranks: "
                        + "; ".join(unpicklable) + ". Create them inside the cell instead; nothing was launched")
    return program


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

