"""Static pictures: every panel's fallback, as self-contained HTML + SVG.

The rule it keeps: a notebook reads well where widgets do not run (GitHub,
nbviewer, nbconvert). So these pictures use no script, no external file and
no font that may be missing; colours go through JupyterLab's CSS variables
with a fallback, so they follow the theme where there is one and look right
where there is none. Everything printed is escaped.
"""

from __future__ import annotations

import base64
import math
import re
from html import escape

from . import _chart

FONT = "var(--jp-ui-font-family, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif)"
# The one palette: JupyterLab's theme variables, each with the light theme's
# value as fallback. The page draws them in the theme it has (dark too); a
# static picture (an <img>, where no variable is defined) draws the fallbacks
# on its own light background. chart.js and panel.css receive these very
# strings, so no colour is written twice.
INK = "var(--jp-ui-font-color1, #1f2937)"
MUTED = "var(--jp-ui-font-color2, #6b7280)"
GRID = "var(--jp-border-color2, #e5e7eb)"
TRACK = "var(--jp-border-color1, #d1d5db)"
SURFACE = "var(--jp-layout-color1, #ffffff)"
RAISED = "var(--jp-layout-color2, #f3f4f6)"
SERIES = ["var(--jp-brand-color1, #2563eb)", "var(--jp-warn-color1, #ea580c)", "var(--jp-success-color1, #16a34a)",
          "var(--jp-accent-color1, #9333ea)", "var(--jp-info-color1, #0891b2)", "var(--jp-error-color1, #be123c)",
          "var(--jp-warn-color2, #ca8a04)", "var(--jp-ui-font-color2, #4b5563)"]
STATE = {"waiting": "var(--jp-ui-font-color2, #6b7280)", "running": SERIES[0],
         "finished": "var(--jp-success-color1, #16a34a)", "interrupted": "var(--jp-error-color1, #dc2626)"}
SLOW = "var(--jp-warn-color1, #ea580c)"
BAD = "var(--jp-error-color1, #dc2626)"
OVERHEAD = "var(--jp-ui-font-color3, #9ca3af)"
PART_SHADES = (1.0, 0.7, 0.45, 0.25)  # the parts of one bar: its colour, each lighter than the one before
WIDE = 720  # the width the spent panel is drawn at; it shrinks to fit a narrower cell
# ... down to a cell of NARROW_BELOW px; below that the widget shows the same
# figures laid out for NARROW px (labels above the bars), so no text shrinks
# past legibility (panel.css's container query picks one; a picture has no
# cell to ask, and keeps the wide one)
NARROW, NARROW_BELOW = 400, 600

number = _chart.number
ticks = _chart.ticks


def duration_us(us):
    """Microseconds as a human reads them: µs, ms or s."""
    if us is None:
        return "—"
    shown = float(f"{us:.3g}")  # the unit chosen after rounding: 999.7 µs reads "1 ms", not "1e+03 µs"
    size, unit = next(((size, unit) for size, unit in ((1e6, "s"), (1e3, "ms")) if abs(shown) >= size), (1, "µs"))
    return f"{shown / size:.3g} {unit}"


def seconds(s):
    if s is None:
        return "—"
    if s >= 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    if s >= 60:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{s:.1f} s"


def svg_open(width, height, label):
    """The opening tag of a picture: its size (it shrinks to a narrower cell),
    the panel font, `label` for screen readers, and the panel's background."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" style="max-width:100%;height:auto" font-family="{FONT}" role="img" '
            f'aria-label="{escape(label)}"><rect class="ground" width="100%" height="100%" style="fill:{SURFACE}"/>')


def svg_text(x, y, s, size=12, color=INK, anchor="start", weight="normal", extra=""):
    """An SVG ``<text>`` of ``s`` (escaped) at ``x``, ``y``: its size, fill, anchor and weight."""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" style="fill:{color}" '
        f'text-anchor="{anchor}" font-weight="{weight}" {extra}>{escape(str(s))}</text>'
    )


def line_chart(data, *, width=WIDE, height=260, legend=True):
    """An SVG line chart of `_chart.chart`'s data: the ticks, labels and
    points it holds, placed at this size (the page places the same data at
    its own width, in chart.js); a legend when it has several series, unless
    `legend=False` (the explorer's curves say whose they are in its title)."""
    left, right, top, bottom = 64, 16, 12, 44
    w, h = width - left - right, height - top - bottom
    parts = [svg_open(width, height, f"{data['ylabel']} over {data['xlabel']}")]
    if data["y"] is None:
        parts.append(svg_text(left + w / 2, top + h / 2, "no values yet", 13, MUTED, "middle"))
        parts.append("</svg>")
        return "".join(parts)
    (x0, x1), (y0, y1) = data["x"], data["y"]
    f = math.log10 if data["log"] else float

    def px(x):
        return left + (x - x0) / (x1 - x0) * w

    def py(y):
        return top + (1 - (f(y) - y0) / (y1 - y0)) * h

    for t, label in data["xticks"]:
        X = px(t)
        parts.append(f'<line x1="{X:.1f}" y1="{top}" x2="{X:.1f}" y2="{top + h}" style="stroke:{GRID}"/>')
        parts.append(svg_text(X, top + h + 16, label, 11, MUTED, "middle", extra='class="tick"'))
    for t, label in data["yticks"]:
        Y = py(t)
        parts.append(f'<line x1="{left}" y1="{Y:.1f}" x2="{left + w}" y2="{Y:.1f}" style="stroke:{GRID}"/>')
        parts.append(svg_text(left - 6, Y + 4, label, 11, MUTED, "end", extra='class="tick"'))
    parts.append(f'<rect x="{left}" y="{top}" width="{w}" height="{h}" style="fill:none;stroke:{GRID}"/>')
    parts.append(svg_text(left + w / 2, height - 8, data["xlabel"], 12, INK, "middle"))
    parts.append(svg_text(14, top + h / 2, data["ylabel"], 12, INK, "middle",
                       extra=f'transform="rotate(-90 14 {top + h / 2:.1f})"'))
    clip = f"clip-{id(data)}"
    parts.append(f'<clipPath id="{clip}"><rect x="{left}" y="{top}" width="{w}" height="{h}"/></clipPath>')
    for s in data["series"]:
        band = [p for p in s["band"] if x0 <= p[0] <= x1]
        if len(band) > 1:
            upper = " ".join(f"{px(x):.1f},{py(hi):.1f}" for x, _, hi in band)
            lower = " ".join(f"{px(x):.1f},{py(lo):.1f}" for x, lo, _ in reversed(band))
            parts.append(f'<polygon clip-path="url(#{clip})" points="{upper} {lower}" '
                         f'style="fill:{s["color"]};fill-opacity:0.15;stroke:none"/>')
        raw = [p for p in s.get("raw", ()) if x0 <= p[0] <= x1]
        if raw:  # the unsmoothed values, faded behind the smoothed line
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in raw)
            parts.append(f'<polyline class="raw" clip-path="url(#{clip})" points="{path}" '
                         f'style="fill:none;stroke:{s["color"]};stroke-opacity:0.25;stroke-width:1"/>')
        pts = [p for p in s["points"] if x0 <= p[0] <= x1]
        if pts:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            parts.append(f'<polyline class="curve" clip-path="url(#{clip})" points="{path}" '
                         f'style="fill:none;stroke:{s["color"]};stroke-width:1.75;stroke-linejoin:round"/>')
            if s.get("dots"):
                parts.extend(f'<circle class="dot" cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" '
                             f'style="fill:{s["color"]}"/>' for x, y in pts)
    for m in data["marks"]:
        X = px(m["x"])
        parts.append(f'<line class="mark" x1="{X:.1f}" y1="{top}" x2="{X:.1f}" y2="{top + h}" '
                     f'style="stroke:{BAD};stroke-dasharray:4 3"/>')
        parts.append(svg_text(X - 4, top + h - 6, m["label"], 11, BAD, "end"))  # at the foot: a diverging line is high
    if legend and len(data["series"]) > 1:
        for i, s in enumerate(data["series"]):
            Y = top + 12 + i * 16
            parts.append(f'<rect x="{left + w - 150}" y="{Y - 5}" width="14" height="3" style="fill:{s["color"]}"/>')
            parts.append(svg_text(left + w - 130, Y, s["name"], 11, INK))
    parts.append("</svg>")
    return "".join(parts)


def boxed(inner, title=None, badge=None):
    """A panel's frame: a title (with a coloured pill when `badge` is (text, colour)) over `inner`."""
    head = ""
    if title is not None:
        pill = ""
        if badge is not None:
            text, color = badge
            pill = (f'<span style="margin-left:8px;padding:1px 8px;border-radius:9px;font-size:11px;'
                    f'color:#fff;background:{color}">{escape(text)}</span>')
        head = (f'<div style="font-weight:600;font-size:14px;margin-bottom:6px;color:{INK}">'
                f'{escape(title)}{pill}</div>')
    inner = as_images(inner)
    return (f'<div class="somatize-static" style="font-family:{FONT};color:{INK};background:{SURFACE};'
            f'border:1px solid {GRID};border-radius:6px;padding:10px 12px;max-width:{WIDE + 26}px">{head}{inner}</div>')


_SVG = re.compile(r"<svg\b.*?</svg>", re.S)
_LABEL = re.compile(r'aria-label="([^"]*)"')


def as_images(html):
    """`html` with each inline SVG made an <img> of it (a data: URL). What a
    reader sees where no script runs: JupyterLab's sanitiser (an untrusted
    notebook) strips inline SVG but keeps an image; GitHub, nbviewer and
    nbconvert show it too. Inside an image no theme variable is defined, so
    the picture draws the fallbacks on its own light ground."""
    def image(m):
        svg = m.group(0)
        label = _LABEL.search(svg)
        width = re.search(r'width="(\d+)"', svg).group(1)
        data = base64.b64encode(svg.encode()).decode()
        return (f'<img class="somatize-picture" src="data:image/svg+xml;base64,{data}" width="{width}" '
                f'alt="{label.group(1) if label else "picture"}" style="max-width:100%;height:auto"/>')
    return _SVG.sub(image, html)


def stats_row(items):
    cells = "".join(
        f'<div style="min-width:88px"><div style="font-size:11px;color:{MUTED}">{escape(k)}</div>'
        f'<div style="font-size:15px;font-variant-numeric:tabular-nums">{escape(v)}</div></div>'
        for k, v in items
    )
    return f'<div style="display:flex;gap:16px;flex-wrap:wrap;margin-bottom:6px">{cells}</div>'


def live_html(snap):
    state = snap["state"] + (f" ({snap['cause']})" if snap.get("cause") else "")
    stats = stats_row([(label, value) for _, label, value in live_stats(snap)])
    return boxed(stats + line_chart(snap["chart"]), snap["title"], (state, STATE.get(snap["state"], MUTED)))


def live_stats(snap):
    """[(key, label, text)] of Live's stats row: one list for the page and the picture."""
    out = [("steps", "steps", f"{snap['steps']:,}" + (f" of {snap['total']:,}" if snap.get("total") else "")),
           ("rate", "steps/s", number(snap["steps_per_s"])),
           ("last", "last loss", snap["last_text"]),
           ("best", "best loss", number(snap["best"])),
           ("elapsed", "elapsed", seconds(snap["elapsed_s"]))]
    if snap.get("eta_s") is not None:
        out.append(("eta", "to go", seconds(snap["eta_s"])))
    return out


def _data_attrs(attrs):
    return "".join(f' data-{k}="{escape(str(v))}"' for k, v in (attrs or {}).items())


def _tip(text):
    # An SVG <title> is the hover text in a browser, and costs nothing where there is none.
    return f"<title>{escape(text)}</title>" if text else ""


def bars_svg(rows, *, title, unit_label):
    """Horizontal bars, longest first. rows: [{"label", "value", "text",
    "color", "data": {attr: value} optional, "tip": hover text optional,
    "parts": optional [{"name", "value", "color", "opacity", "text", "tip"}]
    that cut the bar (their values add up to its own), each said below it}]."""
    width, bar_h, gap, left, right = WIDE, 18, 6, 200, 235
    top = max((r["value"] for r in rows), default=0) or 1
    per = (width - left - right) / top
    body, y = [], 8
    for r in rows:
        w = max(1.0, r["value"] * per)
        body.append(svg_text(left - 8, y + bar_h - 5, r["label"], 12, INK, "end"))
        body.append(f'<rect class="bar" x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" rx="2" '
                    f'style="fill:{r["color"]}"{_data_attrs(r.get("data"))}>{_tip(r.get("tip"))}</rect>')
        body.append(svg_text(left + w + 6, y + bar_h - 5, r["text"], 11, MUTED))
        if r.get("parts"):
            body.extend(_part_rects(r["parts"], left, y, bar_h, per))
            legend, last = _part_legend(r["parts"], left, y + bar_h + 4, width - left)
            body.extend(legend)
            y = last + 16 - bar_h - 4
        y += bar_h + gap
    height = y + 20
    return "".join([svg_open(width, height, title), *body, svg_text(left, height - 4, unit_label, 11, MUTED), "</svg>"])


def bars_svg_narrow(rows, *, title, unit_label, width=NARROW):
    """``bars_svg``'s rows for a narrow cell: each label on a line of its own
    above its bar, a cut bar's parts said on as many lines as they need."""
    bar_h, per_char = 14, 0.56 * 11  # a glyph of the 11 px numbers is about this wide
    top = max((r["value"] for r in rows), default=0) or 1
    # the bars leave room for the longest numbers; a bar is never under 40% of the width
    per = max(width - 2 - max(per_char * len(r["text"]) + 8 for r in rows), width * 0.4) / top
    body, y = [], 4
    for r in rows:
        w = max(1.0, r["value"] * per)
        body.append(svg_text(0, y + 11, _fit(r["label"], width, 12), 12, INK))
        y += 15
        body.append(f'<rect class="bar" x="0" y="{y}" width="{w:.1f}" height="{bar_h}" rx="2" '
                    f'style="fill:{r["color"]}"{_data_attrs(r.get("data"))}>{_tip(r.get("tip"))}</rect>')
        body.append(svg_text(w + 6, y + bar_h - 3, _fit(r["text"], width - w - 6, 11), 11, MUTED))
        if r.get("parts"):
            body.extend(_part_rects(r["parts"], 0, y, bar_h, per))
            legend, last = _part_legend(r["parts"], 0, y + bar_h + 4, width)
            body.extend(legend)
            y = last + 14 - bar_h - 4
        y += bar_h + 10
    height = y + 16
    return "".join([svg_open(width, height, title), *body, svg_text(0, height - 4, unit_label, 11, MUTED), "</svg>"])


def _fit(text, room, size):
    """``text`` cut with an ellipsis to what ``room`` px hold at ``size`` px
    (a glyph is about 0.56 of the size wide in the panel font)."""
    most = max(1, int(room / (0.56 * size)))
    return text if len(text) <= most else text[: most - 1] + "…"


def _part_rects(cut, left, y, bar_h, per):
    """A bar's parts drawn over it, left to right, each a pixel short (a gap to the next)."""
    out, x = [], float(left)
    for p in cut:
        w = p["value"] * per
        shade = f'fill:{p["color"]};fill-opacity:{p["opacity"]}'
        # on the panel's ground, not over the bar's own colour, so each shade reads as itself
        out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" style="fill:{SURFACE}"/>')
        out.append(f'<rect class="part" x="{x:.1f}" y="{y}" width="{max(0.0, w - 1):.1f}" height="{bar_h}" '
                   f'style="{shade}" data-part="{escape(p["name"])}">{_tip(p.get("tip"))}</rect>')
        x += w
    return out


def _part_legend(cut, left, top, room):
    """A cut bar's parts said after a swatch of each one's shade, left to
    right from ``left``, on as many lines (14 px apart, the first at ``top``)
    as ``room`` px need; (the SVG elements, the top of the last line)."""
    out, said, line = [], 0.0, top
    for p in cut:
        need = 12 + 0.56 * 10 * len(p["text"]) + 10  # a glyph of the 10 px text is about 0.56 of it wide
        if said and said + need > room:
            said, line = 0.0, line + 14
        shade = f'fill:{p["color"]};fill-opacity:{p["opacity"]}'
        out.append(f'<rect x="{left + said:.1f}" y="{line}" width="9" height="9" style="{shade}"/>')
        out.append(svg_text(left + said + 12, line + 8, p["text"], 10, MUTED, extra='class="part-text"'))
        said += need
    return out, line


def timeline_svg(spans, total_us, *, width=None):
    """One forward: which node ran when. spans: [(label, began_us, took_us, color)].
    Under ``WIDE`` px the label column narrows and long labels are cut (the
    span's hover text keeps the whole name)."""
    width = width or WIDE
    left, right, lane = (200 if width >= WIDE else 110), 20, 20
    height = 44 + len(spans) * lane
    total = max(total_us or 0, max((b + t for _, b, t, _ in spans), default=0)) or 1
    w = width - left - right
    parts = [svg_open(width, height, "timeline of one forward")]
    for t in ticks(0, total, 5):
        X = left + t / total * w
        parts.append(f'<line x1="{X:.1f}" y1="4" x2="{X:.1f}" y2="{height - 34}" style="stroke:{GRID}"/>')
        parts.append(svg_text(X, height - 20, duration_us(t), 11, MUTED, "middle"))
    for i, (label, began, took, color) in enumerate(spans):
        y = 6 + i * lane
        parts.append(svg_text(left - 8, y + 12, _fit(label, left - 10, 12), 12, INK, "end"))
        parts.append(f'<rect class="span" x="{left + began / total * w:.1f}" y="{y}" '
                     f'width="{max(1.5, took / total * w):.1f}" height="{lane - 6}" rx="2" style="fill:{color}">'
                     f'{_tip(f"{label}: began at {duration_us(began)}, took {duration_us(took)}")}</rect>')
    parts.append(svg_text(left + w / 2, height - 3, "time since the forward began", 11, MUTED, "middle"))
    parts.append("</svg>")
    return "".join(parts)
