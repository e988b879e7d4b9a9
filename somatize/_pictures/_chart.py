"""One line chart for every panel: its scale, its ticks and its data.

The rule it keeps: the static picture and the live view agree by
construction. Python decides the scale (linear or log), the ranges and every
tick (value and label) here; `_svg.line_chart` draws that data without a
browser, `js/widgets/chart.js` draws the very same data in the page at
whatever width the cell gives it, and the run browser's panel
(`js/sidebar/panel.ts`) draws what the server's chart route answers with it.
None of them computes a tick of its own. It lives in the pictures layer,
below both the notebook panels (`_widgets`) and the server (`_server`), and
imports nothing of somatize.

Steps are whole numbers: the step axis never shows 0.5. A log axis shows at
most `MAX_TICKS` labels evenly spread along it: 1-2-5 in each decade when the
range is short, 1-3 when it is longer, decades beyond (every second, fifth or
tenth decade when the loss diverges).
"""

from __future__ import annotations

import math

MAX_TICKS = 7


def number(x):
    """A short, readable number for a label."""
    if x is None:
        return "—"
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if x != x else ("inf" if x > 0 else "-inf")
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


def tick_label(x):
    """A tick's label: as `number`, but short enough for the axis margin
    (1e5 and 2.5e-7 rather than 100,000 and 2.5e-07)."""
    a = abs(x)
    if a and (a >= 1e4 or a < 1e-3):
        return _short(f"{x:.3g}")
    return number(x)


def _short(text):
    """A number's text with its exponent written short: 1e5, 2.5e-7."""
    return text.replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def distinct(values, label):
    """[[value, text]]: each value with ``label(value)``, or, where the texts
    would not tell the ticks apart (1000.1 and 1000.2 both "1,000"; 2.025e-13
    as "2.02e-13", a fifth of the way to the next), every value with as many
    significant digits as it takes for each to read as itself, within a
    hundredth of the gap between two ticks."""
    gap = min((abs(b - a) for a, b in zip(values, values[1:])), default=0.0)

    def legible(texts):
        return len(set(texts)) == len(texts) and all(
            abs(float(t.replace(",", "")) - v) <= gap / 100 for v, t in zip(values, texts))

    texts = [label(v) for v in values]
    digits = 4
    while not legible(texts) and digits <= 17:
        texts = [_short(f"{v:.{digits}g}") for v in values]
        digits += 1
    return [[v, t] for v, t in zip(values, texts)]


def ticks(lo, hi, count=5, whole=False):
    """Round tick values covering [lo, hi], increasing: about `count` of
    them, at most 1.25 × `count` + 1; `whole`: whole numbers only. Where a
    float's spacing is wider than the step (past 2**53), the ticks that
    round to one float are one tick."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / count
    mag = 10.0 ** math.floor(math.log10(raw))  # a float: 10 ** 20 as an int is past what JSON holds
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if whole:  # a step is a whole number: never a tick at 0.5 or 2.5
        step = 1 if step < 1 else 2 if step == 2.5 else step
    first = math.ceil(lo / step - 1e-9) * step
    digits = 3 - math.floor(math.log10(step))  # rounded relative to the step: 3e-13 stays, 1e15 + 2 too
    # counted, never stepped: t += step stands still where the step is under half a float's spacing.
    # At most count * 1.25 + 1: the step is at least (hi - lo) / count, or 2 where 2.5 was
    n = max(0, math.floor((hi - first) / step + 1e-9) + 1)
    return list(dict.fromkeys(round(first + i * step, digits) for i in range(n)))


def log_ticks(lo, hi):
    """Tick values for a log axis over [lo, hi] (both > 0), evenly spread on
    that axis and at most `MAX_TICKS`: 1-2-5 in each decade when they fit,
    else 1-3 (each about half a decade from the next; 1-5 would leave gaps of
    0.3 and 0.7), else decades (every k-th when there are too many). When
    fewer than two of 1-2-5 fall inside: round values, as on a linear axis."""
    a, b = math.floor(math.log10(lo) + 1e-9), math.ceil(math.log10(hi) - 1e-9)

    def within(mantissas):
        # up to 1e308: 10.0 ** 309 is past the largest float
        every = [m * 10.0**k for k in range(a - 1, min(b, 308) + 1) for m in mantissas]
        return [v for v in every if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]

    fine = within((1, 2, 5))
    if len(fine) < 2:
        return [t for t in ticks(lo, hi, 4) if t > 0]
    if len(fine) <= MAX_TICKS:
        return fine
    thirds = within((1, 3))
    if len(thirds) <= MAX_TICKS:
        return thirds
    decades = within((1,))
    every = next(k for k in (1, 2, 5, 10, 20, 50, 100) if len(decades) / k <= MAX_TICKS)
    return [v for v in decades if round(math.log10(v)) % every == 0]


# The units of a time axis: (seconds in one, name), the largest that the range holds twice.
TIME_UNITS = ((3600.0, "h"), (60.0, "min"), (1.0, "s"))
# Round steps between ticks of a clock axis, in seconds.
CLOCK_STEPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
               3600, 7200, 10800, 21600, 43200, 86400)


def time_unit(span_s):
    """(seconds in one, name) of the unit a time axis over `span_s` seconds counts in."""
    return next((u for u in TIME_UNITS if span_s >= 2 * u[0]), TIME_UNITS[-1])


def clock_ticks(lo, hi, count=6):
    """[(t, label)]: round moments of the local clock (t in seconds since
    1970) inside [lo, hi], at most about `count`, labelled as a clock reads."""
    import time

    span = max(hi - lo, 1e-9)
    step = next((s for s in CLOCK_STEPS if span / s <= count), None)
    if step is None:  # longer than days: whole days
        step = 86400 * math.ceil(span / count / 86400)
    offset = time.localtime(lo).tm_gmtoff  # round in local time: 14:00, not 14:00 UTC shifted
    first = math.ceil((lo + offset) / step - 1e-9) * step - offset
    fmt = "%H:%M:%S" if step < 60 else "%H:%M"
    if hi - lo >= 86400:
        fmt = "%b %d %H:%M"
    digits = 0 if step >= 1 else 1 if step >= 0.1 else 2  # a fraction of a second, when the steps are
    out = []
    for i in range(int((hi - first) / step + 1e-6) + 1):
        t = round(first + i * step, 6)
        whole = math.floor(t)
        label = time.strftime(fmt, time.localtime(whole))
        if digits:
            label += f"{t - whole:.{digits}f}"[1:]
        out.append([t, label])
    return out


def clock_label(lo, hi):
    """What a clock axis says it shows: the local clock, with its zone and the day."""
    import time

    here = time.localtime(lo)
    zone = time.strftime("%Z", here) or "local"
    return f"clock time, {time.strftime('%Y-%m-%d', here)} ({zone})"


def wants_log(ys):
    """Log scale when every value is positive and they span more than two decades."""
    ys = [y for y in ys if y is not None]
    return bool(ys) and min(ys) > 0 and max(ys) / min(ys) > 100


def chart(series, *, log=None, xlabel="step", ylabel="loss", window=None, outliers=False, marks=(), x="step"):
    """The chart's data. `series`: [{"name", "color", "points": [(x, y)],
    "band": [(x, lo, hi)] optional}]; `log`: None chooses from the data;
    `window`: (x0, x1) to show part of x (the y range fits what is inside);
    `raw` in a series: its unsmoothed values, drawn faded behind it;
    `dots` in a series: True draws a dot at each point (a fact said now and
    then, a validation loss: one point is a dot, not nothing);
    `outliers`: True leaves the values past the 1st/99th percentile out of
    the y range; `marks`: [{"x", "label"}], vertical lines (a step that went
    non-finite); `x`: what x counts, "step" (whole numbers), "relative"
    (seconds since the run began, ticked in s, min or h, the axis saying
    which) or "wall" (seconds since 1970, ticked as the local clock reads).
    Everything the page needs: ranges, ticks, labels, points."""
    kind = x
    pts = [(x, y) for s in series for x, y in s["points"] if y is not None and math.isfinite(y)]
    if log is None:
        log = wants_log([y for _, y in pts])
    f = math.log10 if log else float
    xs = [x for x, _ in pts]
    x0, x1 = (min(xs), max(xs)) if xs else (0, 1)
    x1 = max([x1] + [m["x"] for m in marks])  # a step marked (went non-finite) is inside the plot
    if window:
        x0, x1 = max(x0, window[0]), min(x1, window[1])
    if x1 <= x0:
        x1 = x0 + 1
    inside = [y for x, y in pts if x0 <= x <= x1 and (not log or y > 0)]
    inside += [v for s in series for x, lo, hi in s.get("band", ()) if x0 <= x <= x1
               for v in (lo, hi) if v is not None and math.isfinite(v) and (not log or v > 0)]
    if outliers and len(inside) > 20:
        ordered = sorted(inside)
        cut = len(ordered) // 100 + 1
        inside = ordered[cut:-cut]
    if kind == "relative":
        out_unit = time_unit(x1 - min(x0, 0.0))
        xlabel = f"{xlabel} ({out_unit[1]})"
    elif kind == "wall":
        xlabel = clock_label(x0, x1)
    out = {"log": bool(log), "xlabel": xlabel, "xkind": kind, "ylabel": ylabel + (" (log scale)" if log else ""),
           "x": [x0, x1], "y": None, "xticks": [], "yticks": [], "marks": list(marks),
           "series": [{"name": s["name"], "color": s["color"], "dots": bool(s.get("dots")),
                       "points": [[x, y] for x, y in s["points"] if y is not None and math.isfinite(y)
                                  and (not log or y > 0)],
                       "band": [[x, lo, hi] for x, lo, hi in s.get("band", ())
                                if lo is not None and hi is not None and (not log or lo > 0)],
                       "raw": [[x, y] for x, y in s.get("raw", ()) if y is not None and math.isfinite(y)
                               and (not log or y > 0)]}
                      for s in series]}
    if not inside:
        return out
    y0, y1 = f(min(inside)), f(max(inside))
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad
    out["y"] = [y0, y1]  # in the axis's own space: log10 of the value on a log axis
    out["xticks"] = _xticks(x0, x1, xs, kind, out)
    # the padded range stays inside what a float holds (a loss near 1e308 padded is past it)
    yt = log_ticks(10 ** max(y0, -323.0), 10 ** min(y1, 308.25)) if log else ticks(y0, y1, 5)
    out["yticks"] = distinct([t for t in yt if y0 - 1e-9 <= f(t) <= y1 + 1e-9], tick_label)
    return out


def _xticks(x0, x1, xs, kind, out):
    """[[x, label]] of the x axis; a time axis also says how the page labels
    a moment (`xdiv`: x is divided by it; `xclock`: x is a clock time)."""
    if kind == "wall":
        out["xclock"] = True
        return clock_ticks(x0, x1)
    if kind == "relative":
        div, _ = time_unit(x1 - min(x0, 0.0))
        out["xdiv"] = div
        shown = [t for t in ticks(x0 / div, x1 / div, 6) if x0 / div - 1e-9 <= t <= x1 / div + 1e-9]
        return [[t * div, text] for t, text in distinct(shown, number)]
    whole = all(float(x).is_integer() for x in xs[:50])
    xt = ticks(x0, x1, 6, whole=whole)
    shown = [t for t in xt if x0 - 1e-9 <= t <= x1 + 1e-9]
    return distinct(shown, lambda t: number(t) if abs(t) < 1e6 else tick_label(t))
