// The spent panel: where a run's time went. Python draws it as SVG (bars
// longest first, the slowest node in orange, the engine's and the Trainer's
// own time in grey, a timeline of one forward, and the graph when one was
// given) — the very picture the static fallback shows; hovering a bar, a span
// or a node shows its numbers (SVG titles), clicking one writes them below.

function render({ model, el }) {
  el.classList.add("somatize-panel", "somatize-spent");
  const head = document.createElement("div");
  head.className = "head";
  const title = document.createElement("div");
  title.className = "title";
  head.appendChild(title);
  const body = document.createElement("div");
  const said = document.createElement("div");
  said.className = "details empty";
  said.textContent = "Click a node or a bar for its numbers.";
  el.append(head, body, said);
  body.addEventListener("click", (ev) => {
    const hit = ev.target.closest("g.node:not(.io), rect.bar, rect.part, rect.span");
    const tip = hit && hit.querySelector("title");
    if (!tip) return;
    for (const n of body.querySelectorAll(".selected")) n.classList.remove("selected");
    hit.classList.add("selected");
    said.classList.remove("empty");
    said.textContent = tip.textContent;
  });

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
