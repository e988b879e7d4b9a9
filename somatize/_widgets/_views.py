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


# An HTML export of an executed notebook keeps the widgets' state (nbclient
# stores it unless told not to), and nbconvert then draws each panel as a
# widget view whose code comes from a CDN: offline, an empty box, the
# picture beside it never shown. Without the state it shows the picture.
EXPORT_FLAG = "--ExecutePreprocessor.store_widget_state=False"
EXPORT_HINT = f"(its picture in an HTML export: jupyter nbconvert --execute --to html {EXPORT_FLAG})"


def view_bundle(widget, text):
    """The mime entries that make a front end draw `widget` (any ipywidget),
    with `text` (the panel's text/plain) followed by EXPORT_HINT: what a
    reader without the widget gets, and how an export shows the picture."""
    return {"application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                         "model_id": widget.model_id},
            "text/plain": f"{text}\n{EXPORT_HINT}"}
