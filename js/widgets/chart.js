// The one line chart somatize draws in a page: the notebook panels (Live and
// progress) and the run browser's panel (js/sidebar/panel.ts) alike. Plain
// ESM, no dependency. Python (somatize/_pictures/_chart.py) decides the scale,
// the ranges and every tick with its label, and sends them as data; this
// code only places that data at the width its host gives it, so the page
// and the static picture agree by construction. Colours are the strings
// Python sends: JupyterLab's theme variables with their fallbacks; a series
// sent without one takes PALETTE's by its place. Its look: chart.css.
// The widgets get it joined in front of live.js and progress.js
// (somatize/_widgets/_views.py); the run browser's TypeScript imports it
// and its lab extension bundles it (tsconfig.json's allowJs).

/**
 * A line of a chart, as `_chart.chart` sends it.
 * @typedef {object} Series
 * @property {string} name
 * @property {string} [color] empty or absent: PALETTE's colour at the series' place
 * @property {[number, number][]} points [x, y], x ascending
 * @property {[number, number, number][]} [band] [x, low, high]: a shaded band
 * @property {[number, number][]} [raw] the unsmoothed values, drawn faded
 * @property {boolean} [dots] a dot at each point
 */

/**
 * A chart as `_chart.chart` decides it (the widgets' trait, the server's chart route).
 * @typedef {object} Chart
 * @property {boolean} log
 * @property {string} xlabel
 * @property {string} ylabel
 * @property {[number, number]} x the x range, in x's own unit (a step, a second)
 * @property {[number, number] | null} y the y range in the axis's space (log10 of values on a log axis)
 * @property {[number, string][]} xticks
 * @property {[number, string][]} yticks
 * @property {Series[]} series
 * @property {{x: number, label: string}[]} [marks]
 * @property {number} [xdiv] x is divided by it for a label (a time in minutes, hours)
 * @property {boolean} [xclock] x is a clock time (seconds since 1970)
 */

/**
 * What a chart's host may ask of drawChart.
 * @typedef {object} ChartOptions
 * @property {number} [height] in px; 240 unless given
 * @property {(range: [number, number] | null) => void} [onWindow] when given, the wheel zooms,
 *   a drag selects a range of x, a double click shows all
 */

// The series colours, in order: somatize/_pictures/_svg.py's SERIES (a test holds them equal).
export const PALETTE = ["var(--jp-brand-color1, #2563eb)", "var(--jp-warn-color1, #ea580c)",
  "var(--jp-success-color1, #16a34a)", "var(--jp-accent-color1, #9333ea)", "var(--jp-info-color1, #0891b2)",
  "var(--jp-error-color1, #be123c)", "var(--jp-warn-color2, #ca8a04)", "var(--jp-ui-font-color2, #4b5563)"];

/** The colour series `i` of `series` is drawn in. @param {Series[]} series @param {number} i */
export function colorOf(series, i) {
  return series[i].color || PALETTE[i % PALETTE.length];
}

const SVG_NS = "http://www.w3.org/2000/svg";
const CHAR_W = 6.6; // the widest a tick label's character is at 11px, to keep labels apart

/** @param {string} tag @param {Record<string, string | number>} [attrs] @param {Element} [parent] */
function svg(tag, attrs = {}, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (parent) parent.appendChild(node);
  return node;
}

/** @param {string} [cls] @param {Element} [parent] @param {string} [text] @returns {HTMLDivElement} */
export function div(cls, parent, text) {
  const node = document.createElement("div");
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

/** @param {Element} parent @param {string} text @param {string} title @param {boolean} [pressed] */
export function button(parent, text, title, pressed) {
  const node = document.createElement("button");
  node.className = "toggle";
  node.textContent = text;
  node.title = title;
  if (pressed !== undefined) node.setAttribute("aria-pressed", String(pressed));
  parent.appendChild(node);
  return node;
}

/** A number as a tick or a tooltip says it. @param {number | null | undefined} x */
export function label(x) {
  if (x === null || x === undefined) return "—";
  const a = Math.abs(x);
  if (Number.isInteger(x) && a < 1e9) return x.toLocaleString("en-US");
  if (a >= 1e5 || a < 1e-3) return Number(x.toPrecision(3)).toExponential();
  if (a >= 100) return Math.round(x).toLocaleString("en-US");
  return String(Number(x.toPrecision(4)));
}

// The point of `pts` ([[x, y]], x ascending) nearest to x.
function nearest(pts, x) {
  let lo = 0, hi = pts.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (pts[mid][0] < x) lo = mid; else hi = mid;
  }
  return Math.abs(pts[lo][0] - x) <= Math.abs(pts[hi][0] - x) ? pts[lo] : pts[hi];
}

/**
 * Draw `data` into `host`, at the host's width; returns the chart's <svg class="somatize-chart">.
 * @param {HTMLElement} host
 * @param {Chart | null} data
 * @param {ChartOptions} [opts]
 * @returns {SVGSVGElement}
 */
export function drawChart(host, data, opts = {}) {
  host.textContent = "";
  const width = Math.max(280, host.clientWidth || 640);
  const height = opts.height || 240;
  const [left, right, top, bottom] = [64, 16, 10, 42];
  const w = width - left - right, h = height - top - bottom;
  const root = /** @type {SVGSVGElement} */ (
    svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "somatize-chart" }, host));
  root.dataset.log = String(Boolean(data && data.log));
  if (!data || data.y === null) {
    svg("text", { x: left + w / 2, y: top + h / 2, class: "muted", "text-anchor": "middle" }, root).textContent =
      "no values yet";
    return root;
  }
  const [x0, x1] = data.x, [y0, y1] = data.y;
  const f = data.log ? Math.log10 : (v) => v;
  const px = (x) => left + ((x - x0) / (x1 - x0)) * w;
  const py = (y) => top + (1 - (f(y) - y0) / (y1 - y0)) * h;

  // x labels: every k-th, the smallest k that keeps them apart at this width
  const xt = data.xticks;
  const widest = Math.max(1, ...xt.map(([, s]) => s.length)) * CHAR_W + 8;
  const gap = xt.length > 1 ? px(xt[1][0]) - px(xt[0][0]) : w;
  const every = Math.max(1, Math.ceil(widest / Math.max(1, gap)));
  xt.forEach(([t, s], i) => {
    svg("line", { x1: px(t), x2: px(t), y1: top, y2: top + h, class: "grid" }, root);
    if (i % every === 0) {
      svg("text", { x: px(t), y: top + h + 16, class: "tick", "text-anchor": "middle", "data-value": t }, root)
        .textContent = s;
    }
  });
  for (const [t, s] of data.yticks) {
    const Y = py(t);
    svg("line", { x1: left, x2: left + w, y1: Y, y2: Y, class: "grid" }, root);
    svg("text", { x: left - 6, y: Y + 4, class: "tick", "text-anchor": "end", "data-value": t }, root).textContent = s;
  }
  svg("rect", { x: left, y: top, width: w, height: h, class: "frame" }, root);
  svg("text", { x: left + w / 2, y: height - 6, class: "axis", "text-anchor": "middle" }, root).textContent = data.xlabel;
  svg("text", {
    x: 14, y: top + h / 2, class: "axis", "text-anchor": "middle", transform: `rotate(-90 14 ${top + h / 2})`,
  }, root).textContent = data.ylabel;

  const clipId = `sz-clip-${Math.random().toString(36).slice(2)}`;
  svg("rect", { x: left, y: top, width: w, height: h }, svg("clipPath", { id: clipId }, root));
  const plot = svg("g", { "clip-path": `url(#${clipId})` }, root);
  const shown = [];
  data.series.forEach((s, i) => {
    const color = colorOf(data.series, i);
    const band = (s.band || []).filter((p) => p[0] >= x0 && p[0] <= x1);
    if (band.length > 1) {
      const upper = band.map((p) => `${px(p[0]).toFixed(1)},${py(p[2]).toFixed(1)}`);
      const lower = band.slice().reverse().map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`);
      svg("polygon", { points: upper.concat(lower).join(" "), class: "band", style: `fill:${color}` }, plot);
    }
    if (s.raw && s.raw.length) {
      svg("polyline", {
        points: s.raw.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(" "),
        class: "raw", style: `stroke:${color}`,
      }, plot);
    }
    const pts = s.points.filter((p) => p[0] >= x0 && p[0] <= x1);
    if (!pts.length) return;
    shown.push({ s, pts, color });
    svg("polyline", {
      points: pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(" "),
      class: "curve", style: `stroke:${color}`, "data-points": pts.length, "data-name": s.name,
    }, plot);
    if (s.dots) {
      for (const p of pts) svg("circle", { cx: px(p[0]), cy: py(p[1]), r: 2.5, class: "dot", style: `fill:${color}` }, plot);
    }
  });
  for (const m of data.marks || []) {
    const X = px(m.x);
    svg("line", { x1: X, x2: X, y1: top, y2: top + h, class: "mark" }, root);
    // at the foot of the plot: a diverging line is high where it stops
    svg("text", { x: X - 4, y: top + h - 6, class: "mark", "text-anchor": "end" }, root).textContent = m.label;
  }

  // Hover: a line at the nearest step and every series' value there, in one box.
  const cross = svg("line", { y1: top, y2: top + h, class: "cross", visibility: "hidden" }, root);
  const dots = shown.map(({ color }) => svg("circle", { r: 3.5, style: `fill:${color}`, visibility: "hidden" }, root));
  const tip = svg("g", { class: "hover", visibility: "hidden" }, root);
  const tipBox = svg("rect", { rx: 3, class: "hover-box" }, tip);
  const tipText = svg("text", { class: "hover" }, tip);
  const brush = svg("rect", { y: top, height: h, class: "brush", visibility: "hidden" }, root);
  const toX = (ev) => {
    const box = root.getBoundingClientRect();
    return ((ev.clientX - box.left) / box.width) * width;
  };
  let dragFrom = null;
  root.addEventListener("mousemove", (ev) => {
    const mx = toX(ev);
    if (dragFrom !== null) {
      brush.setAttribute("x", Math.min(dragFrom, mx));
      brush.setAttribute("width", Math.abs(mx - dragFrom));
      brush.setAttribute("visibility", "visible");
    }
    if (mx < left || mx > left + w || !shown.length) return;
    const step = x0 + ((mx - left) / w) * (x1 - x0);
    const at = nearest(shown[0].pts, step)[0];
    const X = px(at);
    // x as its axis says it: a clock time, a time in the axis's unit, or a step
    const xText = (v) => data.xclock ? new Date(v * 1000).toLocaleTimeString()
      : label(Math.round((v / (data.xdiv || 1)) * 100) / 100);
    const lines = [`${data.xlabel} ${xText(at)}`];
    shown.forEach(({ s, pts }, i) => {
      const p = nearest(pts, at);
      dots[i].setAttribute("cx", px(p[0]));
      dots[i].setAttribute("cy", py(p[1]));
      dots[i].setAttribute("visibility", "visible");
      // a fact said now and then (an evaluation): its nearest point, and where it was said
      lines.push(`${s.name}: ${label(p[1])}` + (s.dots && p[0] !== at ? ` (at ${xText(p[0])})` : ""));
    });
    cross.setAttribute("x1", X); cross.setAttribute("x2", X);
    cross.setAttribute("visibility", "visible");
    tipText.textContent = "";
    lines.forEach((t, i) => svg("tspan", { x: 0, dy: i ? 15 : 0 }, tipText).textContent = t);
    tip.setAttribute("visibility", "visible");
    const bb = tipText.getBBox();
    const flip = X + 12 + bb.width > left + w;
    const tx = flip ? X - 12 - bb.width : X + 12;
    tipText.setAttribute("transform", `translate(${tx} ${top + 16})`);
    tipBox.setAttribute("x", tx - 5); tipBox.setAttribute("y", top + 16 + bb.y - 3);
    tipBox.setAttribute("width", bb.width + 10); tipBox.setAttribute("height", bb.height + 6);
  });
  root.addEventListener("mouseleave", () => {
    for (const n of [cross, tip, brush, ...dots]) n.setAttribute("visibility", "hidden");
    dragFrom = null;
  });
  if (opts.onWindow) {
    const atX = (mx) => x0 + ((Math.min(Math.max(mx, left), left + w) - left) / w) * (x1 - x0);
    root.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const c = atX(toX(ev)), k = ev.deltaY > 0 ? 1.25 : 0.8;
      opts.onWindow([c - (c - x0) * k, c + (x1 - c) * k]);
    }, { passive: false });
    root.addEventListener("mousedown", (ev) => { dragFrom = toX(ev); ev.preventDefault(); });
    root.addEventListener("mouseup", (ev) => {
      const mx = toX(ev);
      if (dragFrom !== null && Math.abs(mx - dragFrom) > 5) {
        opts.onWindow([atX(Math.min(dragFrom, mx)), atX(Math.max(dragFrom, mx))]);
      }
      dragFrom = null;
      brush.setAttribute("visibility", "hidden");
    });
    root.addEventListener("dblclick", () => opts.onWindow(null));
  }
  return root;
}

/**
 * One swatch and name a line into `legend`, when there is more than one line,
 * or always when `titles` (each line's tooltip) are given.
 * @param {HTMLElement} legend
 * @param {Series[]} series
 * @param {string[]} [titles]
 */
export function drawLegend(legend, series, titles) {
  legend.textContent = "";
  legend.classList.add("somatize-legend");
  legend.hidden = series.length < 2 && !titles;
  series.forEach((line, i) => {
    const item = div("item", legend);
    item.dataset.name = line.name;
    if (titles) item.title = titles[i];
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = colorOf(series, i);
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = line.name;
    item.append(swatch, name);
  });
}

/**
 * Call `draw` when `el`'s width changes (only then, or drawing would feed the observer).
 * @param {HTMLElement} el @param {() => void} draw
 */
export function onResize(el, draw) {
  let seen = 0;
  const observer = new ResizeObserver(() => {
    if (el.clientWidth !== seen) { seen = el.clientWidth; draw(); }
  });
  observer.observe(el);
  return observer;
}
