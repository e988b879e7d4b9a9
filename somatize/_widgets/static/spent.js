// The spent panel: where a run's time went. Python draws it as SVG (bars
// longest first, the slowest node in orange, the engine's and the Trainer's
// own time in grey, a timeline of one forward, and the graph when one was
// given) — the very picture the static fallback shows; hovering a bar, a span
// or a node shows its numbers (SVG titles). This module only puts it in place.

function render({ model, el }) {
  el.classList.add("somatize-panel", "somatize-spent");
  const head = document.createElement("div");
  head.className = "head";
  const title = document.createElement("div");
  title.className = "title";
  head.appendChild(title);
  const body = document.createElement("div");
  el.append(head, body);

  function draw() {
    const d = model.get("spent");
    if (!d || d.html === undefined) return;
    title.textContent = d.title;
    body.innerHTML = d.html;  // Python's own SVG, every name in it escaped
    el.dataset.slowest = d.slowest || "";
  }
  model.on("change:spent", draw);
  draw();
  return () => model.off("change:spent", draw);
}

export default { render };
