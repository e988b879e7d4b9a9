"""The graph panel: what `Graph` shows when displayed.

The rule it keeps: the panel reads the graph through its public face
(`nodes`, `edges`, `outputs`, `fingerprints()`) and never changes it. The DAG
is laid out here, once, in layers (no graphviz): the front end and the static
SVG draw the same coordinates, so the picture on GitHub is the one in the lab.
"""

from __future__ import annotations

from html import escape

from . import _svg

NODE_W, NODE_H, LAYER_GAP, NODE_GAP, MARGIN = 150, 44, 34, 22, 12


def describe(g, timings=None):
    """The panel's data: nodes with badges, fingerprints and timings, edges,
    and a layered layout. `timings`: {node name: {"last_us", "mean_us", "runs"}}."""
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
    _layout(nodes, edges)
    width = max(n["x"] + NODE_W for n in nodes) + MARGIN
    height = max(n["y"] + NODE_H for n in nodes) + MARGIN
    return {"nodes": nodes, "edges": edges, "width": width, "height": height,
            "node_w": NODE_W, "node_h": NODE_H, "timed": bool(timings)}


def _layout(nodes, edges):
    """Layers by longest path from the input; inside a layer, nodes ordered
    by the mean position of their parents (one barycentre sweep), centred."""
    parents = {n["id"]: [] for n in nodes}
    for e in edges:
        parents[e["to"]].append(e["from"])
    layer = {}
    for n in nodes:  # nodes come in run order, so parents are placed first
        ps = parents[n["id"]]
        layer[n["id"]] = 1 + max((layer[p] for p in ps), default=-1)
    rows = {}
    for n in nodes:
        rows.setdefault(layer[n["id"]], []).append(n["id"])
    pos = {}
    for k in sorted(rows):  # parents sit in earlier layers, already placed
        rows[k].sort(key=lambda nid: sum(pos[p] for p in parents[nid]) / max(1, len(parents[nid])))
        for i, nid in enumerate(rows[k]):
            pos[nid] = i - (len(rows[k]) - 1) / 2
    widest = max(len(r) for r in rows.values())
    by_id = {n["id"]: n for n in nodes}
    for k, row in rows.items():
        offset = (widest - len(row)) * (NODE_W + NODE_GAP) / 2
        for i, nid in enumerate(row):
            by_id[nid]["x"] = MARGIN + offset + i * (NODE_W + NODE_GAP)
            by_id[nid]["y"] = MARGIN + k * (NODE_H + LAYER_GAP)
            by_id[nid]["layer"] = k


def _edge_path(a, b):
    x1, y1 = a["x"] + NODE_W / 2, a["y"] + NODE_H
    x2, y2 = b["x"] + NODE_W / 2, b["y"] - 4
    mid = (y1 + y2) / 2
    return f"M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}", (x2, y2)


def graph_svg(d):
    by_id = {n["id"]: n for n in d["nodes"]}
    w, h = d["width"], d["height"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             f'font-family="{_svg.FONT}" role="img" aria-label="graph">']
    for e in d["edges"]:
        path, (x2, y2) = _edge_path(by_id[e["from"]], by_id[e["to"]])
        parts.append(f'<path class="edge" d="{path}" fill="none" stroke="{_svg.MUTED}" stroke-width="1.3"/>')
        parts.append(f'<path d="M{x2 - 4:.1f},{y2 - 5:.1f} L{x2 + 4:.1f},{y2 - 5:.1f} L{x2:.1f},{y2 + 2:.1f} Z" fill="{_svg.MUTED}"/>')
    for n in d["nodes"]:
        x, y = n["x"], n["y"]
        io = n["kind"] == "io"
        dash = ' stroke-dasharray="4 3"' if io else ""
        fill = _svg.SURFACE if io else "var(--jp-layout-color2, #f3f4f6)"
        parts.append(f'<g class="node" data-node="{escape(n["id"])}"><rect x="{x}" y="{y}" width="{NODE_W}" '
                     f'height="{NODE_H}" rx="6" fill="{fill}" stroke="{_svg.GRID}" stroke-width="1.2"{dash}/>')
        if io:
            parts.append(_svg._text(x + NODE_W / 2, y + NODE_H / 2 + 4, n["label"], 12, _svg.MUTED, "middle"))
        else:
            parts.append(_svg._text(x + 10, y + 18, n["label"], 13, _svg.INK, weight="600"))
            sub = n["class"]
            if n.get("timing"):
                sub += " · " + _svg.duration_us(n["timing"]["last_us"])
            parts.append(_svg._text(x + 10, y + 35, sub, 11, _svg.MUTED))
            bx = x + NODE_W - 6
            for badge, color in (("cached", "#9333ea"), ("frozen", "#0891b2")):
                if n[badge]:
                    bw = 6.2 * len(badge) + 8
                    bx -= bw
                    parts.append(f'<rect x="{bx:.1f}" y="{y + 5}" width="{bw:.1f}" height="14" rx="7" fill="{color}"/>')
                    parts.append(_svg._text(bx + bw / 2, y + 15.5, badge, 10, "#fff", "middle", "600"))
                    bx -= 3
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def _table(d):
    rows = []
    for n in d["nodes"]:
        if n["kind"] == "io":
            continue
        fp = n["fingerprint"]
        t = n.get("timing")
        rows.append(
            f"<tr><td style='padding:1px 10px 1px 0;font-weight:600'>{escape(n['id'])}</td>"
            f"<td style='padding:1px 10px 1px 0'>{escape(n['class'])}</td>"
            f"<td style='padding:1px 10px 1px 0'>{'frozen' if n['frozen'] else ''} {'cached' if n['cached'] else ''}</td>"
            f"<td style='padding:1px 10px 1px 0;font-family:monospace;font-size:11px'>{escape(fp[:23] + '…') if fp else ''}</td>"
            f"<td style='padding:1px 0'>{escape(_svg.duration_us(t['last_us'])) if t else ''}</td></tr>"
        )
    return f"<table style='border-collapse:collapse;font-size:12px;margin-top:8px'>{''.join(rows)}</table>"


def graph_html(d, title):
    return _svg.boxed(graph_svg(d) + _table(d), title)


def timings_from_record(store, run):
    """{node: {"last_us", "mean_us", "runs"}} from a run's record."""
    from somatize.record import nodes as node_table
    from somatize.record import facts

    table = node_table(store, run=run)
    out = {}
    for row in table.reset_index().to_dict("records"):
        name = row.get("node")
        mean = row.get("mean_us")
        out[name] = {"mean_us": _num(mean), "runs": int(row.get("ran", 0) or 0), "last_us": _num(mean)}
    try:
        last = facts(store, run=run, forward=-1)
    except Exception:
        last = []
    for f in last:
        if f.get("fact") in ("ran", "recalled") and f.get("node") in out:
            out[f["node"]]["last_us"] = f["took_us"]
    return out


def _num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


class GraphPanel:
    """A graph as a panel: the widget where it runs, the SVG where it doesn't."""

    def __init__(self, g, store=None, run=None):
        self.graph = g
        timings = timings_from_record(store, run) if store is not None and run is not None else None
        self.data = describe(g, timings)
        self.title = repr(g) + (f" — timings from run {run!r}" if timings else "")

    def _repr_mimebundle_(self, include=None, exclude=None):
        return graph_bundle(self.graph, include=include, exclude=exclude, _panel=self)

    def to_html(self):
        return graph_html(self.data, self.title)


def graph_bundle(g, include=None, exclude=None, store=None, run=None, _panel=None):
    """The display bundle of a graph: the widget view, the static SVG and text."""
    panel = _panel or GraphPanel(g, store=store, run=run)
    bundle = {"text/plain": repr(g), "text/html": panel.to_html()}
    try:
        from ._views import GraphView, view_bundle
    except ImportError:  # no Jupyter widgets installed: the picture alone
        return bundle
    bundle.update(view_bundle(GraphView(graph={**panel.data, "title": panel.title})))
    return bundle
