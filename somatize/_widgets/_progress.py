"""`progress(store, run=...)`: a named fact over steps, as a bqplot figure.

The rule it keeps: what is sent to the page is bounded, whatever the length
of the run. A curve is thinned to at most `POINTS` bucket means before it
leaves Python (a 1M-step run and a 1k-step run weigh the same in a saved
notebook); smoothing and the log scale are applied here, from the full curve.
bqplot's figure sits beside the controls in an ipywidgets box, never inside
an anywidget (embedded in one, it is clipped).
"""

from __future__ import annotations

import warnings
from html import escape

import numpy as np

from . import _svg

POINTS = 2000


def thinned(values, steps, points=POINTS):
    """(steps, means): at most `points` bucket means of `values`, each at the
    mean step of its bucket."""
    values, steps = np.asarray(values, dtype=np.float64), np.asarray(steps, dtype=np.float64)
    if len(values) <= points:
        return steps, values
    edges = np.linspace(0, len(values), points + 1).astype(np.int64)
    counts = np.diff(edges)
    return np.add.reduceat(steps, edges[:-1]) / counts, np.add.reduceat(values, edges[:-1]) / counts


def finite(curve):
    """(steps, values) of a curve's finite values. A step is the fact's place
    in the curve, from 0 like forwards and `Live` (with micro=N a step spans N
    forwards, so it is not the curve's index)."""
    values = curve.to_numpy(dtype=np.float64)
    keep = np.isfinite(values)
    return np.arange(len(values), dtype=np.float64)[keep], values[keep]


def smoothed(values, weight):
    """Exponential moving average, debiased (the first points are not pulled
    to 0): pandas' `ewm(alpha=1 - weight, adjust=True)`."""
    values = np.asarray(values, dtype=np.float64)
    if weight <= 0 or len(values) == 0:
        return values
    import pandas as pd

    return pd.Series(values).ewm(alpha=1 - weight, adjust=True).mean().to_numpy()


class Progress:
    """The answer of `progress`: a figure in a notebook; `.curves` (one
    pandas Series per run) everywhere."""

    def __init__(self, store, runs, name):
        from somatize.record import curve

        self.name = name
        self.runs = runs
        self.curves = {run: curve(store, run=run, name=name) for run in runs}
        self._finite = {run: finite(c) for run, c in self.curves.items()}
        self.thin = {run: self.line(run) for run in runs}
        self._box = None

    def line(self, run, smoothing=0.0):
        """(steps, values) drawn for `run` with `smoothing` (0 to 1): the full
        curve smoothed, then thinned."""
        steps, values = self._finite[run]
        return thinned(smoothed(values, smoothing), steps)

    def _series(self):
        return [
            {"name": run, "color": _svg.SERIES[i % len(_svg.SERIES)], "points": list(zip(x.tolist(), y.tolist()))}
            for i, (run, (x, y)) in enumerate(self.thin.items())
        ]

    def to_html(self):
        log = _wants_log(self.thin.values())
        ylabel = self.name + (" (log scale)" if log else "")
        chart = _svg.line_chart(self._series(), xlabel="step", ylabel=ylabel, log=log)
        return _svg.boxed(chart, self.title())

    def title(self):
        return f"{self.name} over steps — " + ", ".join(f"run {r!r}" for r in self.runs)

    def widget(self):
        """The interactive figure: zoom and pan (drag, wheel), log scale,
        smoothing, values on hover, a legend when several runs overlay."""
        if self._box is None:
            self._box = _figure(self)
        return self._box

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": repr(self), "text/html": self.to_html()}
        try:
            from ._views import view_bundle

            bundle.update(view_bundle(self.widget()))
        except ImportError:
            pass
        return bundle

    def __repr__(self):
        parts = []
        for run, c in self.curves.items():
            last = c.iloc[-1] if len(c) else None
            parts.append(f"{run!r}: {len(c)} steps, last {self.name} {_svg.number(last)}")
        return f"progress({self.name}: " + "; ".join(parts) + ")"


def _wants_log(thins):
    ys = np.concatenate([y for _, y in thins]) if thins else np.empty(0)
    return bool(len(ys)) and bool((ys > 0).all()) and ys.max() / ys.min() > 100


def _figure(p):
    import ipywidgets as widgets

    with warnings.catch_warnings():
        # bqscales sets trait metadata the pre-4.1 way on import; not ours to fix.
        warnings.simplefilter("ignore", DeprecationWarning)
        import bqplot as bq

    x_scale = bq.LinearScale()
    scales = {"linear": bq.LinearScale(), "log": bq.LogScale()}
    start = "log" if _wants_log(p.thin.values()) else "linear"
    y_scale = scales[start]
    many = len(p.thin) > 1
    lines, dots = [], []
    for i, (run, (x, y)) in enumerate(p.thin.items()):
        color = _svg.SERIES[i % len(_svg.SERIES)]
        lines.append(bq.Lines(x=x, y=y, scales={"x": x_scale, "y": y_scale}, colors=[color], labels=[run],
                              display_legend=many, stroke_width=1.75))
        # Invisible points carry the hover values (a line has no per-point tooltip).
        dots.append(bq.Scatter(x=x, y=y, scales={"x": x_scale, "y": y_scale}, colors=[color], default_size=24,
                               opacities=[0.0],
                               tooltip=bq.Tooltip(fields=["x", "y"], labels=["step", p.name], formats=[".0f", ".4g"])))
    x_axis = bq.Axis(scale=x_scale, label="step", tick_format=",d", grid_lines="solid")
    # "~" trims trailing zeros: 0.05 and 10, not 0.0500 and 10.0.
    y_axis = bq.Axis(scale=y_scale, side="left", label=p.name, tick_format=".3~g", grid_lines="solid",
                     label_offset="50px")
    zoom = bq.interacts.PanZoom(scales={"x": [x_scale], "y": [y_scale]})
    fig = bq.Figure(marks=lines + dots, axes=[x_axis, y_axis], interaction=zoom, legend_location="top-right",
                    fig_margin={"top": 16, "bottom": 50, "left": 70, "right": 20},
                    layout=widgets.Layout(width="100%", height="340px"))
    fig.add_class("somatize-progress")

    small = {"width": "auto"}
    log = widgets.ToggleButton(value=start == "log", description="log scale", tooltip="log scale on the y axis",
                               icon="check" if start == "log" else "", layout=small)
    smooth = widgets.FloatSlider(value=0.0, min=0.0, max=0.99, step=0.01, description="smoothing",
                                 readout_format=".2f", continuous_update=False,
                                 style={"description_width": "auto"}, layout={"width": "260px"})
    reset = widgets.Button(description="reset zoom", tooltip="show every step again", layout=small)

    def relog(change):
        new = scales["log" if change["new"] else "linear"]
        for mark in lines + dots:
            mark.scales = {"x": x_scale, "y": new}
        y_axis.scale = new
        zoom.scales = {"x": [x_scale], "y": [new]}
        log.icon = "check" if change["new"] else ""

    def resmooth(change):
        for line, run in zip(lines, p.thin):
            line.y = p.line(run, change["new"])[1]

    def rezoom(_):
        for s in (x_scale, *scales.values()):
            s.min = s.max = None

    log.observe(relog, "value")
    smooth.observe(resmooth, "value")
    reset.on_click(rezoom)
    # One line, never wrapped: the hint is short enough to stay whole, and drops below the controls when narrow.
    hint = widgets.HTML(f"<span style='font-size:11px;color:{_svg.MUTED};white-space:nowrap'>"
                        "drag to pan · wheel to zoom · hover for values</span>", layout={"width": "auto"})
    controls = widgets.HBox([log, smooth, reset, hint],
                            layout=widgets.Layout(align_items="center", flex_flow="row wrap", grid_gap="4px 12px"))
    title = widgets.HTML(f"<div style='font-weight:600;font-size:14px;color:{_svg.INK}'>{escape(p.title())}</div>")
    box = widgets.VBox([title, controls, fig],
                       layout=widgets.Layout(border=f"1px solid {_svg.GRID}", padding="10px 12px", max_width="920px"))
    box.add_class("somatize-progress-panel")
    return box


def progress(store, run, name="loss"):
    """The fact `name` (default `loss`) of `run` over steps, as an interactive
    figure; `run=["a", "b"]` overlays runs with a legend."""
    runs = [run] if isinstance(run, str) else list(run)
    return Progress(store, runs, name)
