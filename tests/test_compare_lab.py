"""The explorer in a real JupyterLab, in Debian's Chromium: a brush dragged
on an axis with the mouse is read back from the kernel (explorer.selected,
explorer.where) and compared with runs(store, where=...); a where set from
Python moves the brush on the page; the explorer at 1400 and 800 px, light
and dark, is saved under test-artifacts/."""

import json
from pathlib import Path

import nbformat
import pytest
from labtools import ARTIFACTS, CHROMIUM, FLAGS, TOKEN, accept_kernel_dialog, running_lab, theme

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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("lab")
    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(MAKE), nbformat.v4.new_code_cell(ASK), nbformat.v4.new_code_cell(SET),
                nbformat.v4.new_code_cell(ASK)]
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
        page.goto(f"{lab}/lab/tree/explore.ipynb?token={TOKEN}&reset")
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        page.add_style_tag(content=".Toastify { display: none !important; }")
        accept_kernel_dialog(page)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
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
    finally:
        page.screenshot(path=ARTIFACTS / "explorer-page.png")
        page.close()

