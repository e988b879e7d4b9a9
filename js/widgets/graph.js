// The graph panel. Python lays the DAG out and draws it as SVG (the same
// picture the static fallback shows); this module puts that SVG in the page
// and adds what a static picture cannot do: click a node for its details,
// zoom (buttons, ctrl+wheel), pan (scroll or drag) and fit to the cell.
// The SVG is Python's own, with every name escaped.

function duration(us) {
  if (us === null || us === undefined) return "—";
  if (us >= 1e6) return `${+(us / 1e6).toPrecision(3)} s`;
  if (us >= 1e3) return `${+(us / 1e3).toPrecision(3)} ms`;
  return `${+us.toPrecision(3)} µs`;
}

function details(box, node, data) {
  box.textContent = "";
  if (!node) {
    box.classList.add("empty");
    box.textContent = "Click a node to see its details.";
    return;
  }
  box.classList.remove("empty");
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
  const t = node.timing;
  if (t) {
    rows.push(["a forward", `${duration(t.mean_us)} on average over ${t.calls.toLocaleString("en-US")} calls (ran or recalled)`]);
    rows.push(["share", `${Math.round(t.share * 100)}% of the run's time${t.slowest ? " (the slowest node)" : ""}`]);
    rows.push([`forward ${t.forward}`, t.last_us === null ? "did not run" : duration(t.last_us)]);
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
  const body = document.createElement("div");
  body.className = "graph-body";
  el.appendChild(body);
  const tools = document.createElement("div");
  tools.className = "tools";
  head.appendChild(tools);
  const tool = (text, label) => {
    const b = document.createElement("button");
    b.className = "toggle";
    b.textContent = text;
    b.title = label;
    b.setAttribute("aria-label", label);
    tools.appendChild(b);
    return b;
  };
  const out = tool("−", "zoom out"), inn = tool("+", "zoom in"), fit = tool("fit", "fit the graph to the cell");
  fit.setAttribute("aria-pressed", "false");
  const host = document.createElement("div");
  host.className = "graph-host";
  body.appendChild(host);
  let zoom = 1;
  function scale() {
    const svg = host.querySelector("svg");
    if (!svg) return;
    const fitted = fit.getAttribute("aria-pressed") === "true";
    host.classList.toggle("fit", fitted);
    const w = Number(svg.getAttribute("width")), h = Number(svg.getAttribute("height"));
    // fit: the whole graph inside the cell, both ways (the host is at most its max-height tall)
    const tall = parseFloat(getComputedStyle(host).maxHeight) || h;
    const k = fitted ? Math.min(1, host.clientWidth / w, tall / h) : zoom;
    svg.style.maxWidth = "none";  // Python's picture shrinks to its cell (max-width: 100%): a zoom must not
    svg.style.width = `${w * k}px`;
    svg.style.height = `${h * k}px`;
  }
  const zoomBy = (k) => { zoom = Math.min(4, Math.max(0.2, zoom * k)); fit.setAttribute("aria-pressed", "false"); scale(); };
  out.addEventListener("click", () => zoomBy(1 / 1.25));
  inn.addEventListener("click", () => zoomBy(1.25));
  fit.addEventListener("click", () => {
    fit.setAttribute("aria-pressed", String(fit.getAttribute("aria-pressed") !== "true"));
    scale();
  });
  host.addEventListener("wheel", (ev) => {
    if (!ev.ctrlKey) return;  // a plain wheel scrolls the page; ctrl+wheel zooms, as in a map
    ev.preventDefault();
    zoomBy(ev.deltaY > 0 ? 1 / 1.1 : 1.1);
  }, { passive: false });
  let drag = null;
  host.addEventListener("mousedown", (ev) => { drag = [ev.clientX, ev.clientY, host.scrollLeft, host.scrollTop]; });
  host.addEventListener("mousemove", (ev) => {
    if (!drag || !(ev.buttons & 1)) { drag = null; return; }
    host.scrollLeft = drag[2] - (ev.clientX - drag[0]);
    host.scrollTop = drag[3] - (ev.clientY - drag[1]);
  });
  const box = document.createElement("div");
  box.className = "details";
  body.appendChild(box);
  let selected = null;

  function select(id) {
    const data = model.get("graph");
    selected = selected === id ? null : id;
    for (const g of host.querySelectorAll("g.node")) g.classList.toggle("selected", g.dataset.node === selected);
    details(box, data.nodes.find((n) => n.id === selected && n.kind !== "io"), data);
  }

  function draw() {
    const data = model.get("graph");
    if (!data || !data.svg) return;
    title.textContent = data.title;
    host.innerHTML = data.svg;
    scale();
    for (const g of host.querySelectorAll("g.node:not(.io)")) {
      g.addEventListener("click", () => select(g.dataset.node));
    }
    const keep = selected;
    selected = null;
    select(keep);
  }
  model.on("change:graph", draw);
  draw();
  // a fitted graph follows the cell's width
  const resized = new ResizeObserver(() => { if (fit.getAttribute("aria-pressed") === "true") scale(); });
  resized.observe(body);
  return () => { model.off("change:graph", draw); resized.disconnect(); };
}

export default { render };
