"""The graph panel: what a `Graph` shows when displayed, and the picture
`spent(store, run=..., graph=g)` draws a run's times on.

The rules it keeps:
- The panel reads the graph through its public face (`nodes`, `edges`,
  `outputs`, `fingerprints()`) and never changes it.
- Reads are pure. `g` displayed shows its structure: nodes, edges, frozen
  and cached badges, fingerprints. A graph remembers nothing of who watched
  it; a run's times are read from its record when it is named:
  `spent(store, run="a-run", graph=g)` writes on each node its mean time per
  forward and its share of the run, marks the slowest node, and tells its
  time in the forward the timeline shows (the last) on hover.
- One picture. The DAG is laid out in layers (no graphviz) and drawn as SVG
  here, once; the front end shows that very SVG and only adds clicking, so
  the picture on GitHub is the one in the lab.
"""

from __future__ import annotations

from html import escape

from .._pictures import _svg

NODE_W, NODE_H, TIMED_H, IO_H, LAYER_GAP, NODE_GAP, MARGIN = 170, 44, 60, 30, 34, 22, 12
BADGES = (("cached", "var(--jp-accent-color1, #9333ea)"), ("frozen", "var(--jp-info-color1, #0891b2)"))
# The widest a character of the panel's font is, as a share of its size (a
# name cut to fit by this never leaves its box; its full text is on hover).
CHAR, BOLD = 0.62, 0.68
TITLE_CHARS = 80


def fit(text, width, char_w):
    """`text` cut with "…" to fit `width` pixels at `char_w` pixels a character."""
    most = max(1, int(width // char_w))
    return text if len(text) <= most else text[: most - 1] + "…"


def _badges_w(n):
    return sum(6.2 * len(b) + 11 for b, _ in BADGES if n.get(b))


def title_of(g):
    """The panel's title: the graph's repr when short, else its size."""
    text = repr(g)
    return text if len(text) <= TITLE_CHARS else f"Graph of {len(g.nodes)} nodes"


def describe(g, timings=None):
    """The panel's data: nodes with badges, fingerprints and timings, edges,
    a layered layout and its SVG. `timings`: {node name: {"mean_us",
    "last_us", "forward", "share", "calls", "slowest"}}, as `spent` reads them."""
    timings = timings or {}
    fingerprints = g.fingerprints()
    nodes = [{"id": "input", "label": "input", "kind": "io"}]
    for node in g.nodes:
        name = node.name
        nodes.append({
            "id": name,
            "label": name,
            "kind": "node",
            "class": type(node).__name__,
            "frozen": bool(node.is_frozen),
            "cached": bool(node.is_cached),
            "fingerprint": fingerprints.get(name),
            "timing": timings.get(name),
        })
    edges = [{"from": a, "to": b} for a, b in g.edges]
    nodes.append({"id": "output", "label": "output", "kind": "io"})
    edges += [{"from": a, "to": "output"} for a in g.outputs]
    node_h = TIMED_H if timings else NODE_H
    for n in nodes:
        n["h"] = IO_H if n["kind"] == "io" else node_h
    _layout(nodes, edges, node_h)
    d = {"nodes": nodes, "edges": edges, "node_w": NODE_W, "timed": bool(timings),
         "width": max(n["x"] + NODE_W for n in nodes) + MARGIN,
         "height": max(n["y"] + n["h"] for n in nodes) + MARGIN}
    d["svg"] = graph_svg(d)
    return d


def _layout(nodes, edges, node_h):
    """Layers by longest path from the input; inside a layer, nodes ordered
    by the mean position of their parents (one barycentre sweep), centred.
    An edge that skips layers takes a slot in each layer it crosses (its
    `via` points), so it runs beside the nodes there, never behind one."""
    parents = {n["id"]: [] for n in nodes}
    for e in edges:
        parents[e["to"]].append(e["from"])
    layer = {}
    for n in nodes:  # nodes come in run order, so parents are placed first
        layer[n["id"]] = 1 + max((layer[p] for p in parents[n["id"]]), default=-1)
    rows = {}
    for n in nodes:
        rows.setdefault(layer[n["id"]], []).append(n["id"])
    for e in edges:
        above, via = e["from"], []
        for k in range(layer[e["from"]] + 1, layer[e["to"]]):
            slot = f"{e['from']}>{e['to']}@{k}"
            parents[slot] = [above]
            rows[k].append(slot)
            via.append(slot)
            above = slot
        if via:
            parents[e["to"]] = [above if p == e["from"] else p for p in parents[e["to"]]]
        e["via"] = via
    pos = {}
    for k in sorted(rows):  # parents sit in earlier layers, already placed
        rows[k].sort(key=lambda nid: sum(pos[p] for p in parents[nid]) / max(1, len(parents[nid])))
        for i, nid in enumerate(rows[k]):
            pos[nid] = i - (len(rows[k]) - 1) / 2
    widest = max(len(r) for r in rows.values())
    last = max(rows)
    at = {}
    for k, row in rows.items():
        offset = (widest - len(row)) * (NODE_W + NODE_GAP) / 2
        # The input's and output's layers are short ones: they carry no numbers.
        top = MARGIN + sum((IO_H if j in (0, last) else node_h) + LAYER_GAP for j in range(k))
        for i, nid in enumerate(row):
            at[nid] = (MARGIN + offset + i * (NODE_W + NODE_GAP), top)
    for n in nodes:
        n["x"], n["y"] = at[n["id"]]
    for e in edges:
        e["via"] = [[at[v][0] + NODE_W / 2, at[v][1], at[v][1] + node_h] for v in e["via"]]


def graph_svg(d):
    by_id = {n["id"]: n for n in d["nodes"]}
    w, h = d["width"], d["height"]
    parts = [_svg.svg_open(w, h, "graph")]
    for e in d["edges"]:
        a, b = by_id[e["from"]], by_id[e["to"]]
        x1, y1 = a["x"] + NODE_W / 2, a["y"] + a["h"]
        x2, y2 = b["x"] + NODE_W / 2, b["y"] - 4
        path = [f"M{x1:.1f},{y1:.1f}"]
        for vx, top, foot in e["via"] + [[x2, y2, y2]]:
            mid = (y1 + top) / 2  # a curve down to the next layer, then straight through it
            path.append(f"C{x1:.1f},{mid:.1f} {vx:.1f},{mid:.1f} {vx:.1f},{top:.1f}")
            if foot > top:
                path.append(f"L{vx:.1f},{foot:.1f}")
            x1, y1 = vx, foot
        parts.append(f'<path class="edge" data-from="{escape(e["from"])}" data-to="{escape(e["to"])}" '
                     f'd="{" ".join(path)}" style="fill:none;stroke:{_svg.MUTED};stroke-width:1.3"/>')
        parts.append(f'<path class="arrow" d="M{x2 - 4:.1f},{y2 - 5:.1f} L{x2 + 4:.1f},{y2 - 5:.1f} '
                     f'L{x2:.1f},{y2 + 2:.1f} Z" style="fill:{_svg.MUTED}"/>')
    for n in d["nodes"]:
        parts.append(_node_svg(n))
    parts.append("</svg>")
    return "".join(parts)


def _node_svg(n):
    x, y, H = n["x"], n["y"], n["h"]
    if n["kind"] == "io":
        return (f'<g class="node io" data-node="{escape(n["id"])}"><rect x="{x}" y="{y}" width="{NODE_W}" '
                f'height="{H}" rx="6" style="fill:{_svg.SURFACE};stroke:{_svg.GRID};stroke-width:1.2" '
                f'stroke-dasharray="4 3"/>'
                f'{_svg.svg_text(x + NODE_W / 2, y + H / 2 + 4, n["label"], 12, _svg.MUTED, "middle")}</g>')
    t = n.get("timing")
    slow = bool(t and t.get("slowest"))
    stroke = f'style="fill:{_svg.RAISED};stroke:{_svg.SLOW};stroke-width:2"' if slow else \
        f'style="fill:{_svg.RAISED};stroke:{_svg.GRID};stroke-width:1.2"'
    parts = [f'<g class="node{" slowest" if slow else ""}" data-node="{escape(n["id"])}">'
             f'<title>{escape(_tip(n))}</title>'
             f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{H}" rx="6" '
             f'{stroke}/>',
             _svg.svg_text(x + 10, y + 18, fit(n["label"], NODE_W - 20 - _badges_w(n), 13 * BOLD), 13, _svg.INK,
                        weight="600"),
             _svg.svg_text(x + 10, y + 34, fit(n["class"], NODE_W - 20, 11 * CHAR), 11, _svg.MUTED)]
    bx = x + NODE_W - 6
    for badge, color in BADGES:
        if n[badge]:
            bw = 6.2 * len(badge) + 8
            bx -= bw
            parts.append(f'<rect class="badge-{badge}" x="{bx:.1f}" y="{y + 5}" width="{bw:.1f}" height="14" '
                         f'rx="7" style="fill:{color}"/>')
            parts.append(_svg.svg_text(bx + bw / 2, y + 15.5, badge, 10, "#fff", "middle", "600"))
            bx -= 3
    if t:
        share = t.get("share") or 0.0
        color = _svg.SLOW if slow else _svg.SERIES[0]
        parts.append(_svg.svg_text(x + 10, y + 50, f"{_svg.duration_us(t['mean_us'])} a forward · {share:.0%}", 11,
                                color if slow else _svg.INK, weight="600" if slow else "normal",
                                extra='class="timing"'))
        # The share of the run as a bar along the node's foot: the slow node is seen before it is read.
        track = NODE_W - 20
        parts.append(f'<rect x="{x + 10}" y="{y + H - 7}" width="{track}" height="3" rx="1.5" '
                     f'style="fill:{_svg.TRACK}"/>'
                     f'<rect class="share" x="{x + 10}" y="{y + H - 7}" width="{max(1.5, track * share):.1f}" '
                     f'height="3" rx="1.5" style="fill:{color}"/>')
    parts.append("</g>")
    return "".join(parts)


def _tip(n):
    t = n.get("timing")
    tip = f"{n['id']} ({n['class']})"
    if t:
        tip += (f": {_svg.duration_us(t['mean_us'])} a forward, {t['share']:.0%} of the run, "
                f"{_svg.duration_us(t['last_us'])} in forward {t['forward']}")
    return tip


def _table(d):
    """What the click shows in the lab, as a table for readers without widgets."""
    timed = d["timed"]
    head = ["node", "class", "settled", "fingerprint"]
    if timed:
        head += ["a forward", "share", "in forward " + str(_forward(d))]
    cell = "padding:2px 12px 2px 0;text-align:left"
    rows = ["<tr>" + "".join(f"<th style='{cell};color:{_svg.MUTED};font-weight:normal'>{h}</th>" for h in head)
            + "</tr>"]
    for n in d["nodes"]:
        if n["kind"] == "io":
            continue
        fp, t = n["fingerprint"], n.get("timing")
        values = [n["id"], n["class"], " ".join(b for b, _ in reversed(BADGES) if n[b]) or "—",
                  fp[:23] + "…" if fp else "—"]
        if timed:
            values += [_svg.duration_us(t["mean_us"]), f"{t['share']:.0%}", _svg.duration_us(t["last_us"])] if t \
                else ["—"] * 3
        rows.append("<tr>" + "".join(
            f"<td style='{cell}{';font-weight:600' if i == 0 else ''}"
            f"{';font-family:monospace;font-size:11px' if i == 3 and fp else ''}'>{escape(v)}</td>"
            for i, v in enumerate(values)) + "</tr>")
    return f"<table style='border-collapse:collapse;font-size:12px;'>{''.join(rows)}</table>"


def _forward(d):
    return next((n["timing"]["forward"] for n in d["nodes"] if n.get("timing")), None)


def graph_html(d, title):
    """The static picture: the drawing, then the table a click would show."""
    return _svg.boxed(f"<div style='display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start'>"
                      f"<div style='overflow-x:auto;max-width:100%'>{d['svg']}</div>{_table(d)}</div>", title)


def graph_bundle(g, include=None, exclude=None):
    """The display bundle of a graph: the widget view, the static SVG and text."""
    title = title_of(g)
    d = describe(g)
    bundle = {"text/plain": repr(g), "text/html": graph_html(d, title)}
    try:
        from ._views import GraphView, view_bundle

        bundle.update(view_bundle(GraphView(graph={**d, "title": title}), bundle["text/plain"]))
    except ImportError:  # no Jupyter widgets installed: the picture alone
        pass
    return bundle
