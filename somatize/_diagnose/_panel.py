"""The diagnosis panel: a run's findings at a glance, worst first, each
linked to the curve that shows it with the threshold that decided it.

It belongs to the diagnosis, not to the widgets: a static picture, no
Jupyter, so ``Findings`` shows it with no import upward (``_pictures`` draws).
The rule it keeps: it draws what ``somatize.diagnose`` found and the curves
it read, nothing else; it reads the record, never the model. The picture is
built once, in Python: HTML with each curve an SVG carried as an
``<img src="data:image/svg+xml;base64,...">``, so the same picture shows in
the lab, in an untrusted notebook and on GitHub (no script, no inline SVG for
a sanitiser to strip).
"""

from __future__ import annotations

import base64
import math
from html import escape

from .._pictures import _chart, _svg
from ._read import curve

SHOWN = 8  # curves drawn at most: the worst findings'; the rest are listed
POINTS = 1000  # points a curve is thinned to
RED = "#dc2626"
COLOR = {"diverged": RED, "exploding": RED, "dying": _svg.SLOW, "saturated": _svg.SLOW, "not_updated": _svg.SLOW}
LOG = {"grad_norm", "update_ratio", "update_norm", "weight_norm"}  # curves read on a log scale


def _img(svg, alt):
    data = base64.b64encode(svg.encode()).decode()
    return f'<img src="data:image/svg+xml;base64,{data}" alt="{escape(alt)}" style="max-width:100%"/>'


def _thin(series):
    step = max(1, math.ceil(len(series) / POINTS))
    return series.iloc[::step] if step > 1 else series


def curve_svg(store, run, finding):
    """The curve that shows ``finding``: all of it in blue, the steps where
    it holds in the finding's colour, the threshold as a red line."""
    shown = _thin(curve(store, run, finding))
    kind = finding.curve.split("/")[0]
    finite = shown[shown.map(math.isfinite)]
    log = kind in LOG and bool((finite > 0).any())
    points = [(int(s), float(v)) for s, v in finite.items() if not log or v > 0]
    inside = [(s, v) for s, v in points if finding.first <= s <= finding.last]
    series = [{"name": finding.curve, "color": _svg.SERIES[0], "points": points}]
    if inside:
        series.append({"name": f"{finding.kind.replace('_', ' ')}: steps {finding.first}-{finding.last}",
                       "color": COLOR.get(finding.kind, _svg.SERIES[6]), "points": inside})
    if finding.line is not None and points and (not log or finding.line > 0):
        xs = [points[0][0], points[-1][0]]
        series.append({"name": f"threshold {_chart.number(finding.line)}", "color": RED,
                       "points": [(x, finding.line) for x in xs]})
    data = _chart.chart(series, log=log, xlabel="step", ylabel=finding.curve)
    return _svg.line_chart(data, height=200)


def _anchor(run, i):
    safe = "".join(c if c.isalnum() else "-" for c in run)
    return f"somatize-diagnosis-{safe}-{i}"


def diagnosis_inner(findings):
    run, store = findings.run, findings.store
    if not findings:
        return (f"<div style='color:{_svg.MUTED}'>No finding: every instrument stayed within its threshold "
                "(somatize._diagnose.DEFAULTS).</div>")
    rows = []
    for i, f in enumerate(findings):
        color = COLOR.get(f.kind, _svg.SERIES[6])
        where = escape(f.node) if f.node is not None else "the loss"
        link = f"<a href='#{_anchor(run, i)}'>curve</a>" if i < SHOWN else ""
        evidence = ", ".join(f"{k} {_chart.number(v) if isinstance(v, float) else v}" for k, v in f.evidence.items())
        evidence = escape(evidence)
        td = "<td style='padding:2px 8px 2px 0'>"
        rows.append(
            f"<tr>{td}<span style='color:#fff;background:{color};border-radius:8px;padding:0 7px;font-size:11px'>"
            f"{escape(f.kind.replace('_', ' '))}</span></td>{td}<b>{where}</b></td>"
            f"{td}steps {f.first}–{f.last}</td><td style='padding:2px 8px 2px 0;color:{_svg.MUTED}'>{evidence}</td>"
            f"{td}{link}</td></tr>"
        )
    parts = [f"<table style='border-collapse:collapse;font-size:12px;margin-bottom:8px'>{''.join(rows)}</table>"]
    for i, f in enumerate(findings[:SHOWN]):
        parts.append(
            f"<div id='{_anchor(run, i)}' style='font-size:12px;margin:10px 0 2px'><b>{escape(str(f.node or 'loss'))}"
            f"</b> — {escape(f.kind.replace('_', ' '))}: {escape(f.rule)}</div>"
        )
        parts.append(_img(curve_svg(store, run, f), f"{f.curve} over steps, with the threshold"))
    if len(findings) > SHOWN:
        parts.append(f"<div style='color:{_svg.MUTED}'>{len(findings) - SHOWN} more findings listed above.</div>")
    return "".join(parts)


def title_of(findings):
    n = len(findings)
    return f"Diagnosis — run {findings.run!r}: {n} finding{'s' if n != 1 else ''}"


def diagnosis_bundle(findings):
    """The mimebundle of a run's findings: the static picture (what a
    notebook saved, GitHub and nbviewer show) and the text."""
    badge = ("healthy", "#16a34a") if not findings else (findings[0].kind.replace("_", " "), COLOR.get(
        findings[0].kind, _svg.SERIES[6]))
    html = _svg.boxed(diagnosis_inner(findings), title_of(findings), badge=badge)
    return {"text/plain": repr(findings), "text/html": html}
