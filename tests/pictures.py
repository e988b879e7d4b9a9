"""Reading the static pictures the way a person does: the numbers in a
panel's stats row, durations and shares in its texts, and a chart's curve
read back through the tick labels printed on its axes. Tests compare what
this reads with the data, never the markup with a snapshot."""

import base64
import math
import re
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
UNITS = {"µs": 1, "ms": 1e3, "s": 1e6}
PIXEL = 0.2  # coordinates are printed to 0.1 px: what a reading may be off by, in pixels


IMAGE = "data:image/svg+xml;base64,"


def parse(html):
    """The picture as a tree, each SVG image put back in place as the SVG it
    shows (a static picture is HTML holding its SVGs as <img> data URLs)."""
    root = ET.fromstring(html)  # the static pictures are well-formed XML, or this raises
    for parent in root.iter():
        for i, child in enumerate(list(parent)):
            if child.tag == "img" and child.get("src", "").startswith(IMAGE):
                parent[i] = ET.fromstring(base64.b64decode(child.get("src")[len(IMAGE):]))
    return root


def svg_markup(html):
    """The SVG text inside `html`'s images, joined: for checks on the markup a reader's browser gets."""
    return "".join(base64.b64decode(m).decode() for m in re.findall(IMAGE.replace("+", r"\+") + r"([A-Za-z0-9+/=]+)",
                                                                     html))


def fill_of(element):
    """The colour an element is filled with, as its style or attribute says."""
    m = re.search(r"(?:^|;)\s*fill:\s*([^;]+)", element.get("style", ""))
    return m.group(1).strip() if m else element.get("fill")


def text_of(element):
    return "".join(element.itertext())


def durations(text):
    """Every duration written in `text` ("3.02 ms", "41 µs"), in µs."""
    return [float(v.replace(",", "")) * UNITS[u] for v, u in re.findall(r"(\d[\d.,]*) (µs|ms|s)\b", text)]


def percents(text):
    return [float(v) / 100 for v in re.findall(r"(\d+(?:\.\d+)?)%", text)]


def reads_as(text, value, digits=3):
    """True when the label `text` is `value` rounded at the last digit it
    shows, and shows at least `digits` significant digits of it."""
    m = re.fullmatch(r"(-?[\d,]+)(?:\.(\d+))?(?:e([+-]\d+))?", text)
    if m is None:
        return False
    shown = float(text.replace(",", ""))
    half = 0.5 * 10.0 ** (int(m.group(3) or 0) - len(m.group(2) or ""))
    off = abs(shown - value)
    return off <= half * (1 + 1e-9) and off <= 0.5 * 10.0 ** (1 - digits) * abs(value)


def stats(root):
    """{label: value} of a panel's stats row."""
    return {text_of(cell[0]): text_of(cell[1]) for cell in root.iter("div")
            if len(cell) == 2 and all(c.tag == "div" and len(c) == 0 for c in cell)}


def ticks(svg, anchor):
    """[(value, pixel)] of an axis's tick labels: x ticks are centred under
    the plot, y ticks end left of it."""
    at = "x" if anchor == "middle" else "y"
    return [(float(text_of(t).replace(",", "")), float(t.get(at)) - (0 if at == "x" else 4))
            for t in svg.iter(f"{SVG}text") if t.get("class") == "tick" and t.get("text-anchor") == anchor]


def _scale(ticks_, log):
    """value -> pixel, fitted to two tick labels; every other label must sit on it."""
    f = math.log10 if log else float
    (v0, p0), (v1, p1) = ticks_[0], ticks_[-1]
    per = (p1 - p0) / (f(v1) - f(v0))
    for v, p in ticks_:
        assert abs(p0 + (f(v) - f(v0)) * per - p) <= PIXEL, f"tick {v} is not where its label says"
    return lambda px: (px - p0) / per + f(v0), abs(per)


def curve(svg, log=False):
    """The curve's points as (x, y) data values read through the axes' labels,
    and how far apart two readings must be to differ by a pixel: (dx, dy)."""
    xs, ys = ticks(svg, "middle"), ticks(svg, "end")
    assert len(xs) >= 2 and len(ys) >= 2, "an axis without two labelled ticks cannot be read"
    x_of, x_per = _scale(xs, False)
    y_of, y_per = _scale(ys, log)
    line = svg.find(f".//{SVG}polyline[@class='curve']")
    points = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
    read = [(x_of(px), 10 ** y_of(py) if log else y_of(py)) for px, py in points]
    return read, (PIXEL / x_per, PIXEL / y_per)
