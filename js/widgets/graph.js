// The graph panel: nodes and edges as laid out by Python (layers, no
// graphviz), frozen/cached badges, last timings; click a node for details.

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

function details(box, node, data) {
  box.textContent = "";
  if (!node) {
    box.textContent = "Click a node to see its details.";
    return;
  }
  const into = data.edges.filter((e) => e.to === node.id).map((e) => e.from);
  const out = data.edges.filter((e) => e.from === node.id).map((e) => e.to);
  const rows = [
    ["node", node.id],
    ["class", node.class],
    ["frozen", node.frozen ? "yes: settled, its output depends on its input alone" : "no"],
    ["cached", node.cached ? "yes: its output is kept in the store" : "no"],
    ["fingerprint", node.fingerprint || (node.frozen ? "—" : "only frozen nodes have one")],
    ["takes from", into.join(", ")],
    ["gives to", out.join(", ")],
  ];
  if (node.timing) {
    rows.push(["last forward", duration(node.timing.last_us)]);
    rows.push(["mean", `${duration(node.timing.mean_us)} over ${node.timing.runs} runs`]);
  }
  const table = document.createElement("table");
  for (const [k, v] of rows) {
    const tr = table.insertRow();
    tr.insertCell().textContent = k;
    const cell = tr.insertCell();
    if (k === "fingerprint" && node.fingerprint) {
      const code = document.createElement("code");
      code.textContent = v;
      cell.appendChild(code);
    } else cell.textContent = v;
  }
  box.appendChild(table);
}

function render({ model, el }) {
  el.classList.add("somatize-panel", "somatize-graph");
  const head = document.createElement("div");
  head.className = "head";
  const title = document.createElement("div");
  title.className = "title";
  head.appendChild(title);
  el.appendChild(head);
  const host = document.createElement("div");
  host.style.overflowX = "auto";
  el.appendChild(host);
  const box = document.createElement("div");
  box.className = "details";
  el.appendChild(box);
  let selected = null;

  function draw() {
    const data = model.get("graph");
    if (!data || !data.nodes) return;
    title.textContent = data.title;
    host.textContent = "";
    const W = data.node_w, H = data.node_h;
    const root = svg("svg", { width: data.width, height: data.height, viewBox: `0 0 ${data.width} ${data.height}` }, host);
    const byId = Object.fromEntries(data.nodes.map((n) => [n.id, n]));
    for (const e of data.edges) {
      const a = byId[e.from], b = byId[e.to];
      const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y - 4, mid = (y1 + y2) / 2;
      svg("path", { d: `M${x1},${y1} C${x1},${mid} ${x2},${mid} ${x2},${y2}`, class: "edge",
                    "data-from": e.from, "data-to": e.to }, root);
      svg("path", { d: `M${x2 - 4},${y2 - 5} L${x2 + 4},${y2 - 5} L${x2},${y2 + 2} Z`, class: "arrow" }, root);
    }
    for (const n of data.nodes) {
      const io = n.kind === "io";
      const g = svg("g", { class: `node${io ? " io" : ""}${selected === n.id ? " selected" : ""}`, "data-node": n.id }, root);
      svg("rect", { x: n.x, y: n.y, width: W, height: H, rx: 6 }, g);
      if (io) {
        svg("text", { x: n.x + W / 2, y: n.y + H / 2 + 4, "text-anchor": "middle", class: "muted" }, g).textContent = n.label;
        continue;
      }
      svg("text", { x: n.x + 10, y: n.y + 18, "font-weight": 600, "font-size": 13 }, g).textContent = n.label;
      const sub = n.class + (n.timing ? ` · ${duration(n.timing.last_us)}` : "");
      svg("text", { x: n.x + 10, y: n.y + 35, class: "muted" }, g).textContent = sub;
      let bx = n.x + W - 6;
      for (const badge of ["cached", "frozen"]) {
        if (!n[badge]) continue;
        const bw = 6.2 * badge.length + 8;
        bx -= bw;
        svg("rect", { x: bx, y: n.y + 5, width: bw, height: 14, rx: 7, class: `badge-${badge}` }, g);
        svg("text", { x: bx + bw / 2, y: n.y + 15.5, "text-anchor": "middle", class: "badge" }, g).textContent = badge;
        bx -= 3;
      }
      const tip = svg("title", {}, g);
      tip.textContent = `${n.id} (${n.class}) — click for details`;
      g.addEventListener("click", () => {
        selected = selected === n.id ? null : n.id;
        draw();
      });
    }
    details(box, selected ? byId[selected] : null, data);
  }
  model.on("change:graph", draw);
  draw();
  return () => model.off("change:graph", draw);
}

export default { render };
