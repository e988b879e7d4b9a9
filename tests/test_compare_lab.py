"""The explorer in a real JupyterLab, in Debian's Chromium: a brush dragged
on an axis with the mouse is read back from the kernel (explorer.selected,
explorer.where) and compared with runs(store, where=...); a where set from
Python moves the brush on the page; the explorer at 1400 and 800 px, light
and dark, is saved under test-artifacts/. The same of 600 runs, whose lines
the kernel bins (``DENSE_ABOVE``); and at each width and theme, what is
drawn read off the page: each brush on its axis, no two tick labels over
one another."""

import json
from pathlib import Path

import nbformat
import pytest
from labtools import ARTIFACTS, CHROMIUM, FLAGS, TOKEN, accept_kernel_dialog, for_readme, running_lab, theme

from somatize._pictures._parallel import span
from somatize._widgets._compare import MISSING

MAKE = '''import json, math, random
from somatize import Recorder, Store
from somatize.record import compare, runs

store = Store("sweep")
rng = random.Random(0)
for k in range(60):
    config = {"lr": 10 ** rng.uniform(-4, -1), "width": rng.choice([16, 32, 64]), "opt": rng.choice(["adam", "sgd"])}
    with Recorder(store, run=f"r{k:02d}", config=config) as r:
        for i in range(10):
            r.forward_began()
            r({"fact": "loss", "value": 0.1 + (math.log10(config["lr"]) + 4) / 3 + 0.5 ** i})
explorer = compare(store)
explorer'''
ASK = '''print("ANSWER" + json.dumps({"where": explorer.where, "selected": sorted(explorer.selected["run"]),
                             "asked": sorted(runs(store, where=explorer.where)["run"]),
                             "brushes": explorer.brushes}))'''
SET = 'explorer.where = "config.lr >= 0.001 and config.lr <= 0.01"'
# 600 runs made without training, as notebook 04 makes its 300: more than
# DENSE_ABOVE, so the kernel sends binned lines; five keys, one of them a set
# of strings, some long
MAKE_BINNED = '''import json, math, random
from somatize import Recorder, Store
from somatize.record import compare, runs

wide = Store("wide")
rng = random.Random(1)
for k in range(600):
    config = {"lr": 10 ** rng.uniform(-4, -1), "width": rng.choice([16, 32, 64, 128, 256]),
              "optimizer": rng.choice(["adam", "sgd", "rmsprop", "adamw-with-warmup"]),
              "dropout": rng.choice([0.0, 0.1, 0.3, 0.5]), "seed": rng.randrange(10)}
    final = 0.05 + 0.4 * abs(math.log10(config["lr"]) + 2.5) + 4 / config["width"] + 0.05 * rng.random()
    with Recorder(wide, run=f"w{k:03d}", config=config) as recorder:
        for step in range(8):
            recorder.forward_began()
            recorder({"fact": "loss", "value": final + 2.0 * 0.7 ** step})
binned = compare(wide)
binned'''
ASK_BINNED = '''print("ANSWER" + json.dumps({"where": binned.where, "selected": sorted(binned.selected["run"]),
                             "asked": sorted(runs(wide, where=binned.where)["run"]),
                             "brushes": binned.brushes, "axes": binned.axes,
                             "lines": [len(foot) for foot, _, _, _ in binned.lines()]}))'''


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("lab")
    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (MAKE, ASK, SET, ASK, MAKE_BINNED, ASK_BINNED)]
    nbformat.write(nb, root / "explore.ipynb")
    with running_lab(root, tmp_path) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def open_notebook(page, lab):
    """explore.ipynb open, its kernel trusted and idle."""
    page.goto(f"{lab}/lab/tree/explore.ipynb?token={TOKEN}&reset")
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    page.add_style_tag(content=".Toastify { display: none !important; }")
    accept_kernel_dialog(page)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)


def run_cell(page, index):
    """Run cell ``index`` (from 0) as a person does, and return what it printed after ANSWER, read as JSON."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    before = cell.locator(".jp-InputPrompt").text_content()
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function("([c, b]) => { const p = c.querySelector('.jp-InputPrompt').textContent;"
                           "return p !== b && !p.includes('*'); }", arg=[cell.element_handle(), before],
                           timeout=60_000)
    text = cell.locator(".jp-OutputArea").text_content()
    return json.loads(text.split("ANSWER", 1)[1]) if "ANSWER" in text else None


def test_a_brush_dragged_on_an_axis_is_the_selection_in_the_kernel(lab, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    try:
        open_notebook(page, lab)
        run_cell(page, 0)
        explorer = page.locator(".somatize-explorer").first
        columns = explorer.locator(".somatize-explorer-axis")
        columns.nth(1).locator(".brushintsel").wait_for(timeout=60_000)
        titles = [" ".join(t.split()) for t in explorer.locator(".somatize-explorer-label").all_inner_texts()]
        assert titles[0] == "loss.best metric" and titles[1] == "lr |ρ| 1.00", titles
        assert explorer.locator(".somatize-explorer-curves").text_content().startswith("loss of the")

        area = columns.nth(1).locator(".brushintsel .overlay").bounding_box()
        x = area["x"] + area["width"] / 2
        page.mouse.move(x, area["y"] + area["height"] * 0.25)
        page.mouse.down()
        page.mouse.move(x, area["y"] + area["height"] * 0.45, steps=8)
        page.mouse.move(x, area["y"] + area["height"] * 0.6, steps=8)
        page.mouse.up()
        answer = run_cell(page, 1)
        assert answer["where"].startswith("config.lr >= ") and answer["selected"], answer
        assert answer["selected"] == answer["asked"]
        assert 0 < len(answer["selected"]) < 60
        foot, top = answer["brushes"][1]
        assert top - foot == pytest.approx(0.35, abs=0.05)  # what was dragged, in places of the axis

        run_cell(page, 2)  # the where set from Python: the brush moves on the page
        answer = run_cell(page, 3)
        assert answer["where"] == "config.lr >= 0.001 and config.lr <= 0.01"
        assert answer["selected"] == answer["asked"]
        foot, top = answer["brushes"][1]
        selection = columns.nth(1).locator(".brushintsel .selection")
        height = area["height"]
        lo, hi = span(False, MISSING)  # the axis's scale: the figure's plot area covers the places [lo, hi]
        want = (top - foot) / (hi - lo) * height
        page.wait_for_function("([s, want]) => Math.abs(s.getBoundingClientRect().height - want) < 2",
                               arg=[selection.element_handle(), want], timeout=30_000)
        box, area = selection.bounding_box(), columns.nth(1).locator(".brushintsel .overlay").bounding_box()
        assert box["y"] - area["y"] == pytest.approx((hi - top) / (hi - lo) * height, abs=2)

        for dark in (False, True):
            if dark:
                theme(page, "JupyterLab Dark", light=False)
            for width in (1400, 800):
                page.set_viewport_size({"width": width, "height": 1100})
                page.wait_for_timeout(400)  # a frame for bqplot's relayout; the picture is for a person
                explorer.evaluate("e => e.scrollIntoView({block: 'start'})")
                explorer.screenshot(path=ARTIFACTS / f"explorer-{width}-{'dark' if dark else 'light'}.png")
                assert drawn_right(explorer, f"60 runs, {width} px, {'dark' if dark else 'light'}") == 1
    finally:
        page.screenshot(path=ARTIFACTS / "explorer-page.png")
        page.close()



# Where what the explorer draws lies, read off the page: per column, its axis
# line's x (the right end of the axis's domain path: its outer ticks point
# left), its column's box, the brush's box when one is drawn (d3's .selection,
# hidden when empty), and the boxes of its tick labels; and the curves' tick
# labels. bqplot lays out a figure again only once it is in view, so each
# column is scrolled into view (the row of columns scrolls when the page is
# narrow) and measured where it lies in that row.
GEOMETRY = r"""async (root) => {
  const columns = [];
  for (const column of root.querySelectorAll('.somatize-explorer-axis')) {
    const row = column.closest('.somatize-explorer-row');
    const cell = column.parentElement;  // the lines' figure and the tick labels' one over it
    column.scrollIntoView({block: 'nearest', inline: 'nearest'});
    await new Promise(r => setTimeout(r, 400));
    const o = row.getBoundingClientRect();
    const box = (e) => { const b = e.getBoundingClientRect();
      return [b.left - o.left + row.scrollLeft, b.top - o.top, b.right - o.left + row.scrollLeft, b.bottom - o.top]; };
    const selection = column.querySelector('.brushintsel .selection');
    const shown = selection && getComputedStyle(selection).display !== 'none';
    columns.push({axis: box(column.querySelector('.axis path.domain'))[2], column: box(column),
                  brush: shown ? box(selection) : null,
                  ticks: [...cell.querySelectorAll('text.label.element')].filter(t => t.textContent.trim())
                           .map(t => [t.textContent, ...box(t)]),
                  marks: [...column.querySelectorAll('.tick line')].map(t => { const b = box(t);
                    return (b[1] + b[3]) / 2; }),
                  // each gap's lines as drawn here: [[x1, y1, x2, y2]] a line, in the figure's own px
                  gaps: [...new Set([...column.querySelectorAll('path.line')].map(p => p.parentElement.parentElement))]
                          .map(m => [...m.querySelectorAll('path.line')].map(p =>
                            ((p.getAttribute('d') || '').match(/-?[\d.]+(e-?\d+)?/g) || []).map(Number))),
                  width: column.querySelector('svg.svg-figure').getBoundingClientRect().width,
                  // whether every line is painted before (under) every label, and how a label is painted
                  lines: column.querySelectorAll('path.line').length,
                  under: [...column.querySelectorAll('path.line')].every(l => [...cell.querySelectorAll(
                    'text.label.element')].every(t => l.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING)),
                  paint: (() => { const t = cell.querySelector('text.label.element'); if (!t) return null;
                    const s = getComputedStyle(t); return {order: s.paintOrder, stroke: s.stroke, fill: s.fill,
                      weight: s.fontWeight}; })()});
  }
  const probe = document.createElement('span');  // the theme's colours, as computed
  probe.style.color = 'var(--jp-ui-font-color1)';
  probe.style.backgroundColor = 'var(--jp-layout-color0)';
  root.appendChild(probe);
  const theme = {ink: getComputedStyle(probe).color, page: getComputedStyle(probe).backgroundColor};
  probe.remove();
  const curves = root.querySelector('.somatize-explorer .bqplot:not(.somatize-explorer-axis)');
  const ticks = curves ? [...curves.querySelectorAll('.tick text')].filter(t => t.textContent.trim())
    .map(t => { const b = t.getBoundingClientRect(); return [t.textContent, b.left, b.top, b.right, b.bottom]; }) : [];
  return {columns, curves: ticks, theme};
}"""


def overlapping(boxes):
    """The pairs of labels whose boxes ``[text, left, top, right, bottom]`` overlap (by more than half a pixel)."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if min(a[3], b[3]) - max(a[1], b[1]) > 0.5 and min(a[4], b[4]) - max(a[2], b[2]) > 0.5:
                out.append((a, b))
    return out


def drawn_right(explorer, where):
    """What the explorer draws, read off the page: each brush on its axis
    (its box spans the axis line's x, centred on it, inside its column), the
    tick labels drawn over the lines in the theme's ink with a halo of the
    page's colour, and no two tick labels over one another, in the columns
    or the curves."""
    g = explorer.evaluate(GEOMETRY)
    brushed = 0
    for k, c in enumerate(g["columns"]):
        left, right = c["column"][0], c["column"][2]
        assert left - 0.5 <= c["axis"] <= right + 0.5, (where, k, c)
        assert c["under"], (where, k, "a line is drawn over the axis's tick labels")
        assert c["paint"]["order"].startswith("stroke") and c["paint"]["stroke"] == g["theme"]["page"], (where, k, c)
        assert c["paint"]["fill"] == g["theme"]["ink"], (where, k, c)  # the theme's ink, its halo the page's colour
        assert c["paint"]["weight"] == "400", (where, k, c)  # as the curves' tick labels, not bold
        if c["brush"] is None:
            continue
        brushed += 1
        b_left, _, b_right, _ = c["brush"]
        assert b_left < c["axis"] < b_right, (where, k, "the brush is not on its axis", c)
        assert abs((b_left + b_right) / 2 - c["axis"]) <= 2, (where, k, "the brush is not centred on its axis", c)
        assert left - 0.5 <= b_left and b_right <= right + 0.5, (where, k, "the brush leaves its column", c)
    assert sum(c["lines"] for c in g["columns"]) > 0, where  # the lines were there to be under
    for k, c in enumerate(g["columns"]):  # each label beside its tick (the labels are another figure's)
        for text, _, top, _, bottom in c["ticks"]:
            assert min(abs((top + bottom) / 2 - y) for y in c["marks"]) <= 1.5, (where, k, text, c["marks"])
    for k, (a, b) in enumerate(zip(g["columns"], g["columns"][1:])):  # a line's halves meet where columns do
        left, right = a["gaps"][-1], b["gaps"][0]
        assert len(left) == len(right), (where, k)
        for (x1, y1, x2, y2), (u1, v1, u2, v2) in zip(left, right):
            at_edge = y1 + (y2 - y1) * (a["width"] - x1) / (x2 - x1)  # its y at the left column's right edge
            from_edge = v1 + (v2 - v1) * (0 - u1) / (u2 - u1)  # and at the right column's left edge
            assert abs(at_edge - from_edge) <= 0.5, (where, k, "a line breaks where two columns meet",
                                                     at_edge, from_edge)
    ticks = [t for c in g["columns"] for t in c["ticks"]]
    assert ticks and overlapping(ticks) == [], (where, overlapping(ticks))
    assert overlapping(g["curves"]) == [], (where, overlapping(g["curves"]))
    return brushed


def drag(page, column, start, stop):
    """A brush dragged with the mouse down ``column`` from ``start`` to ``stop`` (fractions of its height)."""
    column.evaluate("e => e.scrollIntoView({block: 'center'})")
    area = column.locator(".brushintsel .overlay").bounding_box()
    x = area["x"] + area["width"] / 2
    page.mouse.move(x, area["y"] + area["height"] * start)
    page.mouse.down()
    page.mouse.move(x, area["y"] + area["height"] * (start + stop) / 2, steps=8)
    page.mouse.move(x, area["y"] + area["height"] * stop, steps=8)
    page.mouse.up()


def test_600_runs_binned_in_the_kernel_brush_to_the_query_s_answer_and_draw_right(lab, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    try:
        open_notebook(page, lab)
        run_cell(page, 4)
        explorer = page.locator(".jp-Notebook .jp-Cell").nth(4).locator(".somatize-explorer").first
        columns = explorer.locator(".somatize-explorer-axis")
        columns.nth(1).locator(".brushintsel").wait_for(timeout=120_000)
        answer = run_cell(page, 5)
        assert len(answer["axes"]) == 6 and answer["where"] is None and len(answer["selected"]) == 600
        assert all(0 < n < 600 for n in answer["lines"]), answer["lines"]  # bins, not one line a run
        drawn = columns.first.locator("path.line").count()
        assert 0 < drawn < 600, drawn  # the page draws what the kernel binned

        drag(page, columns.nth(1), 0.2, 0.55)
        drag(page, columns.nth(3), 0.1, 0.7)
        answer = run_cell(page, 5)
        assert answer["brushes"][1] is not None and answer["brushes"][3] is not None, answer["brushes"]
        assert answer["where"].count(" and ") >= 1 and 0 < len(answer["selected"]) < 600, answer["where"]
        assert answer["selected"] == answer["asked"]  # the brushes' selection is the query's answer

        for dark in (False, True):
            theme(page, "JupyterLab Dark" if dark else "JupyterLab Light", light=not dark)
            for width in (1400, 800):
                page.set_viewport_size({"width": width, "height": 1100})
                page.wait_for_timeout(600)  # a frame for bqplot's relayout
                explorer.evaluate("e => e.scrollIntoView({block: 'start'})")
                name = f"explorer-binned-{width}-{'dark' if dark else 'light'}"
                assert drawn_right(explorer, name) == 2
                explorer.evaluate("e => e.scrollIntoView({block: 'start'})")
                page.wait_for_timeout(400)  # the columns scrolled back, laid out again
                explorer.screenshot(path=ARTIFACTS / f"{name}.png")
                if width == 1400 and not dark:
                    for_readme(ARTIFACTS / f"{name}.png", "explorer.png")
    finally:
        page.screenshot(path=ARTIFACTS / "explorer-binned-page.png")
        page.close()
