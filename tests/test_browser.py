"""The panels in a real browser: Debian's Chromium, driven by Python
playwright, against one real `jupyter lab` server for the whole module.

Notebook 03 is opened and run through the UI (Run > Run All Cells), with a
few cells of ours at its end: `spent(..., graph=g)`, a second run overlaid
on `progress`, and a `Live` watching a run that diverges. Then, at 1400 and
800 px wide, in the light and the dark theme, every panel is read as a
person reads it: its tick labels against the data's range and scale, no two
texts on top of each other and none outside its panel, the value under the
cursor on hover. The committed notebooks are opened untrusted (unrun) and
rendered by nbconvert with no network: each panel shows its picture. Every
view is saved as a screenshot under test-artifacts/ (gitignored).
"""

import math
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from labtools import ARTIFACTS, CHROMIUM, FLAGS, ROOT, TOKEN, accept_kernel_dialog, for_readme, running_lab

from somatize import Graph, Node

COMMITTED = ["01-graphs.ipynb", "02-store-and-record.ipynb", "03-training.ipynb"]

OURS = [
    'spent(store, run="a-run", graph=g)',
    # a second run, to overlay on the first
    'with Recorder(store, run="b-run") as rec:\n'
    '    for i in range(300):\n'
    '        rec.forward_began()\n'
    '        rec({"fact": "loss", "value": 2.0 / (i + 1)})\n'
    'progress(store, run=["a-run", "b-run"])',
    # a run that diverges: 21 decades, then NaN
    'diverging = Live(title="diverging")\n'
    'display(diverging)\n'
    'for i in range(26):\n'
    '    diverging.forward_began()\n'
    '    diverging({"fact": "loss", "value": 10.0 ** (i - 3) if i < 24 else float("nan")})',
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("lab")
    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    nb = nbformat.read(ROOT / "notebooks" / "03-training.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.cells += [nbformat.v4.new_code_cell(source) for source in OURS]
    root = tmp_path / "root"
    (root / "committed").mkdir(parents=True)
    nbformat.write(nb, root / "03-training.ipynb")
    for name in COMMITTED:  # as a reader gets them: unrun here, so untrusted
        shutil.copy(ROOT / "notebooks" / name, root / "committed" / name)
    with running_lab(root, tmp_path) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir()
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def open_notebook(browser, lab, path, width=1400):

    # Tall enough that each panel fits whole in the window for its screenshot.
    page = browser.new_page(viewport={"width": width, "height": 1800})
    page.goto(f"{lab}/lab/tree/{path}?token={TOKEN}&reset")  # reset: only this notebook, not the last page's
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    # JupyterLab's toasts (the news question) would sit on top of the screenshots.
    page.add_style_tag(content=".Toastify { display: none !important; }")
    accept_kernel_dialog(page)
    return page


def menu(page, *path):
    page.locator(".lm-MenuBar-itemLabel", has_text=path[0]).first.click()
    for label in path[1:-1]:
        page.locator(".lm-Menu-itemLabel", has_text=label).first.hover()
    page.locator(".lm-Menu-itemLabel", has_text=path[-1]).first.click()


# What a person reads off a chart, in the page: its ticks (value, label, place), its axis titles, its lines.
READ_CHART = """svg => ({
  ticks: [...svg.querySelectorAll('text.tick')].map(t => ({value: +t.dataset.value, label: t.textContent,
           anchor: t.getAttribute('text-anchor'), x: +t.getAttribute('x'), y: +t.getAttribute('y')})),
  axes: [...svg.querySelectorAll('text.axis')].map(t => t.textContent),
  lines: [...svg.querySelectorAll('polyline.curve')].map(p => ({name: p.dataset.name,
           points: p.getAttribute('points').trim().split(' ').map(q => q.split(',').map(Number))})),
})"""

# Every visible text of a panel: [text, left, top, right, bottom], and the panel's own box.
TEXT_BOXES = """el => {
  const boxes = [];
  const texts = 'text, .stat .label, .stat .value, .title, .pill, button, .legend .item, .hint, .smoothing, .details';
  for (const n of el.querySelectorAll(texts)) {
    if (n.closest('[visibility=hidden], [hidden]') || getComputedStyle(n).visibility === 'hidden') continue;
    if (n.tagName === 'text' && n.closest('g.hover')) continue;
    const r = n.getBoundingClientRect();
    const text = (n.textContent || '').trim();
    if (r.width > 0 && r.height > 0 && text) boxes.push([text, r.left, r.top, r.right, r.bottom]);
  }
  const p = el.getBoundingClientRect();
  return {boxes, panel: [p.left, p.top, p.right, p.bottom]};
}"""


def axis(ticks, anchor, log):
    """The axis's rule, value -> pixel, fitted to its labels; every label must sit on it (to half a pixel)."""
    at = [(t["value"], t["x"] if anchor == "middle" else t["y"] - 4) for t in ticks if t["anchor"] == anchor]
    assert len(at) >= 2, f"fewer than two labelled ticks on the {'x' if anchor == 'middle' else 'y'} axis"
    for t in ticks:  # each label says its value
        assert float(t["label"].replace(",", "")) == pytest.approx(t["value"], rel=1e-3, abs=1e-12), t
    f = math.log10 if log else float
    (v0, p0), (v1, p1) = at[0], at[-1]
    per = (p1 - p0) / (f(v1) - f(v0))
    for v, p in at:
        assert abs(p0 + (f(v) - f(v0)) * per - p) <= 0.5, f"tick {v} is not where its label says (log: {log})"
    if not log and len(at) > 2:  # a linear axis: evenly spaced values
        gaps = [b[0] - a[0] for a, b in zip(at, at[1:])]
        assert max(gaps) - min(gaps) <= 1e-9 * max(abs(g) for g in gaps)
    return lambda px: (px - p0) / per + f(v0), abs(per)


def read_chart(svg_locator):
    """The chart's lines read back through its own axes: {name: [(x, y)]}, and what half a pixel is worth."""
    chart = svg_locator.evaluate(READ_CHART)
    log = chart["axes"][-1].endswith("(log scale)")
    x_of, x_per = axis(chart["ticks"], "middle", False)
    y_of, y_per = axis(chart["ticks"], "end", log)
    assert all(float(t["value"]).is_integer() for t in chart["ticks"] if t["anchor"] == "middle")  # whole steps
    lines = {line["name"]: [(x_of(px), 10 ** y_of(py) if log else y_of(py)) for px, py in line["points"]]
             for line in chart["lines"]}
    return lines, log, (0.5 / x_per, 0.5 / y_per)


PRESSED = "([el, was]) => el.querySelector('button.toggle').getAttribute('aria-pressed')"


def near(y, want, dy, log):
    if log:
        return abs(math.log10(y) - math.log10(want)) <= dy * 1.01 + 1e-4
    return abs(y - want) <= dy * 1.01 + 1e-4 * abs(want)


def check_texts(panel, where):
    got = panel.evaluate(TEXT_BOXES)
    left, top, right, bottom = got["panel"]
    boxes = got["boxes"]
    for text, x0, y0, x1, y1 in boxes:
        assert x0 >= left - 0.5 and x1 <= right + 0.5 and y0 >= top - 0.5 and y1 <= bottom + 0.5, \
            f"{where}: {text!r} leaves its panel"
        # legible: a picture shrunk to fit a narrow cell must not take its text below ~8 px type
        assert y1 - y0 >= 9, f"{where}: {text!r} is drawn {y1 - y0:.1f} px tall, too small to read"
    for i, (a, *ra) in enumerate(boxes):
        for c, *rc in boxes[i + 1:]:
            w = min(ra[2], rc[2]) - max(ra[0], rc[0])
            h = min(ra[3], rc[3]) - max(ra[1], rc[1])
            assert w <= 1 or h <= 1, f"{where}: {a!r} and {c!r} overlap"


# spent's table of a forward and a call: the number cells that wrap (more than one line box), and
# where the box it scrolls in lies beside its panel
SPREAD = """el => {
  const table = el.querySelector('table.spread');
  if (!table) return null;
  const broken = [...table.querySelectorAll('tr')].flatMap(tr => [...tr.querySelectorAll('td')].slice(1))
    .filter(td => { const r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length > 1; })
    .map(td => td.textContent);
  const box = table.parentElement.getBoundingClientRect(), p = el.getBoundingClientRect();
  return {cells: table.querySelectorAll('td').length, broken, box: [box.left, box.right], panel: [p.left, p.right],
          fits: table.scrollWidth <= table.parentElement.clientWidth + 1,
          widths: [table.scrollWidth, table.parentElement.clientWidth,
                   [...table.querySelector('tr').children].map(c => c.getBoundingClientRect().width)]};
}"""


def check_spread(panel, where):
    got = panel.evaluate(SPREAD)
    assert got is not None and got["cells"] >= 12, where  # three rows: a whole forward, body, head
    assert got["broken"] == [], f"{where}: a number parted from its unit: {got['broken']}"
    assert got["box"][0] >= got["panel"][0] - 0.5 and got["box"][1] <= got["panel"][1] + 0.5, \
        f"{where}: the table leaves its panel"
    # the names here fit an 800 px page: the table, its cell's width and its columns' if not
    assert got["fits"], f"{where}: the table is cut (it scrolls across) {got['widths']}"


def in_view(page, panel):
    """Scroll `panel` into view and wait until its chart is drawn at its width (JupyterLab renders
    cells out of view lazily; the chart redraws when its cell gets its width back)."""
    panel.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_function("el => { const svg = el.querySelector('svg.somatize-chart');"
                           "const host = el.querySelector('.chart-host');"
                           "return svg && Math.abs(svg.getAttribute('width') - Math.max(280, host.clientWidth)) < 1; }",
                           arg=panel.element_handle())


def hover(page, svg_locator, name, index):
    """Put the cursor on point `index` of the line `name`; return the tooltip's lines."""
    x, y = svg_locator.evaluate("""(svg, [name, i]) => {
      const line = [...svg.querySelectorAll('polyline.curve')].find(p => p.dataset.name === name);
      const [px, py] = line.getAttribute('points').trim().split(' ')[i].split(',').map(Number);
      const pt = svg.createSVGPoint(); pt.x = px; pt.y = py;
      const s = pt.matrixTransform(line.getScreenCTM());
      return [s.x, s.y];
    }""", [name, index])
    page.mouse.move(x, y)
    return svg_locator.locator("text.hover").evaluate("t => [...t.querySelectorAll('tspan')].map(s => s.textContent)")


def test_panels_in_jupyterlab_at_two_widths_in_both_themes(lab, browser):
    page = open_notebook(browser, lab, "03-training.ipynb")
    try:
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
        menu(page, "Run", "Run All Cells")
        live = page.locator(".somatize-live").first
        live.wait_for(timeout=300_000)
        page.wait_for_function("() => { const lives = [...document.querySelectorAll('.somatize-live')];"
                               "return lives.length === 2 && lives.every(e => e.dataset.state === 'finished'); }",
                               timeout=300_000)
        assert live.locator("[data-stat=steps]").text_content() == "300 of 300"
        assert int(live.locator("polyline.curve").get_attribute("data-points")) >= 250

        spent = page.locator(".somatize-spent").first
        assert sorted(spent.locator("rect.bar[data-kind=node]:visible").evaluate_all(
            "bars => bars.map(b => b.dataset.node)")) == ["body", "head"]
        assert spent.locator("rect.bar[data-kind=trainer]:visible").count() == 1
        assert spent.locator("rect.span:visible").count() == 2  # the timeline of one forward
        graph = page.locator(".somatize-graph").first
        assert graph.locator("path.edge[data-from=body][data-to=head]").count() == 1
        graph.locator("g.node[data-node=body]").click()
        assert "Features" in graph.locator(".details").text_content()
        on_graph = page.locator(".somatize-spent").nth(1)
        on_graph.locator("g.node[data-node=head]").click()  # a node in spent says its numbers when clicked
        assert "a forward" in on_graph.locator(".details").text_content()

        progress, overlay = page.locator(".somatize-progress").first, page.locator(".somatize-progress").nth(1)
        diverging = page.locator(".somatize-live").nth(1)
        best = float(live.locator("[data-stat=best]").text_content())
        for width, theme in [(1400, "light"), (800, "light"), (800, "dark"), (1400, "dark")]:
            if theme == "dark" and page.evaluate("document.body.dataset.jpThemeLight") != "false":
                menu(page, "Settings", "Theme", "JupyterLab Dark")
                page.wait_for_function("document.body.dataset.jpThemeLight === 'false'")
            page.set_viewport_size({"width": width, "height": 1800})
            page.wait_for_timeout(300)  # a guard for the resize observers' redraw, not a measurement
            where = f"{width}px {theme}"

            # Live and progress draw the same run: both axes must describe it, whatever the scale.
            for panel in (live, progress):
                in_view(page, panel)
                lines, log, (dx, dy) = read_chart(panel.locator("svg.somatize-chart"))
                (line,) = lines.values()
                assert [round(x) for x, _ in line][:3] == [0, 1, 2] and round(line[-1][0]) == 299, where
                assert near(min(y for _, y in line), best, dy, log), where  # the lowest point is the best loss
            toggle = progress.locator("button.toggle").first
            was = toggle.get_attribute("aria-pressed")
            toggle.click()  # the other scale: the axis follows the line
            page.wait_for_function(PRESSED + " !== was", arg=[progress.element_handle(), was])
            lines, log, (dx, dy) = read_chart(progress.locator("svg.somatize-chart"))
            assert log == (was == "false") and near(min(y for _, y in lines["a-run"]), best, dy, log), where
            toggle.click()
            page.wait_for_function(PRESSED + " === was", arg=[progress.element_handle(), was])

            # Hover: the value under the cursor, for every overlaid run at that step.
            in_view(page, overlay)
            svg = overlay.locator("svg.somatize-chart")
            said = hover(page, svg, "b-run", 150)
            step = int(said[0].split()[-1].replace(",", ""))
            assert abs(step - 150) <= 1, (where, said)
            values = dict(line.split(": ") for line in said[1:])
            assert set(values) == {"a-run", "b-run"}
            assert float(values["b-run"]) == pytest.approx(2.0 / (step + 1), rel=1e-3), (where, said)
            page.mouse.move(0, 0)

            # A diverging run: few decade labels, the non-finite step marked.
            in_view(page, diverging)
            dsvg = diverging.locator("svg.somatize-chart")
            assert dsvg.locator("text.mark").text_content() == "not finite from step 24"
            assert diverging.locator("[data-stat=last]").text_content() == "nan"
            read_chart(dsvg)

            for name, panel in [("live", live), ("progress", progress), ("overlay", overlay),
                                ("diverging", diverging), ("spent", spent), ("graph", graph),
                                ("spent-on-graph", on_graph)]:
                panel.evaluate("e => e.scrollIntoView({block: 'start'})")
                check_texts(panel, f"{name} at {where}")
                if name.startswith("spent"):
                    check_spread(panel, f"{name} at {where}")
                panel.screenshot(path=ARTIFACTS / f"{name}-{width}-{theme}.png")
                if name in ("live", "spent-on-graph") and (width, theme) == (1400, "light"):
                    for_readme(ARTIFACTS / f"{name}-{width}-{theme}.png", f"{name}.png")
            if theme == "dark":  # every colour from the theme: ticks are the theme's text colour, not orange
                tick = progress.locator("text.tick").first.evaluate("t => getComputedStyle(t).fill")
                probe = page.evaluate("(() => { const d = document.createElement('div');"
                                      "d.style.color = 'var(--jp-ui-font-color2)'; document.body.append(d);"
                                      "const c = getComputedStyle(d).color; d.remove(); return c; })()")
                assert tick == probe, (tick, probe)
    finally:
        page.screenshot(path=ARTIFACTS / "page.png")
        page.close()


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_notebook_opened_untrusted_shows_every_panel(lab, browser, name):
    """Opened before running (untrusted), each panel's picture is shown: the sanitiser keeps the images."""
    page = open_notebook(browser, lab, f"committed/{name}", width=800)
    try:
        statics = page.locator(".jp-OutputArea-output .somatize-static")
        statics.first.wait_for(timeout=60_000)
        want = len([o for c in nbformat.read(ROOT / "notebooks" / name, as_version=4).cells if c.cell_type == "code"
                    for o in c.outputs if "somatize-static" in o.get("data", {}).get("text/html", "")])
        assert statics.count() == want > 0
        for i in range(want):
            box = statics.nth(i)
            box.scroll_into_view_if_needed()
            images = box.locator("img.somatize-picture")
            assert images.count() >= 1
            loaded = images.evaluate_all("imgs => imgs.map(i => i.complete && i.naturalWidth > 0 && i.clientWidth > 0)")
            assert all(loaded), f"{name}: picture {i} not shown"
            # it fits the 800 px page
            assert box.evaluate("e => e.getBoundingClientRect().right") <= 800
        page.screenshot(path=ARTIFACTS / f"untrusted-{name}.png", full_page=True)
    finally:
        page.close()


def test_nbconvert_html_shows_every_picture_with_no_network(browser, tmp_path):
    done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--output-dir", str(tmp_path),
                           str(ROOT / "notebooks" / "03-training.ipynb")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = browser.new_page(viewport={"width": 800, "height": 1200})
    try:
        page.route("http*://**", lambda route: route.abort())  # offline: nothing may come from a network
        page.goto((tmp_path / "03-training.html").as_uri())
        images = page.locator(".somatize-static img.somatize-picture")
        assert images.count() >= 5
        assert all(images.evaluate_all("imgs => imgs.map(i => i.complete && i.naturalWidth > 0)"))
        page.screenshot(path=ARTIFACTS / "nbconvert-03.png", full_page=True)
    finally:
        page.close()


class Hop(Node):
    def forward(self, x, ctx):
        return (sum(x) if isinstance(x, tuple) else x) + 1


def big_graph():
    """Thirty nodes, eight branches wide and a long tail: larger than a cell both ways."""
    first = Hop().named("first")
    branches = [Hop().named(f"branch_{i}_with_a_long_name") >> Hop().named(f"after_{i}") for i in range(8)]
    expr = first >> branches >> Hop().named("join")
    for i in range(12):
        expr = expr >> Hop().named(f"tail_{i:02d}")
    return Graph.somatize(expr)


MOUNT = """async ([source, data]) => {
  const url = URL.createObjectURL(new Blob([source], {type: "text/javascript"}));
  const view = (await import(url)).default;
  const model = {get: () => data, on() {}, off() {}};
  view.render({model, el: document.getElementById("cell")});
}"""
BOXES = """host => { const h = host.getBoundingClientRect();
  return [...host.querySelectorAll("g.node")].map(g => { const b = g.getBoundingClientRect();
    return {node: g.dataset.node, left: b.left, top: b.top, width: b.width, height: b.height,
            inside: b.left >= h.left - 0.5 && b.right <= h.right + 0.5 && b.top >= h.top - 0.5
                    && b.bottom <= h.bottom + 0.5}; }); }"""


def test_the_graph_panel_zooms_fits_and_pans_a_graph_larger_than_its_cell(browser):
    """graph.js, given the very data Python sends its widget, in a 600 px cell:
    the zoom buttons and ctrl+wheel scale the node boxes, "fit" shows every
    node inside the cell (and says so with aria-pressed), a drag pans by what
    the pointer moved. Read from the rendered boxes; each state screenshotted."""
    from somatize._widgets._graph import describe, title_of
    from somatize._widgets._views import CSS as css  # what the widget is sent: chart.css, then panel.css

    g = big_graph()
    data = {**describe(g), "title": title_of(g)}
    page = browser.new_page(viewport={"width": 800, "height": 1000})
    try:
        page.set_content(f"<html><head><style>{css}</style></head><body>"
                         f"<div id='cell' style='width:600px'></div></body></html>")
        page.evaluate(MOUNT, [(ROOT / "js" / "widgets" / "graph.js").read_text(), data])
        host = page.locator(".somatize-graph .graph-host")
        tools = page.locator(".somatize-graph .tools")
        natural = float(page.locator(".graph-host svg").get_attribute("width"))
        assert natural > 600  # wider than its cell: a reason to zoom and pan

        def boxes():
            return {b["node"]: b for b in host.evaluate(BOXES)}

        at_one = boxes()
        assert len(at_one) == 32 and not all(b["inside"] for b in at_one.values())  # thirty nodes, input, output
        page.screenshot(path=ARTIFACTS / "graph-zoom-1.png")

        tools.get_by_role("button", name="zoom in").click()
        tools.get_by_role("button", name="zoom in").click()
        zoomed = boxes()
        for name, b in at_one.items():
            assert zoomed[name]["width"] == pytest.approx(b["width"] * 1.25 ** 2, rel=0.01), name
        tools.get_by_role("button", name="zoom out").click()
        assert boxes()["join"]["width"] == pytest.approx(at_one["join"]["width"] * 1.25, rel=0.01)

        # ctrl+wheel zooms as the buttons do; a plain wheel leaves the zoom alone
        before = boxes()["join"]["width"]
        host.hover()
        page.mouse.wheel(0, 100)
        assert boxes()["join"]["width"] == pytest.approx(before, rel=0.01)
        page.keyboard.down("Control")
        page.mouse.wheel(0, -100)
        page.keyboard.up("Control")
        assert boxes()["join"]["width"] == pytest.approx(before * 1.1, rel=0.01)

        # pan: a drag moves every box by what the pointer moved (as far as the scroll can go)
        host.evaluate("h => { h.scrollLeft = 200; h.scrollTop = 200; }")
        was, scroll = boxes(), host.evaluate("h => [h.scrollLeft, h.scrollTop]")
        box = host.bounding_box()
        x, y = box["x"] + 300, box["y"] + 300
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x + 60, y + 40, steps=4)
        page.mouse.up()
        moved = host.evaluate("h => [h.scrollLeft, h.scrollTop]")
        assert moved == [scroll[0] - 60, scroll[1] - 40]
        now = boxes()
        for name in was:
            assert now[name]["left"] - was[name]["left"] == pytest.approx(60, abs=1)
            assert now[name]["top"] - was[name]["top"] == pytest.approx(40, abs=1)
        page.screenshot(path=ARTIFACTS / "graph-zoomed-panned.png")

        fit = tools.get_by_role("button", name="fit the graph to the cell")
        fit.click()
        assert fit.get_attribute("aria-pressed") == "true"
        fitted = boxes()
        assert all(b["inside"] for b in fitted.values()), [n for n, b in fitted.items() if not b["inside"]]
        page.screenshot(path=ARTIFACTS / "graph-fit.png")
        fit.click()  # fit off: back to the zoom it had
        assert fit.get_attribute("aria-pressed") == "false"
        assert boxes()["join"]["width"] == pytest.approx(before * 1.1, rel=0.01)
    finally:
        page.close()
