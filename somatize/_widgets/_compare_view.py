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

import math
from html import escape

import bqplot as bq
import ipywidgets as w
import numpy as np

from .._pictures._parallel import span
from ._compare import CURVES, MISSING

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
.somatize-explorer-axis text.label { fill: var(--jp-ui-font-color1, #1f2937) !important; paint-order: stroke;
  stroke: var(--jp-layout-color0, #fff); stroke-width: 3px; stroke-linejoin: round; pointer-events: none; }
""" + (  # bqplot draws a brush across its whole figure: drawn on the axis instead (SVG 2 geometry in CSS)
    ".somatize-explorer-axis .brushintsel .selection, .somatize-explorer-axis .brushintsel .handle {\n"
    f"  x: calc({AXIS_AT * 100:g}% - {BRUSH_WIDTH / 2:g}px); width: {BRUSH_WIDTH}px; }}\n</style>")


TICK_FONT = 12  # px: an axis's tick labels
LABELS = "labels"  # a column's marks: its tick labels' Label mark, beside the lines of its two gaps
INK = "#1f2937"  # the labels' colour where no theme is (STYLE sets the theme's): bqplot takes no CSS variable
TICK_GAP = 10  # px between a tick label and its axis, and before the column's left edge
LABEL_MOST = 10  # characters of a tick label (a long value of a set is cut with an ellipsis)


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
        lo, hi = span(explorer.missing, MISSING)
        self.y = bq.LinearScale(min=lo, max=hi)
        self.columns, self.selectors, self.marks, self.labels, self.stacks = [], [], [], [], []
        texts: list = []
        count = len(explorer.axis_list)
        for i, axis in enumerate(explorer.axis_list):
            # the axis at AXIS_AT across its column: its tick labels, on its left, have room
            x = bq.LinearScale(min=i - AXIS_AT, max=i + 1 - AXIS_AT)
            # the gaps this column shows halves of: the one before its axis and the one after
            marks = {g: bq.Lines(x=[], y=[], scales={"x": x, "y": self.y}, stroke_width=1.5, apply_clip=True)
                     for g in (i - 1, i) if 0 <= g < count - 1}
            places = [p for p, _ in axis.ticks] + ([MISSING] if (axis.places == MISSING).any() else [])
            labelled = [(p, _cut(str(t))) for p, t in _thinned(axis.ticks)]
            if (axis.places == MISSING).any():
                labelled.append((MISSING, "no value"))
            # The axis draws its ticks and no text: bqplot draws a figure's axes under its marks, so
            # the lines ending at a tick would run over its label. The labels are a mark of their own,
            # after the lines (drawn over them, a halo of the page's colour round each: STYLE).
            ax = bq.Axis(scale=self.y, side="left", grid_lines="none",
                         offset={"scale": x, "value": i}, tick_values=np.array([round(p, 4) for p in places]),
                         tick_labels={_key(p): "" for p in places})
            marks[LABELS] = bq.Label(x=np.full(len(labelled), float(i)),
                                     y=np.array([p for p, _ in labelled], dtype=np.float64),
                                     text=[t for _, t in labelled], scales={"x": x, "y": self.y},
                                     x_offset=-TICK_GAP, align="end", default_size=TICK_FONT, font_weight="normal",
                                     colors=[INK], apply_clip=False)
            selector = bq.interacts.BrushIntervalSelector(scale=self.y, orientation="vertical", color=BRUSH)
            note = "metric" if i == 0 else f"|ρ| {axis.importance:.2f}"
            label = w.HTML(f'<div class="somatize-explorer-label" title="{escape(axis.column)}">'
                           f'<b>{escape(axis.label)}</b><br><span>{escape(note)}</span></div>',
                           layout=w.Layout(width="100%", margin="0"))
            figure = bq.Figure(marks=list(marks.values()), axes=[ax], interaction=selector,
                               fig_margin={"top": 8, "bottom": 8, "left": 0, "right": 0}, padding_y=0,
                               animation_duration=0, display_toolbar=False,
                               layout=w.Layout(width="100%", min_width="0", height=HEIGHT, margin="0"))
            figure.add_class("somatize-explorer-axis")
            self.labels.append(label)
            self.stacks.append(w.VBox([label, figure], layout=w.Layout(flex="1 1 0px", margin="0",
                                                                        overflow="hidden")))
            texts.extend(t for _, t in labelled)
            selector.observe(lambda change, i=i: self._brushed(i), ["selected", "brushing"])
            self.columns.append(figure)
            self.selectors.append(selector)
            self.marks.append(marks)
        self.head = w.HTML()
        self.curve_x, self.curve_y = bq.LinearScale(), bq.LinearScale()
        self.curve_lines = [bq.Lines(x=[], y=[], scales={"x": self.curve_x, "y": self.curve_y}, stroke_width=1.75,
                                     visible=False) for _ in range(CURVES)]
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
        parts = [self.head, w.HBox(self.stacks, layout=w.Layout(width="100%", margin="0", overflow="auto hidden"))]
        if explorer.fact is not None:
            parts += [self.curves_head, self.curves]
        self.box = w.VBox(parts, layout=w.Layout(width="100%"))
        self.box.add_class("somatize-explorer")
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
        self.head.value = (STYLE + f'<div class="somatize-explorer-head"><b>{escape(e.title())}</b><br>'
                           f'<code>where={escape(repr(where))}</code></div>')
        width = e.picture_width()
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
                    mark.stroke_width = width
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
