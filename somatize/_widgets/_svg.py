"""Static pictures: every panel's fallback, as self-contained HTML + SVG.

The rule it keeps: a notebook reads well where widgets do not run (GitHub,
nbviewer, nbconvert). So these pictures use no script, no external file and
no font that may be missing; colours go through JupyterLab's CSS variables
with a fallback, so they follow the theme where there is one and look right
where there is none. Everything printed is escaped.
"""

from __future__ import annotations

import math
from html import escape

FONT = "var(--jp-ui-font-family, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif)"
INK = "var(--jp-ui-font-color1, #1f2937)"
MUTED = "var(--jp-ui-font-color2, #6b7280)"
GRID = "var(--jp-border-color2, #e5e7eb)"
SURFACE = "var(--jp-layout-color1, #ffffff)"
# One palette everywhere (Live, progress, spent, the graph panel, the JS too).
SERIES = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be123c", "#ca8a04", "#4b5563"]
STATE = {"waiting": "#6b7280", "running": "#2563eb", "finished": "#16a34a", "failed": "#dc2626"}
SLOW = "#ea580c"
OVERHEAD = "#9ca3af"
WIDE = 720  # the width of the spent panel's pictures, in the lab and on GitHub alike


def ticks(lo, hi, count=5):
    """Round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out, t = [], first
    while t <= hi + step * 1e-9:
        out.append(round(t, 12))
        t += step
    return out


def number(x):
    """A short, readable number for a label."""
    if x is None:
        return "—"
    if x == 0:
        return "0"
    a = abs(x)
    if float(x).is_integer() and a < 1e9:
        return f"{x:,.0f}"
    if a >= 1e5 or a < 1e-3:
        return f"{x:.3g}"
    if a >= 100:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def duration_us(us):
    """Microseconds as a human reads them: µs, ms or s."""
    if us is None:
        return "—"
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1e3:
        return f"{us / 1e3:.3g} ms"
    return f"{us:.3g} µs"


def seconds(s):
    if s is None:
        return "—"
    if s >= 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    if s >= 60:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{s:.1f} s"


def svg_open(width, height, label):
    """The opening tag of a picture: its size, the panel font, and `label` for screen readers."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="{FONT}" role="img" aria-label="{escape(label)}">')


def _text(x, y, s, size=12, color=INK, anchor="start", weight="normal", extra=""):
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{color}" '
        f'text-anchor="{anchor}" font-weight="{weight}" {extra}>{escape(str(s))}</text>'
    )


def line_chart(series, *, width=WIDE, height=260, xlabel="step", ylabel="loss", log=False):
    """An SVG line chart. `series`: [{"name", "color", "points": [(x, y)],
    "band": [(x, lo, hi)] optional}]. Axes are labelled; y may be log."""
    left, right, top, bottom = 64, 16, 12, 44
    w, h = width - left - right, height - top - bottom
    xs = [p[0] for s in series for p in s["points"] if p[1] is not None]
    ys = [p[1] for s in series for p in s["points"] if p[1] is not None]
    ys += [v for s in series for p in s.get("band", ()) for v in p[1:] if v is not None]
    if log:
        ys = [y for y in ys if y > 0]
    parts = [svg_open(width, height, f"{ylabel} over {xlabel}")]
    if not xs or not ys:
        parts.append(_text(left + w / 2, top + h / 2, "no values yet", 13, MUTED, "middle"))
        parts.append("</svg>")
        return "".join(parts)
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    f = (lambda v: math.log10(v)) if log else (lambda v: v)
    y0, y1 = f(min(ys)), f(max(ys))
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad

    def px(x):
        return left + (x - x0) / (x1 - x0) * w

    def py(y):
        return top + (1 - (f(y) - y0) / (y1 - y0)) * h

    # Grid and axes: ticks on round values, labels with the unit.
    for t in ticks(x0, x1, 6):
        X = px(t)
        parts.append(f'<line x1="{X:.1f}" y1="{top}" x2="{X:.1f}" y2="{top + h}" stroke="{GRID}" stroke-width="1"/>')
        parts.append(_text(X, top + h + 16, number(t), 11, MUTED, "middle"))
    yt = [10 ** k for k in range(math.floor(y0), math.ceil(y1) + 1)] if log else ticks(y0, y1, 5)
    for t in yt:
        if t <= 0 and log:
            continue
        Y = py(t)
        if Y < top - 0.5 or Y > top + h + 0.5:
            continue
        parts.append(f'<line x1="{left}" y1="{Y:.1f}" x2="{left + w}" y2="{Y:.1f}" stroke="{GRID}" stroke-width="1"/>')
        parts.append(_text(left - 6, Y + 4, number(t), 11, MUTED, "end"))
    parts.append(f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="{GRID}"/>')
    parts.append(_text(left + w / 2, height - 8, xlabel, 12, INK, "middle"))
    parts.append(_text(14, top + h / 2, ylabel, 12, INK, "middle",
                       extra=f'transform="rotate(-90 14 {top + h / 2:.1f})"'))
    for s in series:
        band = [(x, lo, hi) for x, lo, hi in s.get("band", ()) if lo is not None and hi is not None
                and (not log or lo > 0)]
        if len(band) > 1:
            upper = " ".join(f"{px(x):.1f},{py(hi):.1f}" for x, _, hi in band)
            lower = " ".join(f"{px(x):.1f},{py(lo):.1f}" for x, lo, _ in reversed(band))
            parts.append(f'<polygon points="{upper} {lower}" fill="{s["color"]}" fill-opacity="0.15" stroke="none"/>')
        pts = [(x, y) for x, y in s["points"] if y is not None and (not log or y > 0)]
        if pts:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            parts.append(f'<polyline class="curve" points="{path}" fill="none" stroke="{s["color"]}" '
                         f'stroke-width="1.75" stroke-linejoin="round"/>')
    if len(series) > 1:
        for i, s in enumerate(series):
            Y = top + 10 + i * 16
            parts.append(f'<rect x="{left + w - 150}" y="{Y - 6}" width="12" height="3" fill="{s["color"]}"/>')
            parts.append(_text(left + w - 132, Y, s["name"], 11, INK))
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
    return (f'<div class="somatize-static" style="font-family:{FONT};color:{INK};background:{SURFACE};'
            f'border:1px solid {GRID};border-radius:6px;padding:10px 12px;max-width:{WIDE + 26}px">{head}{inner}</div>')


def stats_row(items):
    cells = "".join(
        f'<div style="min-width:88px"><div style="font-size:11px;color:{MUTED}">{escape(k)}</div>'
        f'<div style="font-size:15px;font-variant-numeric:tabular-nums">{escape(v)}</div></div>'
        for k, v in items
    )
    return f'<div style="display:flex;gap:16px;flex-wrap:wrap;margin-bottom:6px">{cells}</div>'


def live_html(snap):
    state = snap["state"] + (f" ({snap['error']})" if snap.get("error") else "")
    stats = stats_row([
        ("steps", f"{snap['steps']:,}"),
        ("steps/s", number(snap["steps_per_s"])),
        ("last loss", number(snap["last"])),
        ("best loss", number(snap["best"])),
        ("elapsed", seconds(snap["elapsed_s"])),
    ])
    curve = snap["curve"]
    pos = [p for p in curve if p[1] is not None]
    log = (bool(pos) and all(p[2] is not None and p[2] > 0 for p in pos)
           and max(p[3] for p in pos) / min(p[2] for p in pos) > 100)
    chart = line_chart(
        [{"name": "loss", "color": SERIES[0], "points": [(p[0], p[1]) for p in curve],
          "band": [(p[0], p[2], p[3]) for p in curve] if snap["stride"] > 1 else []}],
        xlabel="step", ylabel="loss (log scale)" if log else "loss", log=log,
    )
    return boxed(stats + chart, snap["title"], (state, STATE.get(snap["state"], MUTED)))


def _data_attrs(attrs):
    return "".join(f' data-{k}="{escape(str(v))}"' for k, v in (attrs or {}).items())


def _tip(text):
    # An SVG <title> is the hover text in a browser, and costs nothing where there is none.
    return f"<title>{escape(text)}</title>" if text else ""


def bars_svg(rows, *, title, unit_label):
    """Horizontal bars, longest first. rows: [{"label", "value", "text",
    "color", "data": {attr: value} optional, "tip": hover text optional}]."""
    width, bar_h, gap, left, right = WIDE, 18, 6, 200, 235
    height = 28 + len(rows) * (bar_h + gap)
    top = max((r["value"] for r in rows), default=0) or 1
    parts = [svg_open(width, height, title)]
    for i, r in enumerate(rows):
        y = 8 + i * (bar_h + gap)
        w = max(1.0, r["value"] / top * (width - left - right))
        parts.append(_text(left - 8, y + bar_h - 5, r["label"], 12, INK, "end"))
        parts.append(f'<rect class="bar" x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" rx="2" '
                     f'fill="{r["color"]}"{_data_attrs(r.get("data"))}>{_tip(r.get("tip"))}</rect>')
        parts.append(_text(left + w + 6, y + bar_h - 5, r["text"], 11, MUTED))
    parts.append(_text(left, height - 4, unit_label, 11, MUTED))
    parts.append("</svg>")
    return "".join(parts)


def timeline_svg(spans, total_us, *, width=None):
    """One forward: which node ran when. spans: [(label, began_us, took_us, color)]."""
    width = width or WIDE
    left, right, lane = 200, 20, 20
    height = 44 + len(spans) * lane
    total = max(total_us or 0, max((b + t for _, b, t, _ in spans), default=0)) or 1
    w = width - left - right
    parts = [svg_open(width, height, "timeline of one forward")]
    for t in ticks(0, total, 5):
        X = left + t / total * w
        parts.append(f'<line x1="{X:.1f}" y1="4" x2="{X:.1f}" y2="{height - 34}" stroke="{GRID}"/>')
        parts.append(_text(X, height - 20, duration_us(t), 11, MUTED, "middle"))
    for i, (label, began, took, color) in enumerate(spans):
        y = 6 + i * lane
        parts.append(_text(left - 8, y + 12, label, 12, INK, "end"))
        parts.append(f'<rect class="span" x="{left + began / total * w:.1f}" y="{y}" '
                     f'width="{max(1.5, took / total * w):.1f}" height="{lane - 6}" rx="2" fill="{color}">'
                     f'{_tip(f"{label}: began at {duration_us(began)}, took {duration_us(took)}")}</rect>')
    parts.append(_text(left + w / 2, height - 3, "time since the forward began", 11, MUTED, "middle"))
    parts.append("</svg>")
    return "".join(parts)
