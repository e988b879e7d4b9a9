"""The explorer's page: bqplot views of what ``_compare.Explorer`` decided.

A bqplot figure takes one interaction at a time, so each axis is a figure
of its own (a column), with its own vertical ``BrushIntervalSelector``: a
drag anywhere in a column brushes that axis, several columns keep several
brushes. The columns sit side by side with no margin between them and share
one y scale (places, 0 at an axis's foot, 1 at its top), and each draws the
halves of the lines that reach it from its neighbours (a column's x runs
from half-way to the axis before to half-way to the next), so the lines run
on unbroken from column to column. Below, the selected runs' curves.

Only what changed is sent: a brush sends its extent; Python answers with the
lines' arrays (bounded: ``Explorer.lines``) and the curves, under
``hold_sync`` (one message a mark).
"""

from __future__ import annotations

import itertools
import math
from html import escape

import bqplot as bq
import ipywidgets as w
import numpy as np

from .._pictures._parallel import span

BRUSH = "#2563eb"  # the brand colour's light value: bqplot takes no CSS variable
HEIGHT = "320px"
AXIS_AT = 0.6  # where a column's axis stands, across it: its tick labels, on its left, have room
BRUSH_WIDTH = 16  # px: the brush drawn on its axis (a drag anywhere in the column still brushes it)
# bqplot's own text colours are not the theme's (its dark axis labels are
# orange): the theme's, through JupyterLab's variables
STYLE = """<style>
.somatize-explorer .bqplot text.axislabel, .somatize-explorer .bqplot .tick text {
  fill: var(--jp-ui-font-color1, #1f2937) !important; }
.somatize-explorer .bqplot .axis path, .somatize-explorer .bqplot .axis line {
  stroke: var(--jp-ui-font-color2, #6b7280) !important; }
.somatize-explorer-label { text-align: center; font-size: 12px; line-height: 1.3; overflow: hidden;
  text-overflow: ellipsis; white-space: nowrap; color: var(--jp-ui-font-color1); padding-left: 20%; }
.somatize-explorer-label span, .somatize-explorer-curves { color: var(--jp-ui-font-color2); font-size: 12px; }
.somatize-explorer-head { color: var(--jp-ui-font-color1); }
.somatize-explorer-ticks text.label { fill: var(--jp-ui-font-color1, #1f2937) !important; paint-order: stroke;
  stroke: var(--jp-layout-color0, #fff); stroke-width: 3px; stroke-linejoin: round; }
.somatize-explorer-ticks { pointer-events: none; }  /* a drag goes through to the brush under it */
.somatize-explorer-ticks rect, .somatize-explorer-ticks .svg-background { fill: none !important; }
""" + (  # bqplot draws a brush across its whole figure: drawn on the axis instead (SVG 2 geometry in CSS)
    ".somatize-explorer-axis .brushintsel .selection, .somatize-explorer-axis .brushintsel .handle {\n"
    f"  x: calc({AXIS_AT * 100:g}% - {BRUSH_WIDTH / 2:g}px); width: {BRUSH_WIDTH}px; }}\n</style>")


TICK_FONT = 12  # px: an axis's tick labels
INK = "#1f2937"  # the labels' colour where no theme is (STYLE sets the theme's): bqplot takes no CSS variable
TICK_GAP = 10  # px between a tick label and its axis, and before the column's left edge
LABEL_MOST = 10  # characters of a tick label (a long value of a set is cut with an ellipsis)


MARGIN = 8  # px above and below a column's plot area
# bqplot insets a Label mark's plot area by sqrt(its size)/2 + 1 px (ScatterBase's padding):
# the tick labels' figure has that much less margin, so its places lie where the lines' do
LABEL_PAD = math.sqrt(TICK_FONT) / 2 + 1
_VIEWS = itertools.count()


def _cell():
    """The layout of a column's two figures, one over the other in its grid cell."""
    return w.Layout(width="100%", min_width="0", height=HEIGHT, margin="0", grid_area="1 / 1 / 2 / 2")


def _tick_labels(i, labelled, x, y):
    """Column ``i``'s tick labels (``labelled``: [(place, text)]; ``x``, ``y``: its column's scales) as a figure
    of their own, laid over the lines' figure: a text a tick, on the axis's
    left, each with a halo of the page's colour (STYLE). bqplot draws a
    figure's axes under its marks and a mark over those before it, so the
    labels cannot be the axis's (the lines ending at a tick ran over its
    label), and a Label mark among the lines would inset their plot area by
    its padding (``LABEL_PAD``), which breaks each line where two columns meet."""
    mark = bq.Label(x=np.full(len(labelled), float(i)), y=np.array([p for p, _ in labelled], dtype=np.float64),
                    text=[t for _, t in labelled], scales={"x": x, "y": y}, align="end", default_size=TICK_FONT,
                    font_weight="normal", colors=[INK], apply_clip=False,
                    # the axis lies at AXIS_AT of the lines' plot area, which is not inset
                    x_offset=round(-TICK_GAP - LABEL_PAD * (1 - 2 * AXIS_AT)))  # bqplot takes whole px
    figure = bq.Figure(marks=[mark], axes=[], fig_margin={"top": MARGIN - LABEL_PAD, "bottom": MARGIN - LABEL_PAD,
                                                          "left": 0, "right": 0},
                       padding_x=0, padding_y=0, animation_duration=0, display_toolbar=False,
                       background_style={"fill": "none"}, layout=_cell())
    figure.add_class("somatize-explorer-ticks")
    return figure


def _cut(text: str) -> str:
    return text if len(text) <= LABEL_MOST else text[: LABEL_MOST - 1] + "…"


def _room(labels) -> int:
    """The least width (px) of a column whose axis, at ``AXIS_AT`` across
    it, has its longest tick label on its left (a glyph taken as 0.58 of the
    font size, a little more than it is)."""
    longest = max((len(t) for t in labels), default=1)
    return max(48, math.ceil((longest * 0.58 * TICK_FONT + TICK_GAP) / AXIS_AT))


def _thinned(ticks, height=int(HEIGHT[:-2]) - 16):
    """The ticks labelled: all when their labels have room one above the
    other on the axis (``height`` px), else every k-th from the foot."""
    k = max(1, math.ceil(len(ticks) * (TICK_FONT + 4) / height))
    return ticks[::k]


def _key(place) -> str:
    """A tick's place as JavaScript's String(number) writes it (bqplot looks
    tick labels up by it): four decimals, no trailing .0."""
    text = repr(round(float(place), 4))
    return text[:-2] if text.endswith(".0") else text


class ExplorerView:
    """The widgets of one explorer: ``box`` (what is displayed), a column
    figure and a selector per axis, and the curves' figure."""

    def __init__(self, explorer):
        self.explorer = explorer
        self._moving = False
        missing = explorer.MISSING  # where a run without an axis's value is drawn
        lo, hi = span(explorer.missing, missing)
        self.y = bq.LinearScale(min=lo, max=hi)
        self.columns, self.selectors, self.marks, self.labels, self.stacks, self.ticks = [], [], [], [], [], []
        self._class = f"somatize-explorer-{next(_VIEWS)}"  # this view's lines' stroke width (draw) is its own
        texts: list = []
        count = len(explorer.axis_list)
        for i, axis in enumerate(explorer.axis_list):
            # the axis at AXIS_AT across its column: its tick labels, on its left, have room
            x = bq.LinearScale(min=i - AXIS_AT, max=i + 1 - AXIS_AT)
            # the gaps this column shows halves of: the one before its axis and the one after. Their
            # stroke width is 0 to bqplot and set by CSS (draw): bqplot insets a figure's plot area by
            # half its lines' stroke width (its "padding"), so the two halves of a line, one a column,
            # would meet a pixel or two apart, a visible jog on a steep line.
            marks = {g: bq.Lines(x=[], y=[], scales={"x": x, "y": self.y}, stroke_width=0, apply_clip=True)
                     for g in (i - 1, i) if 0 <= g < count - 1}
            places = [p for p, _ in axis.ticks] + ([missing] if (axis.places == missing).any() else [])
            labelled = [(p, _cut(str(t))) for p, t in _thinned(axis.ticks)]
            if (axis.places == missing).any():
                labelled.append((missing, "no value"))
            # The axis draws its ticks and no text: bqplot draws a figure's axes under its marks, so
            # the lines ending at a tick would run over its label.
            ax = bq.Axis(scale=self.y, side="left", grid_lines="none",
                         offset={"scale": x, "value": i}, tick_values=np.array([round(p, 4) for p in places]),
                         tick_labels={_key(p): "" for p in places})
            ticks = _tick_labels(i, labelled, x, self.y)
            selector = bq.interacts.BrushIntervalSelector(scale=self.y, orientation="vertical", color=BRUSH)
            note = "metric" if i == 0 else f"|ρ| {axis.importance:.2f}"
            label = w.HTML(f'<div class="somatize-explorer-label" title="{escape(axis.column)}">'
                           f'<b>{escape(axis.label)}</b><br><span>{escape(note)}</span></div>',
                           layout=w.Layout(width="100%", margin="0"))
            figure = bq.Figure(marks=list(marks.values()), axes=[ax], interaction=selector,
                               fig_margin={"top": MARGIN, "bottom": MARGIN, "left": 0, "right": 0}, padding_y=0,
                               animation_duration=0, display_toolbar=False, layout=_cell())
            figure.add_class("somatize-explorer-axis")
            self.labels.append(label)
            # the tick labels' figure over the lines' one, in one grid cell: drawn over the lines
            cell = w.GridBox([figure, ticks], layout=w.Layout(grid_template_columns="minmax(0, 1fr)",
                                                              grid_template_rows=HEIGHT, margin="0"))
            self.stacks.append(w.VBox([label, cell], layout=w.Layout(flex="1 1 0px", margin="0",
                                                                      overflow="hidden")))
            texts.extend(t for _, t in labelled)
            self.ticks.append(ticks)
            selector.observe(lambda change, i=i: self._brushed(i), ["selected", "brushing"])
            self.columns.append(figure)
            self.selectors.append(selector)
            self.marks.append(marks)
        self.head = w.HTML()
        self.curve_x, self.curve_y = bq.LinearScale(), bq.LinearScale()
        self.curve_lines = [bq.Lines(x=[], y=[], scales={"x": self.curve_x, "y": self.curve_y}, stroke_width=1.75,
                                     visible=False) for _ in range(explorer.CURVES)]
        self.curve_axes = [bq.Axis(scale=self.curve_x, label="step", grid_lines="dashed"),
                           bq.Axis(scale=self.curve_y, side="left", label=explorer.fact or "",
                                   grid_lines="dashed")]
        self.curves = bq.Figure(marks=self.curve_lines, axes=self.curve_axes, animation_duration=0,
                                fig_margin={"top": 8, "bottom": 44, "left": 64, "right": 16},
                                display_toolbar=False,
                                layout=w.Layout(width="100%", height="260px"))
        self.curves_head = w.HTML()
        # the columns one width (a line's two halves, one a column, meet without a bend), no narrower
        # than the longest tick label needs on its axis's left: a row too wide for the page
        # scrolls rather than draw one label over another
        least = f"{_room(texts)}px"
        for stack in self.stacks:
            stack.layout.min_width = least
        row = w.HBox(self.stacks, layout=w.Layout(width="100%", margin="0", overflow="auto hidden"))
        row.add_class("somatize-explorer-row")
        parts = [self.head, row]
        if explorer.fact is not None:
            parts += [self.curves_head, self.curves]
        self.box = w.VBox(parts, layout=w.Layout(width="100%"))
        self.box.add_class("somatize-explorer")
        self.box.add_class(self._class)
        self.brushes_moved(explorer.brushes)
        self.draw()

    def _brushed(self, i):
        selector = self.selectors[i]
        if self._moving or selector.brushing:
            return  # a drag under way: its end says where it stopped
        extent = selector.selected
        extent = None if extent is None or len(extent) != 2 else [float(extent[0]), float(extent[1])]
        if extent == self.explorer.brushes[i]:
            return
        self.explorer.brush(i, extent)
        self.draw()

    def brushes_moved(self, brushes):
        """Each selector moved to ``brushes`` (set from Python: no answer is asked)."""
        self._moving = True
        try:
            for selector, brush in zip(self.selectors, brushes):
                selector.selected = None if brush is None else np.array(brush, dtype=np.float64)
        finally:
            self._moving = False

    def draw(self):
        e = self.explorer
        where = e.where
        width = e.picture_width()
        self.head.value = (STYLE + f"<style>.{self._class} .somatize-explorer-axis path.line "
                           f"{{ stroke-width: {width:g}px !important; }}</style>"
                           f'<div class="somatize-explorer-head"><b>{escape(e.title())}</b><br>'
                           f'<code>where={escape(repr(where))}</code></div>')
        for g, (foot, top, color, opacity) in enumerate(e.lines()):
            for mark in (self.marks[g][g], self.marks[g + 1][g]):
                with mark.hold_sync():
                    if len(foot):
                        mark.x = np.tile(np.array([g, g + 1], dtype=np.float64), (len(foot), 1))
                        mark.y = np.column_stack([foot, top])
                        mark.colors = [str(c) for c in color]
                        mark.opacities = [float(o) for o in opacity]
                    else:
                        mark.x, mark.y = [], []
        self._draw_curves()

    def _draw_curves(self):
        e = self.explorer
        chart = e.curve_chart()
        if chart is None:
            return
        self.curves_head.value = f'<div class="somatize-explorer-curves">{escape(e.curves_title())}</div>'
        log = chart["log"]
        if log != isinstance(self.curve_y, bq.LogScale):
            self.curve_y = bq.LogScale() if log else bq.LinearScale()
            for line in self.curve_lines:
                line.scales = {"x": self.curve_x, "y": self.curve_y}
            self.curve_axes[1].scale = self.curve_y
        self.curve_axes[1].label = chart["ylabel"]
        self.curve_axes[1].tick_values = np.array([t for t, _ in chart["yticks"]], dtype=np.float64)
        self.curve_axes[0].tick_values = np.array([t for t, _ in chart["xticks"]], dtype=np.float64)  # whole steps
        series = chart["series"]
        for k, line in enumerate(self.curve_lines):
            with line.hold_sync():
                if k < len(series):
                    points = np.array(series[k]["points"], dtype=np.float64).reshape(-1, 2)
                    line.x, line.y = points[:, 0], points[:, 1]
                    line.colors = [series[k]["color"]]
                    line.visible = True
                else:
                    line.visible = False
