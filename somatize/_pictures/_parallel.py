"""The explorer's static picture: parallel coordinates as SVG (no script).

It draws what ``_widgets/_compare`` decided (each axis's label, note, ticks
and brush; the lines between neighbouring axes, their places, colours and
opacities), as the page's bqplot views draw the same data. Lines of one
colour and opacity are one ``<path>``, so a picture of 10,000 binned runs
weighs a few tens of kilobytes.
"""

from __future__ import annotations

from ._svg import GRID, INK, MUTED, SERIES, WIDE, _fit, svg_open, svg_text

HEIGHT = 300
MISSING_LABEL = "no value"


def span(missing, missing_at):
    """The places the picture's height covers: (foot, top), room below the
    axes' foot for the runs without a value when there are some."""
    return (missing_at - 0.05 if missing else -0.03), 1.03


def parallel_svg(data, *, title, missing_at=-0.12, width=WIDE, height=HEIGHT):
    """An SVG of ``data`` (``Explorer.picture()``): one vertical axis a
    column, the metric first."""
    axes = data["axes"]
    top_m, bottom_m, side = 44, 14, 8
    h = height - top_m - bottom_m
    col = (width - 2 * side) / max(1, len(axes))
    lo, hi = span(data["missing"], missing_at)

    def px(i):
        return side + (i + 0.5) * col + 12  # a little right of the middle: the tick labels sit on the left

    def py(p):
        return top_m + (hi - p) / (hi - lo) * h

    parts = [svg_open(width, height, title)]
    for g, (foot, tip, color, opacity) in enumerate(data["gaps"]):
        groups: dict = {}
        for a, b, c, o in zip(foot.tolist(), tip.tolist(), color.tolist(), opacity.tolist()):
            groups.setdefault((c, round(o * 8) / 8 or 0.06), []).append(
                f"M{px(g):.0f} {py(a):.0f}L{px(g + 1):.0f} {py(b):.0f}")  # whole pixels: 300 runs in 30 KB
        for (c, o), segments in groups.items():
            parts.append(f'<path class="run-lines" d="{"".join(segments)}" style="fill:none;stroke:{c};'
                         f'stroke-opacity:{o:g};stroke-width:{data["width"]:g}"/>')
    for i, axis in enumerate(axes):
        x = px(i)
        parts.append(f'<line class="axis" x1="{x:.1f}" y1="{py(1):.1f}" x2="{x:.1f}" y2="{py(0):.1f}" '
                     f'style="stroke:{MUTED};stroke-width:1.25"/>')
        for place, label in axis["ticks"]:
            y = py(place)
            parts.append(f'<line x1="{x - 4:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y:.1f}" style="stroke:{MUTED}"/>')
            parts.append(svg_text(x - 6, y + 4, _fit(str(label), col * 0.55, 11), 11, INK, "end",
                               extra='class="tick"'))
        if axis.get("lacks"):
            parts.append(svg_text(x - 6, py(missing_at) + 4, MISSING_LABEL, 10, MUTED, "end", extra='class="tick"'))
            parts.append(f'<circle cx="{x:.1f}" cy="{py(missing_at):.1f}" r="2" style="fill:{MUTED}"/>')
        if axis["brush"] is not None:
            a, b = axis["brush"]
            y0, y1 = py(max(b, lo)), py(max(a, lo))
            parts.append(f'<rect class="brush" x="{x - 7:.1f}" y="{y0:.1f}" width="14" '
                         f'height="{max(2.0, y1 - y0):.1f}" rx="2" '
                         f'style="fill:{SERIES[0]};fill-opacity:0.22;stroke:{SERIES[0]};stroke-width:1"/>')
        parts.append(svg_text(x, 16, _fit(axis["label"], col - 4, 12), 12, INK, "middle", "600", 'class="axis-label"'))
        parts.append(svg_text(x, 31, axis["note"], 11, MUTED, "middle", extra='class="axis-note"'))
    parts.append(f'<line x1="{side}" y1="{top_m - 6}" x2="{width - side}" y2="{top_m - 6}" style="stroke:{GRID}"/>')
    parts.append("</svg>")
    return "".join(parts)

