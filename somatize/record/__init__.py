"""Questions asked of a run's record: its facts, its tables, its curves.

Forwards count from 0 everywhere. Every function takes the store (a ``Store``
or a path) and the run's name.
"""

from .._record._queries import curve as curve
from .._record._queries import facts as facts
from .._record._queries import forwards as forwards
from .._record._queries import nodes as nodes
from .._record._queries import runs as runs

__all__ = ["Live", "curve", "facts", "forwards", "nodes", "progress", "runs", "spent"]


def __getattr__(name):
    # progress, spent and Live are drawn by the widgets layer, which imports
    # heavier things; they load on first use.
    if name in ("progress", "spent", "Live"):
        from .. import _widgets

        return getattr(_widgets, name)
    raise AttributeError(f"module 'somatize.record' has no attribute {name!r}")
