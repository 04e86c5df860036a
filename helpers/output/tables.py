"""Small display helpers for notebooks: markdown tables and text written from a run's own numbers."""

from __future__ import annotations


def md_table(rows, headers) -> str:
    """A GitHub-markdown table (renders in JupyterLab, nbconvert HTML and plain text alike)."""
    def cell(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def show_md(text: str) -> None:
    """Display Markdown text in the notebook."""
    from IPython.display import Markdown, display

    display(Markdown(text))


def show_table(rows, headers) -> None:
    """Display ``rows`` under ``headers`` as a Markdown table in the notebook."""
    show_md(md_table(rows, headers))
