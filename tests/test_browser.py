"""The panels in a real browser: Debian's Chromium, driven by Python
playwright, against a real `jupyter lab` server started here.

Notebook 03 is opened and run through the UI (Run > Run All Cells); then the
Live panel must show 300 steps and a drawn curve, `spent` one bar per node and
the Trainer's own bar, and the graph panel (the notebook displays `g` where it
builds it) two nodes joined by one edge. The copy run here ends with one cell
of ours, `spent(..., graph=g)`, to see a run's times drawn on the graph in the
lab too. Each panel is saved as a screenshot under test-artifacts/
(gitignored) for a person to look at.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "somatize-browser-test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    nb = nbformat.read(ROOT / "notebooks" / "03-training.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.cells.append(nbformat.v4.new_code_cell('spent(store, run="a-run", graph=g)'))
    root = tmp_path / "root"
    root.mkdir()
    nbformat.write(nb, root / "03-training.ipynb")
    port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "lab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2) as r:
                json.load(r)
            break
        except OSError:
            if server.poll() is not None:
                raise RuntimeError((tmp_path / "lab.log").read_text()) from None
            time.sleep(0.5)
    yield url
    server.terminate()
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def test_notebook_03_panels_in_jupyterlab(lab):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        # Tall enough that each panel fits whole in the window for its screenshot.
        page = browser.new_page(viewport={"width": 1280, "height": 1800})
        try:
            page.goto(f"{lab}/lab/tree/03-training.ipynb?token={TOKEN}")
            page.wait_for_selector(".jp-Notebook", timeout=90_000)
            # JupyterLab's toasts (the news question) would sit on top of the screenshots.
            page.add_style_tag(content=".Toastify { display: none !important; }")
            # A "Select Kernel" dialog may come up once the page settles: accept it.
            accept = page.locator(".jp-Dialog button.jp-mod-accept")
            try:
                accept.first.wait_for(timeout=20_000)
                accept.first.click()
            except PlaywrightTimeout:
                pass
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()

            live = page.locator(".somatize-live").first
            live.wait_for(timeout=300_000)
            live.scroll_into_view_if_needed()
            page.wait_for_function(
                "() => document.querySelector('.somatize-live')?.dataset.state === 'finished'", timeout=30_000
            )
            assert live.locator("[data-stat=steps]").text_content() == "300"
            drawn = int(live.locator("polyline.curve").get_attribute("data-points"))
            assert drawn >= 250  # 300 steps, every finite one drawn
            toggle, axis = live.locator("button.toggle"), live.locator("text.axis").last
            assert toggle.get_attribute("aria-pressed") == "true" and axis.text_content() == "loss (log scale)"
            toggle.click()
            assert toggle.get_attribute("aria-pressed") == "false" and axis.text_content() == "loss"
            toggle.click()
            box = live.locator("svg.somatize-chart").bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            assert live.locator("text.hover").text_content().startswith("step ")
            page.mouse.move(0, 0)
            live.screenshot(path=ARTIFACTS / "live.png")

            spent = page.locator(".somatize-spent").first
            spent.scroll_into_view_if_needed()
            assert spent.locator("rect.bar[data-kind=node]").count() == 2
            assert sorted(spent.locator("rect.bar[data-kind=node]").evaluate_all(
                "bars => bars.map(b => b.dataset.node)")) == ["body", "head"]
            assert spent.locator("rect.bar[data-kind=trainer]").count() == 1
            assert spent.locator("rect.bar[data-kind=engine]").count() == 1
            assert spent.locator("rect.span").count() == 2  # the timeline of one forward
            spent.screenshot(path=ARTIFACTS / "spent.png")

            progress = page.locator(".somatize-progress").first
            progress.scroll_into_view_if_needed()
            progress.locator("path.line").first.wait_for(state="attached")
            progress.locator("xpath=..").screenshot(path=ARTIFACTS / "progress.png")

            graph = page.locator(".somatize-graph").first
            graph.scroll_into_view_if_needed()
            assert graph.locator("g.node:not(.io)").count() == 2
            assert graph.locator("path.edge[data-from=body][data-to=head]").count() == 1
            graph.locator("g.node[data-node=body]").click()
            assert "Features" in graph.locator(".details").text_content()
            page.mouse.move(0, 0)  # the pointer off the node: the picture shows the selection, not the hover
            assert graph.locator("g.node.selected").get_attribute("data-node") == "body"
            graph.screenshot(path=ARTIFACTS / "graph.png")

            on_graph = page.locator(".somatize-spent").last
            on_graph.locator("g.node[data-node=head]").wait_for()
            # Its top to the top of the notebook's window, or the screenshot is cut at its foot.
            on_graph.evaluate("e => e.scrollIntoView({block: 'start'})")
            assert on_graph.locator("g.node.slowest").count() == 1
            assert on_graph.locator("text.timing").count() == 2
            on_graph.screenshot(path=ARTIFACTS / "spent-on-graph.png")
        finally:
            page.screenshot(path=ARTIFACTS / "page.png")
            browser.close()
