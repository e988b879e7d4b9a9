// The Live panel: a run as it happens. Python sends one `status` dict at
// most ten times a second, its chart already decided (scale, ticks,
// labels: somatize/_pictures/_chart.py); this module draws it with
// drawChart (chart.js, joined in front of this file). The log-scale toggle
// asks Python for the other scale through the synced `log` trait.

const STATE_LABEL = { waiting: "waiting", running: "running", finished: "finished", interrupted: "interrupted" };
const STATS = [["steps", "steps"], ["rate", "steps/s"], ["last", "last loss"], ["best", "best loss"],
               ["elapsed", "elapsed"], ["eta", "to go"]];

function render({ model, el }) {
  el.classList.add("somatize-panel", "somatize-live");
  const head = div("head", el);
  const title = div("title", head);
  const pill = div("pill", head);
  const smoothing = document.createElement("label");
  smoothing.className = "smoothing";
  smoothing.textContent = "smoothing ";
  const slider = document.createElement("input");
  Object.assign(slider, { type: "range", min: 0, max: 0.99, step: 0.01 });
  slider.setAttribute("aria-label", "smoothing");
  smoothing.appendChild(slider);
  head.appendChild(smoothing);
  const toggle = button(head, "log scale", "", false);
  const stats = div("stats", el);
  const cells = {};
  for (const [key, name] of STATS) {
    const cell = div("stat", stats);
    div("label", cell, name);
    cells[key] = div("value", cell);
    cells[key].dataset.stat = key;
  }
  const legend = div("legend", el);
  const host = div("chart-host", el);
  slider.addEventListener("change", () => { model.set("smoothing", Number(slider.value)); model.save_changes(); });
  toggle.addEventListener("click", () => {
    const s = model.get("status");
    model.set("log", !(s && s.chart && s.chart.log));
    model.save_changes();
  });

  function draw() {
    const s = model.get("status");
    if (!s || !s.chart) return;
    title.textContent = s.title;
    pill.textContent = STATE_LABEL[s.state] + (s.cause ? ` (${s.cause})` : "");
    pill.dataset.state = s.state;
    el.dataset.state = s.state;
    el.dataset.steps = s.steps;
    cells.steps.textContent = s.steps.toLocaleString("en-US") + (s.total ? ` of ${s.total.toLocaleString("en-US")}` : "");
    cells.rate.textContent = label(s.steps_per_s);
    cells.last.textContent = s.last_text;
    cells.last.classList.toggle("bad", s.not_finite_at !== null && s.not_finite_at !== undefined);
    cells.best.textContent = label(s.best);
    cells.elapsed.textContent = seconds(s.elapsed_s);
    cells.eta.textContent = seconds(s.eta_s);
    cells.eta.parentNode.hidden = s.eta_s === null || s.eta_s === undefined;
    const isLog = s.chart.log;
    toggle.textContent = isLog ? "✓ log scale" : "log scale";
    toggle.setAttribute("aria-pressed", String(isLog));
    toggle.title = isLog ? "the y axis is in log scale: click for linear" : "click for a log scale on the y axis";
    slider.value = model.get("smoothing");
    drawLegend(legend, s.chart.series);
    drawChart(host, s.chart);
  }

  function seconds(s) {
    if (s === null || s === undefined) return "—";
    if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
    if (s >= 60) return `${Math.floor(s / 60)}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
    return `${s.toFixed(1)} s`;
  }

  model.on("change:status", draw);
  const resize = onResize(el, draw);
  draw();
  return () => {
    model.off("change:status", draw);
    resize.disconnect();
  };
}

export default { render };
