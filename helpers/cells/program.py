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

from helpers.core.errors import CellError
from helpers.core.paths import CELL_FILE

VALUES_FILE = "cell_values.pkl"    # in the run directory: the notebook values the cell reads
MODULE_NAME = "course_cell"    # the name the cell runs under on a rank (``__name__``)
SAME_GRAPH_ENV = "COURSE_CELL_SAME_GRAPH"   # "1" (``%%ranks ... --same-graph``): ranks 1.. load rank 0's graphs


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


def uses_jit(text: str) -> bool:
    """Whether the cell names ``jit`` (``@ms.jit``, ``jit(fn)``): MindSpore's compile cache loads such a function's
    graph without its closure's parameters (NaN losses, weights untouched), so its job compiles afresh."""
    return any(isinstance(n, ast.Name) and n.id == "jit" or isinstance(n, ast.Attribute) and n.attr == "jit"
               or isinstance(n, ast.alias) and n.name == "jit" for n in ast.walk(ast.parse(text)))


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
