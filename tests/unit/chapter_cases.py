"""Shared by the chapter-step tests: capture what a chapter module shows instead of displaying it."""


def capture_shown(monkeypatch, module) -> list:
    """Tables (rows, headers) and markdown texts ``module`` shows, in order."""
    out = []
    monkeypatch.setattr(module, "show_table", lambda rows, headers: out.append((list(rows), headers)))
    monkeypatch.setattr(module, "show_md", lambda text: out.append(text))
    return out
