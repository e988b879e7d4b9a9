// The spent panel: where a run's time went. Bars (longest first, the slowest
// node in orange, the engine's and Trainer's own time in grey) and a
// timeline of one forward. Hover a bar or a span for its numbers.

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, parent) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function duration(us) {
  if (us === null || us === undefined) return "—";
  if (us >= 1e6) return `${+(us / 1e6).toPrecision(3)} s`;
  if (us >= 1e3) return `${+(us / 1e3).toPrecision(3)} ms`;
  return `${+us.toPrecision(3)} µs`;
}

function ticks(hi, count) {
  if (!(hi > 0)) return [0];
  const raw = hi / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [];
  for (let t = 0; t <= hi + step * 1e-9; t += step) out.push(t);
  return out;
}

function heading(el, text) {
  const h = document.createElement("h4");
  h.textContent = text;
  el.appendChild(h);
}

function bars(host, data, width) {
  const [left, right, barH, gap] = [200, 190, 18, 6];
  const height = 30 + data.rows.length * (barH + gap);
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "bars" }, host);
  const top = Math.max(...data.rows.map((r) => r.total_us)) || 1;
  const w = width - left - right;
  data.rows.forEach((r, i) => {
    const y = 6 + i * (barH + gap);
    svg("text", { x: left - 8, y: y + barH - 5, "text-anchor": "end" }, root).textContent = r.label;
    const cls = r.kind !== "node" ? "bar overhead" : r.slowest ? "bar slowest" : "bar";
    const bar = svg("rect", { x: left, y, width: Math.max(1, (r.total_us / top) * w), height: barH, rx: 2,
                              class: cls, "data-node": r.label, "data-kind": r.kind }, root);
    svg("title", {}, bar).textContent =
      `${r.label}: ${duration(r.total_us)} in all, ${duration(r.mean_us)} a forward over ${r.count} forwards`;
    svg("text", { x: left + Math.max(1, (r.total_us / top) * w) + 6, y: y + barH - 5, class: "tick" }, root)
      .textContent = `${duration(r.total_us)} · ${Math.round(r.share * 100)}% · mean ${duration(r.mean_us)}`;
  });
  svg("text", { x: left, y: height - 4, class: "tick" }, root).textContent = "total time over the run";
}

function timeline(host, t, slowest, width) {
  const [left, right, lane] = [200, 24, 20];
  const height = 40 + t.spans.length * lane;
  const total = Math.max(t.total_us || 0, ...t.spans.map((s) => s.began_us + s.took_us)) || 1;
  const longest = Math.max(...t.spans.map((s) => s.took_us));
  const w = width - left - right;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "timeline" }, host);
  for (const tick of ticks(total, 5)) {
    const X = left + (tick / total) * w;
    svg("line", { x1: X, x2: X, y1: 4, y2: height - 30, class: "grid" }, root);
    svg("text", { x: X, y: height - 16, "text-anchor": "middle", class: "tick" }, root).textContent = duration(tick);
  }
  t.spans.forEach((s, i) => {
    const y = 6 + i * lane;
    svg("text", { x: left - 8, y: y + 12, "text-anchor": "end" }, root).textContent =
      s.node + (s.kind === "recalled" ? " (recalled)" : "");
    const span = svg("rect", {
      x: left + (s.began_us / total) * w, y, width: Math.max(1.5, (s.took_us / total) * w), height: lane - 6, rx: 2,
      class: s.node === slowest || s.took_us === longest ? "span slowest" : "span", "data-node": s.node,
    }, root);
    svg("title", {}, span).textContent = `${s.node}: began at ${duration(s.began_us)}, took ${duration(s.took_us)}`;
  });
  svg("text", { x: left + w / 2, y: height - 2, "text-anchor": "middle", class: "tick" }, root).textContent =
    "time since the forward began";
}

function render({ model, el }) {
  el.classList.add("somatize-panel", "somatize-spent");
  function draw() {
    const d = model.get("spent");
    el.textContent = "";
    if (!d || !d.rows) return;
    const head = document.createElement("div");
    head.className = "head";
    const title = document.createElement("div");
    title.className = "title";
    title.textContent = `Where the time went — run “${d.run}”, ${d.forwards.toLocaleString("en-US")} forwards`;
    head.appendChild(title);
    el.appendChild(head);
    if (d.rows.length === 0) {
      el.appendChild(document.createTextNode("No node has run in this run yet."));
      return;
    }
    const width = Math.max(560, Math.min(el.clientWidth - 26 || 760, 900));
    heading(el, "Total time per node, its share of all, and its mean per forward");
    bars(el, d, width);
    if (d.timeline && d.timeline.spans.length) {
      heading(el, `Forward ${d.timeline.forward}: which node ran when (${duration(d.timeline.total_us)} in all)`);
      timeline(el, d.timeline, d.slowest, width);
    }
  }
  model.on("change:spent", draw);
  draw();
  return () => model.off("change:spent", draw);
}

export default { render };
