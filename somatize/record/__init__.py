"""Questions asked of a run's record: its facts, its tables, its curves.

Forwards count from 0 everywhere: ``facts(store, run, forward=0)`` is the
first forward. Every function takes the store (a ``Store`` or a path) and the
run's name. A query sees every fact this process handed to a Recorder so far;
another process sees them once that Recorder's background flush ran (every
0.25 s). A Recorder killed with kill -9 loses at most the facts it had not
flushed yet: those of the last flush interval (0.25 s) and of the flush under
way, so 0.25 to 0.5 s of them (measured: bench/RESULTS.md); everything before
reads back in order, once, and the run lists as interrupted.
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
