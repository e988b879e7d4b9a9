"""The anywidget front ends. Imported only when something is displayed, so
that watching, querying and scripts never import Jupyter.

The rule it keeps: a view holds plain data in one synced trait, so one change
on the Python side is one message to the front end (what the throttle counts).
The JavaScript has one source, `js/widgets/` (chart.js is joined in front
of the modules that draw a chart, chart.css in front of panel.css; the run
browser's panel draws with the same chart.js and chart.css): a wheel carries it as
`somatize/_widgets/static/` (pyproject's force-include); a source checkout or
an editable install reads it where it is.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

STATIC = Path(__file__).parent / "static"  # in a wheel
if not STATIC.is_dir():
    STATIC = Path(__file__).parents[2] / "js" / "widgets"  # a checkout


def _joined(*names):
    # anywidget loads one module a view; the chart code they share is put in
    # front of each (plain functions, no import between the files).
    return "\n".join((STATIC / name).read_text(encoding="utf-8") for name in names)


CSS = _joined("chart.css", "panel.css")  # every panel's look: the chart's, then the rest


class LiveView(anywidget.AnyWidget):
    _esm = _joined("chart.js", "live.js")
    _css = CSS
    status = traitlets.Dict().tag(sync=True)
    log = traitlets.Bool(None, allow_none=True).tag(sync=True)
    smoothing = traitlets.Float(0.0).tag(sync=True)


class ProgressView(anywidget.AnyWidget):
    _esm = _joined("chart.js", "progress.js")
    _css = CSS
    title = traitlets.Unicode().tag(sync=True)
    chart = traitlets.Dict().tag(sync=True)
    log = traitlets.Bool(None, allow_none=True).tag(sync=True)
    smoothing = traitlets.Float(0.0).tag(sync=True)
    outliers = traitlets.Bool(False).tag(sync=True)
    window = traitlets.List().tag(sync=True)


class SpentView(anywidget.AnyWidget):
    _esm = STATIC / "spent.js"
    _css = CSS
    spent = traitlets.Dict().tag(sync=True)


class GraphView(anywidget.AnyWidget):
    _esm = STATIC / "graph.js"
    _css = CSS
    graph = traitlets.Dict().tag(sync=True)


def view_bundle(widget):
    """The mime entry that makes a front end draw `widget` (any ipywidget)."""
    return {"application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                         "model_id": widget.model_id}}
