"""The diagnosis panel, read as a person reads it: the findings worst first,
each linking to its curve, the threshold line drawn where its label says,
and a picture that survives an untrusted notebook (no script, no inline SVG)."""

import math

from diagnosis_models import deep, train

import somatize
from somatize import Store
from somatize._diagnose._panel import SHOWN

from pictures import SVG, _scale, parse, text_of, ticks

RED = "#dc2626"


def pictures(root):
    """Each curve picture: (the element linking to it, the SVG inside its <img>)."""
    out = {}
    for div in root.iter("div"):
        if div.get("id", "").startswith("somatize-diagnosis-"):
            out[div.get("id")] = div
    shown = list(root.iter(f"{SVG}svg"))  # parse() put each <img>'s SVG back in its place
    return out, shown


def threshold_reads(svg, log):
    """The red line's value, read through the y axis's tick labels."""
    y_of, per = _scale(ticks(svg, "end"), log)
    (line,) = [p for p in svg.iter(f"{SVG}polyline") if f"stroke:{RED}" in p.get("style", "")]
    ys = {float(p.split(",")[1]) for p in line.get("points").split()}
    assert len(ys) == 1  # flat
    value = y_of(ys.pop())
    return (10 ** value if log else value), 0.2 / per


def test_the_panel_lists_findings_worst_first_each_linked_to_its_curve_with_its_threshold(tmp_path):
    store = Store(tmp_path)
    train(store, "r", g=deep(0, dead=True), steps=120)
    found = somatize.diagnose(store, run="r")
    html = found._repr_mimebundle_()["text/html"]
    assert "<script" not in html and "<svg" not in html  # only what an untrusted notebook keeps
    assert html.count('<img src="data:image/svg+xml;base64,') == min(len(found), SHOWN)
    root = parse(html)
    rows = [text_of(tr) for tr in root.iter("tr")]
    assert len(rows) == len(found)
    for row, f in zip(rows, found):
        assert row.startswith(f.kind.replace("_", " ")) and f"steps {f.first}–{f.last}" in row
    anchors, shown = pictures(root)
    links = [a.get("href")[1:] for a in root.iter("a")]
    assert links and set(links) == set(anchors) and len(shown) == len(links)
    for f, svg in zip(found, shown):
        if f.line is not None:
            value, off = threshold_reads(svg, log=False)
            assert math.isclose(value, f.line, abs_tol=off)


def test_the_update_ratio_is_drawn_on_a_log_scale_with_its_band_edge(tmp_path):
    store = Store(tmp_path)
    train(store, "r", lr=1e-8, kind="sgd", steps=120)
    found = somatize.diagnose(store, run="r")
    root = parse(found._repr_mimebundle_()["text/html"])
    _, shown = pictures(root)
    for f, svg in zip(found, shown):
        if f.kind == "ratio_low":
            value, _ = threshold_reads(svg, log=True)
            assert math.isclose(math.log10(value), math.log10(f.line), abs_tol=0.02)


def test_a_healthy_run_says_so_and_draws_nothing(tmp_path):
    store = Store(tmp_path)
    train(store, "r", steps=40)
    found = somatize.diagnose(store, run="r")
    bundle = found._repr_mimebundle_()
    root = parse(bundle["text/html"])
    assert "healthy" in text_of(root) and "No finding" in text_of(root)
    assert list(root.iter("img")) == [] and "no finding" in bundle["text/plain"]
