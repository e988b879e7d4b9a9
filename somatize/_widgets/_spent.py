"""`spent(store, run=..., graph=None)`: where the time of a run went.

The rule it keeps: everything shown is read from the record (the run's
summary, its forward times and one forward's facts), never from a process
that is gone. Nodes are sorted by their total time and the slowest is drawn
in another colour, so in a twenty-node graph the culprit is the first bar.
The engine's own time (a forward's time outside its nodes) is a bar of its
own, its mean over the forwards that said their time (`finished`: each of a
Trainer's, a watched module's measured ones, torch/_watch.py); so is the
instruments' (`instruments_us`: a recorded step's forward reading its nodes'
outputs, inside that forward's time, torch/_instruments.py), taken out of
the engine's, whose it is not, its mean over the forwards that said it; so
are the evaluations' (`eval_us`: `trainer.evaluate`'s forwards, unwatched,
its loss and metrics), apart from training; so is the Trainer's when the
record holds it (a numeric fact
`trainer_us`: µs of loss, backward and update per step), split into its
parts (`objective_us`, `backward_us`, `update_us`, and the rest) when the
record holds them too; an older record draws it whole. A data-parallel run
(`ranks`) also shows each rank's time a step to reach the update side by
side (in its step, `rank_us/rank<i>`, and before it, loading its data,
`rank_before_us/rank<i>`, drawn fainter; record/_ranks.py) and names the
straggler: the rank the others wait for, and by how much over the fastest.
Each node's backward
time (`backward_us/<node>`, on the steps the Trainer's instruments record,
the first of them left out as a forward's first is) stands beside its
forward time in the table.

`graph=g` draws the same numbers on the graph itself (see `_graph`): a graph
never knows its runs, so its times come from the record named here.

The panel is drawn once, as SVG, in Python: the widget shows that picture
(its hover texts are SVG titles) and the static fallback is the same one.
"""

from __future__ import annotations

from html import escape

from .._pictures import _svg
from ..record._ranks import rank_time  # each rank's time and the straggler, as the run browser shows them
from . import _graph
from ._bundle import panel_bundle

TRAINER_FACT = "trainer_us"
# The parts of the Trainer's time, as the Trainer names them, and how the panel says them.
TRAINER_PARTS = (("objective_us", "objective (loss)"), ("backward_us", "backward"),
                 ("update_us", "optimizer update"))
MEASURING_FACT = "instruments_us"  # µs of a forward in the instruments' reading of its outputs (torch/_instruments.py)
EVALUATION_FACT = "eval_us"  # µs of one trainer.evaluate (torch/_evaluate.py): its unwatched forwards and metrics
BACKWARD = "backward_us"  # with a node: that node's part of a step's backward, series backward_us/<node>
WARMUP = 1  # the first forward pays for lazy set-up (allocations, kernels): shown apart, left out of the spread
LOOK_BACK = 64  # forwards looked back for the last that timed its nodes (a watch times one update in 40)
SPREAD_FORWARDS = 10_000  # per-node median and p95 read every call: only for runs up to this many forwards


def _spread(values):
    """{"median_us", "p95_us"} of a list of times, or None when empty."""
    import numpy as np

    if not len(values):
        return None
    a = np.asarray(values, dtype=np.float64)
    return {"median_us": float(np.median(a)), "p95_us": float(np.percentile(a, 95))}


def spread_of(store, run, per_forward, count):
    """Medians and p95s, the warm-up apart: {"forward": {...}, "nodes": {node: {...}}}.
    A forward's comes from the series of forward times (any length); a
    node's from every call, read only when the run has at most
    `SPREAD_FORWARDS` forwards (the record keeps no per-node series)."""
    from somatize.record import facts

    took = per_forward["took_us"].to_numpy(dtype="float64")
    forward = _spread([t for t in took[WARMUP:] if t == t]) or {}
    forward["first_us"] = float(took[0]) if count and took[0] == took[0] else None
    out = {"forward": forward, "nodes": {}}
    if count <= SPREAD_FORWARDS:
        calls, first, seen = {}, {}, set()
        for f in facts(store, run=run):
            kind = f.get("fact")
            if kind in ("ran", "recalled") and isinstance(f.get("took_us"), (int, float)):
                node = f["node"]
                if node not in seen:  # a node's first call is its warm-up
                    seen.add(node)
                    first[node] = f["took_us"]
                else:
                    calls.setdefault(node, []).append(f["took_us"])
        for node in seen:
            out["nodes"][node] = {**(_spread(calls.get(node, [])) or {}), "first_us": first[node]}
    return out


def spent_data(store, run, forward=None):
    from somatize.record import facts, forwards, nodes

    table = nodes(store, run=run)
    per_forward = forwards(store, run=run)
    count = len(per_forward)
    rows = []
    for r in table.to_dict("records"):
        calls = int(r["calls"])
        rows.append({"label": str(r["node"]), "kind": "node", "total_us": float(r["total_us"]),
                     "mean_us": float(r["total_us"]) / calls if calls else 0.0, "count": calls})
    node_total = sum(r["total_us"] for r in rows)
    whole = per_forward["took_us"].dropna()  # the forwards that said their time: a watch's measured ones only
    timed = int(len(whole))
    measuring = per_forward[MEASURING_FACT].dropna() if MEASURING_FACT in per_forward else whole.iloc[:0]
    measured = float(measuring.sum())
    if timed:
        outside = max(0.0, float(whole.sum()) - node_total - measured)
        rows.append({"label": "engine (outside nodes)", "kind": "engine", "total_us": outside,
                     "mean_us": outside / timed, "count": timed})
    if len(measuring):
        rows.append({"label": "instruments (measuring)", "kind": "instruments", "total_us": measured,
                     "mean_us": measured / len(measuring), "count": int(len(measuring))})
    if TRAINER_FACT in per_forward:
        took = per_forward[TRAINER_FACT].dropna()
        rows.append({"label": "Trainer (loss, backward, update)", "kind": "trainer",
                     "total_us": float(took.sum()), "mean_us": float(took.mean()) if len(took) else 0.0,
                     "count": int(len(took)), "parts": _trainer_parts(per_forward)})
    evaluation = _evaluation_of(store, run)
    if evaluation is not None:
        rows.append(evaluation)
    backward = _backward_of(store, run, [r["label"] for r in rows if r["kind"] == "node"])
    for r in rows:
        if r["label"] in backward:
            r["backward_us"], r["backward_steps"] = backward[r["label"]]
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
        while True:
            said = facts(store, run=run, forward=which)
            spans = [{"node": f["node"], "kind": f["fact"], "began_us": f["began_us"], "took_us": f["took_us"]}
                     for f in said if f.get("fact") in ("ran", "recalled")]
            # a watched module's nodes are timed on its measured steps only (torch/_watch.py): the last of them
            if spans or forward is not None or which == 0 or count - which > LOOK_BACK:
                break
            which -= 1
        total = next((f["took_us"] for f in said if f.get("fact") == "finished"), None)
        timeline = {"forward": which, "total_us": total, "spans": spans, "last": which == count - 1}
    return {"run": run, "forwards": count, "timed": timed, "rows": rows, "timeline": timeline,
            "slowest": slowest["label"] if slowest and slowest["slowest"] else None,
            "spread": spread_of(store, run, per_forward, count), **rank_time(store, run)}


RANKS_TITLE = "Each rank's time a step to reach the update, where it waits for the others"
BEFORE_SHADE = 0.45  # the part of a rank's bar before its step began: its colour, fainter


def straggler_text(d):
    """The sentence naming the straggler (js/sidebar/ranks.ts says the same)."""
    s = d["straggler"]
    if s is None:
        return ""
    before = s.get("before_us") or 0  # a run recorded before the time before a step was said: none
    before = (f", {_svg.duration_us(before)} of each before it began (loading its data, the loop between "
              "steps)") if before else ""
    if s["over"] < 1:
        more = f"{_svg.duration_us(s['over_us'])} ({s['over']:.0%}) more than rank {s['fastest']}'s"
    else:  # "4492% more" reads worse than "45.9 times"
        more = f"{1 + s['over']:.3g} times rank {s['fastest']}'s"
    return (f"rank {s['rank']} is the straggler: its steps take {_svg.duration_us(s['mean_us'])}, "
            f"{more}{before}; the others wait for it at every update")


def _trainer_parts(per_forward):
    """[{"name", "label", "total_us"}] of the Trainer's time, the rest
    (its bookkeeping) last, over the steps that say their parts; None for a
    record made before the Trainer said them."""
    if not all(name in per_forward for name, _ in TRAINER_PARTS):
        return None
    told = per_forward[[TRAINER_FACT] + [name for name, _ in TRAINER_PARTS]].dropna()
    if len(told) > 1:
        told = told.iloc[1:]  # the first step is warm-up: it would colour the shares of a short run
    said = float(told[TRAINER_FACT].sum())
    if not said:
        return None
    # The Trainer says its parts on some steps (torch/_trainer.py, CLOCKS_*): their
    # shares of those steps' trainer_us, scaled to the Trainer's whole bar.
    scale = float(per_forward[TRAINER_FACT].sum()) / said
    parts = [{"name": name, "label": label, "total_us": float(told[name].sum()) * scale}
             for name, label in TRAINER_PARTS]
    rest = float((told[TRAINER_FACT] - told[[name for name, _ in TRAINER_PARTS]].sum(axis=1)).clip(lower=0).sum())
    return parts + [{"name": "rest", "label": "the rest (the Trainer's bookkeeping)", "total_us": rest * scale}]


def _evaluation_of(store, run):
    """The evaluations' row (`eval_us`, one point an evaluation, read from its
    curve: two in one forward both count), or None when the run has none.
    Their forwards are not watched, so no node's time and no forward's holds them."""
    from somatize._base.errors import SomatizeKeyError
    from somatize.record import curve

    try:
        took = curve(store, run=run, name=EVALUATION_FACT).dropna()
    except SomatizeKeyError:
        return None
    if not len(took):
        return None
    return {"label": "evaluation", "kind": "evaluation", "total_us": float(took.sum()),
            "mean_us": float(took.mean()), "count": int(len(took))}


def _backward_of(store, run, names):
    """{node: (mean µs of its backward a recorded step, how many steps)} from
    the series `backward_us/<node>`, for the nodes that have one. The first
    recorded backward is left out when there are others, as the forward's
    first is (``WARMUP``): it pays for the backward's lazy set-up, often
    several times a steady one, and the instruments record only ~17 steps of
    a 300-step run, so it alone could make a node's mean look longer than the
    whole step's backward."""
    from somatize._base.errors import SomatizeKeyError
    from somatize.record import curve

    out = {}
    for name in names:
        try:
            c = curve(store, run=run, name=f"{BACKWARD}/{name}").dropna()
        except SomatizeKeyError:
            continue
        if len(c) > WARMUP:
            c = c.iloc[WARMUP:]
        if len(c):
            out[name] = (float(c.mean()), int(len(c)))
    return out


def timings(d):
    """{node: {"mean_us", "last_us", "forward", "share", "calls", "slowest"}}: what
    the graph panel writes on each node."""
    t = d["timeline"] or {"forward": None, "spans": []}
    last = {}
    for s in t["spans"]:
        last[s["node"]] = last.get(s["node"], 0) + s["took_us"]
    return {r["label"]: {"mean_us": r["mean_us"], "last_us": last.get(r["label"]), "forward": t["forward"],
                         "share": r["share"], "calls": r["count"], "slowest": r["slowest"]}
            for r in d["rows"] if r["kind"] == "node"}


def title_of(d):
    return f"Where the time went — run {d['run']!r}, {_forwards(d)}"


def _forwards(d):
    """"46 forwards", and of a watched module's run, whose forwards say their
    time on its measured steps only, ", 11 measured"."""
    said = f"{d['forwards']:,} forwards"
    timed = d.get("timed", d["forwards"])
    return said + (f", {timed:,} measured" if timed < d["forwards"] else "")


def _bar_per(r, d):
    """What a bar's mean is per, short: "a forward" (the heading says over
    which), "a measured forward" only for the instruments' row of a run whose
    other rows are over more forwards (a Trainer's: it reads one in 40)."""
    if r["kind"] == "instruments" and r["count"] < d.get("timed", d["forwards"]):
        return "a measured forward"
    return _EACH.get(r["kind"], "a forward")


def _per(r, d):
    """What a row's mean is per, and what its count counts, as its tip says them."""
    if r["kind"] == "instruments" or (r["kind"] == "engine" and d.get("timed", d["forwards"]) < d["forwards"]):
        return "a measured forward", "measured forwards"
    return _EACH.get(r["kind"], "a forward"), _COUNTED.get(r["kind"], "forwards")


def spent_inner(d, graph=None, narrow=False):
    """The panel's body (headings and SVG), shared by the widget and the static
    picture. ``narrow``: the widget's body, which also holds the bars and the
    timeline laid out for a narrow cell (panel.css shows one or the other)."""
    if not d["rows"]:
        return f"<div style='color:{_svg.MUTED}'>No node has run in this run yet.</div>"
    parts = []
    if graph is not None:
        parts.append(_h("On the graph: each node's mean time a forward and its share of the run"))
        parts.append(f"<div style='overflow-x:auto'>{_graph.describe(graph, timings(d))['svg']}</div>")
    bars = [{"label": r["label"], "value": r["total_us"],
             "color": _svg.SLOW if r["slowest"] else _COLORS.get(r["kind"], _svg.OVERHEAD),
             "text": f"{_svg.duration_us(r['total_us'])} · {r['share']:.0%} · "
                     f"{_svg.duration_us(r['mean_us'])} {_bar_per(r, d)}",
             "data": {"node": r["label"], "kind": r["kind"]},
             "tip": f"{r['label']}: {_svg.duration_us(r['total_us'])} in all, {_svg.duration_us(r['mean_us'])} "
                    f"{_per(r, d)[0]} over {r['count']:,} {_per(r, d)[1]}"
                    + _TIPS.get(r["kind"], "")
                    + (f"; backward {_svg.duration_us(r['backward_us'])} a step ({r['backward_steps']:,} "
                       "steps measured)" if "backward_us" in r else ""),
             "parts": _bar_parts(r)}
            for r in d["rows"]]
    timed = d.get("timed", d["forwards"])
    over = "the run" if timed == d["forwards"] else f"its {timed:,} measured forwards"
    parts.append(_h(f"Total time over {over}, its share, and the mean a forward (slowest node in orange)"))
    trainer = any(r["kind"] == "trainer" for r in d["rows"])
    if any(r["kind"] == "instruments" for r in d["rows"]):  # said short: the line holds green's too
        grey = ("grey: the engine's, the instruments' and the Trainer's own time" if trainer else
                "grey: the engine's and the instruments' own time, not any node's")
    else:
        grey = "grey: the engine's own time" + (", and the Trainer's" if trainer else "") + ", not any node's"
    if any(r["kind"] == "evaluation" for r in d["rows"]):
        grey += "; green: evaluation"
    parts.append(_both(_svg.bars_svg(bars, title=title_of(d), unit_label=grey),
                       narrow and _svg.bars_svg_narrow(bars, title=title_of(d), unit_label=grey)))
    parts.append(_spread_table(d))
    if d.get("ranks"):
        slow = d["straggler"]["rank"] if d["straggler"] else None
        split = any(r["before_us"] for r in d["ranks"])  # a run that said the time before its steps
        rank_bars = [_rank_bar(r, _svg.SLOW if r["rank"] == slow else _svg.SERIES[0], split) for r in d["ranks"]]
        label = ("fainter: before its step began (loading its data, the loop between steps)" if split
                 else "from its step's start to the update")
        parts.append(_h(RANKS_TITLE))
        parts.append(_both(_svg.bars_svg(rank_bars, title="ranks", unit_label=label),
                           narrow and _svg.bars_svg_narrow(rank_bars, title="ranks", unit_label=label)))
        said = straggler_text(d) or "One rank measured."
        parts.append(f"<p class='smz-straggler' style='margin:0 0 6px;font-size:12px;color:{_svg.INK};"
                     f"overflow-wrap:anywhere'>{escape(said)}</p>")
    elif d.get("ranks_problem"):  # a damaged rank series: no rank drawn from its bytes, the damage named
        parts.append(_h(RANKS_TITLE))
        parts.append(f"<div class='smz-ranks-problem' style='font-size:12px;color:{_svg.BAD};"
                     f"overflow-wrap:anywhere'>Not shown: {escape(d['ranks_problem'])}</div>")
    t = d["timeline"]
    if t and t["spans"]:
        longest = max(s["took_us"] for s in t["spans"])
        spans = [(s["node"] + (" (recalled)" if s["kind"] == "recalled" else ""), s["began_us"], s["took_us"],
                  _svg.SLOW if s["node"] == d["slowest"] or s["took_us"] == longest else _svg.SERIES[0])
                 for s in t["spans"]]
        last = "the last" if t.get("last", True) else "the last that timed its nodes"
        parts.append(_h(f"Forward {t['forward']}, {last}: which node ran when "
                        f"({_svg.duration_us(t['total_us'])} in all)"))
        parts.append(_both(_svg.timeline_svg(spans, t["total_us"]),
                           narrow and _svg.timeline_svg(spans, t["total_us"], width=_svg.NARROW)))
    return "".join(parts)


_COLORS = {"node": _svg.SERIES[0], "evaluation": _svg.SERIES[2]}
_EACH = {"evaluation": "an evaluation"}  # what a row's mean is per
_TIPS = {"instruments": " (reading each node's output: its zeros, the backward's clock; in the forward's time, "
                        "never in a node's)"}
_COUNTED = {"node": "calls", "evaluation": "evaluations"}


def _rank_bar(r, color, split):
    """A rank's bar: its time a step to reach the update, cut (``split``)
    into the time before its step began and the time in it."""
    tip = (f"rank {r['rank']}: {_svg.duration_us(r['mean_us'])} a step to reach the update "
           f"({_svg.duration_us(r['before_us'])} before the step began, loading its data; "
           f"{_svg.duration_us(r['work_us'])} in it), then it waits "
           f"{_svg.duration_us(r['wait_us'])} for the others ({r['steps']:,} steps measured)")
    cut = [{"name": "before", "value": r["before_us"], "color": color, "opacity": BEFORE_SHADE,
            "text": f"before {_svg.duration_us(r['before_us'])}", "tip": tip},
           {"name": "step", "value": r["work_us"], "color": color, "opacity": 1.0,
            "text": f"in its step {_svg.duration_us(r['work_us'])}", "tip": tip}] if split else None
    return {"label": f"rank {r['rank']}", "value": r["mean_us"], "color": color,
            "text": f"{_svg.duration_us(r['mean_us'])} a step", "data": {"rank": r["rank"]},
            "tip": tip, "parts": cut}


def _both(wide, narrow):
    if not narrow:
        return wide
    return f"<div class='smz-wide'>{wide}</div><div class='smz-narrow'>{narrow}</div>"


def _bar_parts(r):
    """The Trainer's bar cut into its parts, each a shade of its grey."""
    parts = r.get("parts")
    if not parts:
        return None
    steps = r["count"] or 1
    return [{"name": p["name"], "label": p["label"], "value": p["total_us"], "color": _svg.OVERHEAD,
             "opacity": _svg.PART_SHADES[i % len(_svg.PART_SHADES)],
             "text": f"{p['label'].split(' (')[0]} {_svg.duration_us(p['total_us'] / steps)}",
             "tip": f"the Trainer's {p['label']}: {_svg.duration_us(p['total_us'])} in all, "
                    f"{_svg.duration_us(p['total_us'] / steps)} a step"}
            for i, p in enumerate(parts)]


def _spread_table(d):
    """Mean, median and p95 of a forward and of each node's call, the first (warm-up) apart."""
    spread = d.get("spread") or {"forward": {}, "nodes": {}}
    backward = any("backward_us" in r for r in d["rows"])
    rows = [("a whole forward", spread["forward"], _forward_mean(d), None)]
    rows += [(r["label"], spread["nodes"].get(r["label"], {}), r["mean_us"], r.get("backward_us"))
             for r in d["rows"] if r["kind"] == "node"]
    # a number and its unit never part ("1.21 ms" read as "1.21" over "ms" in a narrow cell): a table
    # too wide for its cell scrolls across instead
    number = "padding:1px 12px 1px 0;text-align:right;font-variant-numeric:tabular-nums"
    cell = number + ";white-space:nowrap"
    # short headings, so the table fits a 350 px cell: the title and the note below say the rest
    heads = ("mean", *(("backward",) if backward else ()), "median", "p95", "first")
    # a heading may take two lines
    head = "".join(f"<th style='{number};color:{_svg.MUTED};font-weight:normal'>{h}</th>" for h in heads)
    body = "".join(
        f"<tr><td style='padding:1px 12px 1px 0;white-space:nowrap'>{escape(name)}</td>"
        + "".join(f"<td style='{cell}'>{_svg.duration_us(v)}</td>"
                  for v in (mean, *((back,) if backward else ()), s.get("median_us"), s.get("p95_us"),
                            s.get("first_us")))
        + "</tr>" for name, s, mean, back in rows)
    note = ("" if spread["nodes"] or not d["rows"] else
            f"<div style='font-size:11px;color:{_svg.MUTED}'>a node's median and p95 are read for runs of at most "
            f"{SPREAD_FORWARDS:,} forwards</div>")
    if backward:
        note += (f"<div style='font-size:11px;color:{_svg.MUTED}'>backward: a node's mean time in the backward "
                 "pass, on the steps the Trainer's instruments record, the first (warm-up) left out</div>")
    return (_h("A forward and a call: mean, median and p95 after the first, and the first apart") +
            f"<div class='spread-wrap' style='overflow-x:auto;max-width:100%'>"
            f"<table class='spread' style='border-collapse:collapse;font-size:12px'>"
            f"<tr><th></th>{head}</tr>{body}</table></div>{note}")


def _forward_mean(d):
    """A forward's mean time: its nodes', the engine's and the instruments' over the forwards that said it."""
    timed = d.get("timed", d["forwards"])
    inside = sum(r["total_us"] for r in d["rows"] if r["kind"] in ("node", "engine", "instruments"))
    return inside / timed if timed else None


def _h(text):
    return f"<div style='font-size:12px;font-weight:600;color:{_svg.MUTED};margin:10px 0 4px'>{text}</div>"


class Spent:
    """The answer of `spent`: a panel in a notebook, data everywhere else
    (`.rows`, `.timeline`, `.slowest`)."""

    def __init__(self, data, graph=None):
        self.data = data
        self.graph = graph
        self.rows = data["rows"]
        self.timeline = data["timeline"]
        self.slowest = data["slowest"]
        # a data-parallel run's ranks: [{"rank", "mean_us", "work_us", "before_us", "wait_us", "steps"}]
        self.ranks = data["ranks"]
        self.straggler = data["straggler"]  # the rank the others wait for and by how much, or None
        # a rank series that is damaged: what is wrong and how to mend it (then no ranks), else None
        self.ranks_problem = data.get("ranks_problem")

    def to_html(self):
        """The static picture: what GitHub, nbviewer and nbconvert show."""
        return _svg.boxed(spent_inner(self.data, self.graph), title_of(self.data))

    def _repr_mimebundle_(self, include=None, exclude=None):
        return panel_bundle(self, self._widget)

    def _widget(self):
        from ._views import SpentView

        return SpentView(spent={"title": title_of(self.data), "html": spent_inner(self.data, self.graph, narrow=True),
                                "slowest": self.slowest})

    def __repr__(self):
        lines = [f"spent(run={self.data['run']!r}): {_forwards(self.data)}"]
        for r in self.rows:
            mark = "  <- slowest node" if r["slowest"] else ""
            lines.append(f"  {r['label']:<34} {_svg.duration_us(r['total_us']):>10}  {r['share']:6.1%}{mark}")
        for r in self.ranks:
            mark = "  <- straggler" if self.straggler and self.straggler["rank"] == r["rank"] else ""
            lines.append(f"  rank {r['rank']:<29} {_svg.duration_us(r['mean_us']):>10}  a step ("
                         f"{_svg.duration_us(r['before_us'])} before it began, waits "
                         f"{_svg.duration_us(r['wait_us'])}){mark}")
        if self.straggler:
            lines.append("  " + straggler_text(self.data))
        if self.ranks_problem:
            lines.append(f"  ranks not shown: {self.ranks_problem}")
        return "\n".join(lines)


def spent(store, run, forward=None, graph=None):
    """Where the time of `run` went: total and mean time per node, the
    engine's and the Trainer's own time, the instruments' measuring (their
    reading of each node's output, apart from the engine's), and a timeline
    of one forward (the last, or `forward=N`). A watched module's run
    (``somatize.torch.watch``) times its measured forwards only: its
    means a forward are over those. `graph=g` also draws those times on the graph.
    A data-parallel run also shows each rank's time a step to reach the
    update (in its step and before it, loading its data) and its wait there, and
    names its straggler, the rank the others wait for (`.ranks`,
    `.straggler`); a rank series that is damaged
    shows no rank and says what is damaged and how to mend it
    (`.ranks_problem`), the nodes' times still shown.
    Displays as a panel; `.rows` holds the numbers."""
    return Spent(spent_data(store, run, forward), graph)
