"""The notebook panels, as the layers below them reach them: by name, never
by an import.

The rule kept here: nothing below the widgets imports them. The package's
``__init__`` (the top, which may import any layer) says how a panel is
found (``found_by``); ``somatize.record``'s public ``progress``, ``spent``,
``Live`` and ``compare``, and a ``Graph`` displayed in a notebook, ask here
(``panel``).
"""

from __future__ import annotations

_find = None  # name -> the panel, imported when first asked for (set by somatize/__init__.py)


def found_by(find) -> None:
    """Panels are found by ``find(name)``, which imports them (or raises
    ``MissingExtra``, an ImportError, naming the extra that brings them)."""
    global _find
    _find = find


def panel(name: str):
    """The panel ``name`` (``progress``, ``spent``, ``Live``, ``compare``,
    ``graph_bundle``), imported now (``somatize/__init__.py``, which
    registered ``found_by``, runs before any module of the package)."""
    return _find(name)
