"""Panels in the notebook: `Live`, `progress`, `spent`, `compare` (the
explorer of many runs) and the graph panel.

The rule this layer keeps: panels only read. They watch facts or query the
record; nothing below them knows they exist. Jupyter (anywidget, ipywidgets) is
imported only when a panel is displayed or built, so importing
this package costs nothing in a script.
"""

from ._compare import compare as compare
from ._graph import graph_bundle as graph_bundle
from ._live import Live as Live
from ._progress import progress as progress
from ._spent import spent as spent

__all__ = ["Live", "compare", "graph_bundle", "progress", "spent"]
