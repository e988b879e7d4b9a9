"""`spent(store, run=...)`: where the time of a run went.

The rule it keeps: everything shown is read from the record (the run's
summary, its forward times and one forward's facts), never from a process
that is gone. Nodes are sorted by their total time and the slowest is drawn
in another colour, so in a twenty-node graph the culprit is the first bar.
The engine's own time (a forward's time outside its nodes) is a bar of its
own; so is the Trainer's when the record holds it (a numeric fact
`trainer_us`: µs of loss, backward and update per step).
"""

from __future__ import annotations

import math

from . import _svg

TRAINER_FACT = "trainer_us"


def spent_data(store, run, forward=None):
    from somatize.record import facts, forwards, nodes

    table = nodes(store, run=run)
    per_forward = forwards(store, run=run)
    count = len(per_forward)
    rows = []
    for r in table.to_dict("records"):
        runs_ = int(r["forwards"])
        rows.append({"label": str(r["node"]), "kind": "node", "total_us": float(r["total_us"]),
                     "mean_us": float(r["total_us"]) / runs_ if runs_ else 0.0, "count": runs_})
    node_total = sum(r["total_us"] for r in rows)
    forward_total = float(per_forward["took_us"].fillna(0).sum()) if count else 0.0
    if count:
        rows.append({"label": "engine (outside nodes)", "kind": "engine",
                     "total_us": max(0.0, forward_total - node_total),
                     "mean_us": max(0.0, forward_total - node_total) / count, "count": count})
    if TRAINER_FACT in per_forward:
        took = per_forward[TRAINER_FACT].dropna()
        rows.append({"label": "Trainer (loss, backward, update)", "kind": "trainer",
                     "total_us": float(took.sum()), "mean_us": float(took.mean()) if len(took) else 0.0,
                     "count": int(len(took))})
    whole = sum(r["total_us"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["total_us"] / whole
    rows.sort(key=lambda r: -r["total_us"])
    slowest = next((r for r in rows if r["kind"] == "node"), None)
    for r in rows:
        r["slowest"] = r is slowest and r["total_us"] > 0
    timeline = None
    if count:
        which = count - 1 if forward is None else forward
        spans = [{"node": f["node"], "kind": f["fact"], "began_us": f["began_us"], "took_us": f["took_us"]}
                 for f in facts(store, run=run, forward=which) if f.get("fact") in ("ran", "recalled")]
        total = next((f["took_us"] for f in facts(store, run=run, forward=which) if f.get("fact") == "finished"), None)
        timeline = {"forward": which, "total_us": total, "spans": spans}
    return {"run": run, "forwards": count, "rows": rows, "timeline": timeline,
            "slowest": slowest["label"] if slowest else None}


def spent_html(d):
    title = f"where the time went — run {d['run']!r}, {d['forwards']:,} forwards"
    if not d["rows"]:
        return _svg.boxed(f"<div style='color:{_svg.MUTED}'>no node has run in this run yet</div>", title)
    bars = [{"label": r["label"], "value": r["total_us"],
             "color": _svg.SLOW if r["slowest"] else (_svg.OVERHEAD if r["kind"] != "node" else _svg.SERIES[0]),
             "text": f"{_svg.duration_us(r['total_us'])} · {r['share']:.0%} · mean {_svg.duration_us(r['mean_us'])}"}
            for r in d["rows"]]
    parts = [_h("total time per node (bar), share of all, mean per forward"),
             _svg.bars_html(bars, title=title, unit_label="total time over the run")]
    t = d["timeline"]
    if t and t["spans"]:
        longest = max(s["took_us"] for s in t["spans"])
        spans = [(s["node"] + (" (recalled)" if s["kind"] == "recalled" else ""), s["began_us"], s["took_us"],
                  _svg.SLOW if s["node"] == d["slowest"] or s["took_us"] == longest else _svg.SERIES[0])
                 for s in t["spans"]]
        parts.append(_h(f"forward {t['forward']}: which node ran when ({_svg.duration_us(t['total_us'])} in all)"))
        parts.append(_svg.timeline_svg(spans, t["total_us"]))
    return _svg.boxed("".join(parts), title)


def _h(text):
    return f"<div style='font-size:12px;font-weight:600;color:{_svg.MUTED};margin:8px 0 4px'>{text}</div>"


class Spent:
    """The answer of `spent`: a panel in a notebook, data everywhere else
    (`.rows`, `.timeline`, `.slowest`)."""

    def __init__(self, data):
        self.data = data
        self.rows = data["rows"]
        self.timeline = data["timeline"]
        self.slowest = data["slowest"]

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": repr(self), "text/html": spent_html(self.data)}
        try:
            from ._views import SpentView, view_bundle
        except ImportError:
            return bundle
        bundle.update(view_bundle(SpentView(spent=_clean(self.data))))
        return bundle

    def __repr__(self):
        lines = [f"spent(run={self.data['run']!r}): {self.data['forwards']} forwards"]
        for r in self.rows:
            mark = "  <- slowest node" if r["slowest"] else ""
            lines.append(f"  {r['label']:<34} {_svg.duration_us(r['total_us']):>10}  {r['share']:6.1%}{mark}")
        return "\n".join(lines)


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    if hasattr(x, "item"):  # numpy scalars
        return _clean(x.item())
    return x


def spent(store, run, forward=None):
    """Where the time of `run` went: total and mean time per node, the
    engine's own time, and a timeline of one forward (the last, or
    `forward=N`). Displays as a panel; `.rows` holds the numbers."""
    return Spent(spent_data(store, run, forward))
