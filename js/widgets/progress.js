// The progress panel: a named fact over steps, one line per run. Python
// sends the chart already decided (somatize/_pictures/_chart.py: scale,
// ranges, ticks, the smoothed and thinned lines); this module draws it with
// drawChart (chart.js, joined in front of this file) and sends the reader's
// choices back through synced traits: log, smoothing, outliers, window
// (the zoomed range of steps; empty for all of them).

function render({ model, el }) {
  el.classList.add("somatize-panel", "somatize-progress");
  const head = div("head", el);
  const title = div("title", head);
  const bar = div("controls", el);
  const log = button(bar, "log scale", "log scale on the y axis", false);
  const outliers = button(bar, "ignore outliers", "leave the values past the 1st and 99th percentile out of the y range", false);
  const reset = button(bar, "reset zoom", "show every step again");
  const smoothing = document.createElement("label");
  smoothing.className = "smoothing";
  smoothing.textContent = "smoothing ";
  const slider = document.createElement("input");
  Object.assign(slider, { type: "range", min: 0, max: 0.99, step: 0.01 });
  const readout = document.createElement("span");
  smoothing.append(slider, readout);
  bar.appendChild(smoothing);
  div("hint", bar, "drag to zoom · wheel to zoom · double-click for all · hover for values");
  const legend = div("legend", el);
  const host = div("chart-host", el);

  const send = (name, value) => { model.set(name, value); model.save_changes(); };
  log.addEventListener("click", () => send("log", !model.get("chart").log));
  outliers.addEventListener("click", () => send("outliers", !model.get("outliers")));
  reset.addEventListener("click", () => send("window", []));
  slider.addEventListener("change", () => send("smoothing", Number(slider.value)));
  slider.addEventListener("input", () => { readout.textContent = Number(slider.value).toFixed(2); });

  function draw() {
    const data = model.get("chart");
    if (!data) return;
    title.textContent = model.get("title");
    for (const [b, on, yes] of [[log, data.log, "✓ log scale"], [outliers, model.get("outliers"), "✓ ignore outliers"]]) {
      b.setAttribute("aria-pressed", String(on));
      b.textContent = on ? yes : yes.slice(2);
    }
    reset.disabled = !model.get("window").length;
    slider.value = model.get("smoothing");
    readout.textContent = Number(model.get("smoothing")).toFixed(2);
    drawLegend(legend, data.series);
    drawChart(host, data, { height: 300, onWindow: (range) => send("window", range || []) });
  }
  for (const name of ["chart", "outliers", "window", "smoothing", "title"]) model.on(`change:${name}`, draw);
  const resize = onResize(el, draw);
  draw();
  return () => {
    for (const name of ["chart", "outliers", "window", "smoothing", "title"]) model.off(`change:${name}`, draw);
    resize.disconnect();
  };
}

export default { render };
