// The Live panel: a run as it happens. Plain ESM for anywidget, no bundler.
// Python sends one `status` dict at most ten times a second; this module
// only draws it. Colours come from JupyterLab's CSS variables (panel.css),
// so light and dark themes both read well.

const SVG = "http://www.w3.org/2000/svg";
const STATE_LABEL = { waiting: "waiting", running: "running", finished: "finished", failed: "failed" };

function svg(tag, attrs = {}, parent) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function div(cls, parent, text) {
  const node = document.createElement("div");
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

export function number(x) {
  if (x === null || x === undefined) return "—";
  if (x === 0) return "0";
  const a = Math.abs(x);
  if (Number.isInteger(x) && a < 1e9) return x.toLocaleString("en-US");
  if (a >= 1e5 || a < 1e-3) return Number(x.toPrecision(3)).toExponential();
  if (a >= 100) return Math.round(x).toLocaleString("en-US");
  return String(Number(x.toPrecision(4)));
}

function seconds(s) {
  if (s === null || s === undefined) return "—";
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  return `${s.toFixed(1)} s`;
}

export function ticks(lo, hi, count) {
  if (!isFinite(lo) || !isFinite(hi)) return [];
  if (hi <= lo) hi = lo + (Math.abs(lo) || 1);
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [];
  for (let t = Math.ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
  return out;
}

// Draw the curve (mean line, min–max band when steps are bucketed) into `host`.
function chart(host, status, log) {
  host.textContent = "";
  const width = Math.max(320, Math.min(host.clientWidth || 640, 900));
  const height = 240;
  const [left, right, top, bottom] = [64, 16, 10, 42];
  const w = width - left - right;
  const h = height - top - bottom;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "somatize-chart" }, host);
  const pts = status.curve.filter((p) => p[1] !== null && (!log || p[1] > 0));
  if (pts.length === 0) {
    svg("text", { x: left + w / 2, y: top + h / 2, class: "muted", "text-anchor": "middle" }, root).textContent =
      "no loss yet";
    return;
  }
  const band = status.stride > 1 ? status.curve.filter((p) => p[2] !== null && p[3] !== null && (!log || p[2] > 0)) : [];
  const ys = pts.map((p) => p[1]).concat(band.flatMap((p) => [p[2], p[3]]));
  const f = log ? Math.log10 : (v) => v;
  let x0 = pts[0][0], x1 = pts[pts.length - 1][0];
  if (x1 === x0) x1 = x0 + 1;
  let y0 = f(Math.min(...ys)), y1 = f(Math.max(...ys));
  if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const pad = (y1 - y0) * 0.05;
  y0 -= pad; y1 += pad;
  const px = (x) => left + ((x - x0) / (x1 - x0)) * w;
  const py = (y) => top + (1 - (f(y) - y0) / (y1 - y0)) * h;

  for (const t of ticks(x0, x1, 6)) {
    svg("line", { x1: px(t), x2: px(t), y1: top, y2: top + h, class: "grid" }, root);
    svg("text", { x: px(t), y: top + h + 16, class: "tick", "text-anchor": "middle" }, root).textContent = number(t);
  }
  const yt = log
    ? Array.from({ length: Math.ceil(y1) - Math.floor(y0) + 1 }, (_, i) => Math.pow(10, Math.floor(y0) + i))
    : ticks(y0, y1, 5);
  for (const t of yt) {
    const Y = py(t);
    if (Y < top - 0.5 || Y > top + h + 0.5) continue;
    svg("line", { x1: left, x2: left + w, y1: Y, y2: Y, class: "grid" }, root);
    svg("text", { x: left - 6, y: Y + 4, class: "tick", "text-anchor": "end" }, root).textContent = number(t);
  }
  svg("rect", { x: left, y: top, width: w, height: h, class: "frame" }, root);
  svg("text", { x: left + w / 2, y: height - 6, class: "axis", "text-anchor": "middle" }, root).textContent = "step";
  svg("text", {
    x: 14, y: top + h / 2, class: "axis", "text-anchor": "middle", transform: `rotate(-90 14 ${top + h / 2})`,
  }, root).textContent = log ? "loss (log scale)" : "loss";

  if (band.length > 1) {
    const upper = band.map((p) => `${px(p[0]).toFixed(1)},${py(p[3]).toFixed(1)}`);
    const lower = band.slice().reverse().map((p) => `${px(p[0]).toFixed(1)},${py(p[2]).toFixed(1)}`);
    svg("polygon", { points: upper.concat(lower).join(" "), class: "band" }, root);
  }
  svg("polyline", {
    points: pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(" "),
    class: "curve", "data-points": pts.length,
  }, root);

  // Hover: the nearest point's step and loss.
  const cross = svg("line", { y1: top, y2: top + h, class: "cross", visibility: "hidden" }, root);
  const dot = svg("circle", { r: 3.5, class: "dot", visibility: "hidden" }, root);
  const label = svg("text", { class: "hover", visibility: "hidden" }, root);
  root.addEventListener("mousemove", (ev) => {
    const box = root.getBoundingClientRect();
    const mx = ((ev.clientX - box.left) / box.width) * width;
    if (mx < left || mx > left + w) return;
    const step = x0 + ((mx - left) / w) * (x1 - x0);
    let best = pts[0];
    for (const p of pts) if (Math.abs(p[0] - step) < Math.abs(best[0] - step)) best = p;
    const X = px(best[0]), Y = py(best[1]);
    for (const n of [cross, dot, label]) n.setAttribute("visibility", "visible");
    cross.setAttribute("x1", X); cross.setAttribute("x2", X);
    dot.setAttribute("cx", X); dot.setAttribute("cy", Y);
    label.setAttribute("x", X + (X > left + w * 0.7 ? -8 : 8));
    label.setAttribute("y", top + 14);
    label.setAttribute("text-anchor", X > left + w * 0.7 ? "end" : "start");
    label.textContent = `step ${number(Math.round(best[0]))}: loss ${number(best[1])}`;
  });
  root.addEventListener("mouseleave", () => {
    for (const n of [cross, dot, label]) n.setAttribute("visibility", "hidden");
  });
}

function render({ model, el }) {
  el.classList.add("somatize-panel", "somatize-live");
  const head = div("head", el);
  const title = div("title", head);
  const pill = div("pill", head);
  const toggle = document.createElement("button");
  toggle.className = "toggle";
  head.appendChild(toggle);
  const stats = div("stats", el);
  const cells = {};
  for (const [key, label] of [["steps", "steps"], ["rate", "steps/s"], ["last", "last loss"],
                              ["best", "best loss"], ["elapsed", "elapsed"]]) {
    const cell = div("stat", stats);
    div("label", cell, label);
    cells[key] = div("value", cell);
    cells[key].dataset.stat = key;
  }
  const host = div("chart-host", el);
  let log = null;  // chosen from the data until the reader picks one
  toggle.addEventListener("click", () => { log = !scaleIsLog(); draw(); });

  // Log scale when the loss spans more than two decades, as the static picture does.
  function scaleIsLog() {
    if (log !== null) return log;
    const s = model.get("status");
    const pts = (s && s.curve ? s.curve : []).filter((p) => p[1] !== null);
    if (!pts.length || pts.some((p) => p[2] === null || p[2] <= 0)) return false;
    return Math.max(...pts.map((p) => p[3])) / Math.min(...pts.map((p) => p[2])) > 100;
  }

  function draw() {
    const s = model.get("status");
    if (!s || !s.curve) return;
    title.textContent = s.title;
    pill.textContent = STATE_LABEL[s.state] + (s.error ? ` (${s.error})` : "");
    pill.dataset.state = s.state;
    el.dataset.state = s.state;
    el.dataset.steps = s.steps;
    cells.steps.textContent = s.steps.toLocaleString("en-US");
    cells.rate.textContent = number(s.steps_per_s);
    cells.last.textContent = number(s.last);
    cells.best.textContent = number(s.best);
    cells.elapsed.textContent = seconds(s.elapsed_s);
    const isLog = scaleIsLog();
    // Says what the scale is, as progress's toggle does: pressed with a tick when log.
    toggle.textContent = isLog ? "✓ log scale" : "log scale";
    toggle.setAttribute("aria-pressed", String(isLog));
    toggle.title = isLog ? "the y axis is in log scale: click for linear" : "click for a log scale on the y axis";
    chart(host, s, isLog);
  }
  model.on("change:status", draw);
  let seenWidth = 0;  // redraw on a change of width only, or drawing would feed the observer
  const resize = new ResizeObserver(() => {
    if (host.clientWidth !== seenWidth) { seenWidth = host.clientWidth; draw(); }
  });
  resize.observe(el);
  draw();
  return () => {
    model.off("change:status", draw);
    resize.disconnect();
  };
}

export default { render };
