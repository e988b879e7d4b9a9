"""Panels in a real kernel (nbclient): the end of a cell settles Live's state,
a saved notebook stays small after 100k steps, and notebooks 01 and 02 run."""

import json
import math
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from pictures import SVG, curve, parse, stats, svg_markup

ROOT = Path(__file__).resolve().parents[1]


def run_cells(tmp_path, *sources, allow_errors=False):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=allow_errors,
                   store_widget_state=True, resources={"metadata": {"path": str(tmp_path)}}).execute()
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    return nb, path


FEED = """
from somatize.record import Live
live = Live(title="long")
def step(v):
    live.forward_began()
    live({"fact": "ran", "node": "body", "began_us": 1, "took_us": 3})
    live({"fact": "finished", "took_us": 5})
    live({"fact": "loss", "value": v})
"""


def html_outputs(cell):
    return [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]


def test_a_saved_notebook_after_100k_steps_stays_small(tmp_path):
    nb, path = run_cells(
        tmp_path, FEED,
        "display(live)\nfor i in range(100_000):\n    step(1.0 / (i + 1))",
        "live",
    )
    assert path.stat().st_size < 1_000_000
    # The picture displayed before the loop was brought up to date when its cell ended.
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    live_states = [m["state"]["status"] for m in state.values() if "status" in m["state"]]
    assert live_states and live_states[0]["steps"] == 100_000 and live_states[0]["state"] == "finished"
    saved = live_states[0]
    for html in html_outputs(nb.cells[1]) + html_outputs(nb.cells[2]):
        root = parse(html)
        assert stats(root)["steps"] == "100,000"
        assert root.find(".//span").text == "finished"  # the state's badge
        read, (dx, dy) = curve(root.find(f"{SVG}svg"), log=True)  # 1 down to 1e-5: a log axis
        assert len(read) == len(saved["curve"])  # the curve saved, bucketed, not 100k points
        for (x, y), (step, mean, _, _) in zip(read, saved["curve"]):
            assert abs(x - step) <= dx and abs(math.log10(y) - math.log10(mean)) <= dy
        assert saved["curve"][-1][0] > 99_000  # it reaches the last steps


def test_a_cell_that_raises_leaves_live_interrupted(tmp_path):
    nb, _ = run_cells(
        tmp_path, FEED,
        "for i in range(10):\n    step(1.0)\nlive.forward_began()\nraise RuntimeError('boom')",
        "print(live.state, live.cause, live.steps)",
        allow_errors=True,
    )
    assert nb.cells[2].outputs[0]["text"].split() == ["interrupted", "RuntimeError", "10"]


def run_notebook(name, tmp_path):
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def test_notebook_01_graphs_runs(tmp_path):
    nb = run_notebook("01-graphs.ipynb", tmp_path)
    widgets = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets and all("text/html" in o["data"] for o in widgets)


def test_notebook_02_store_and_record_runs(tmp_path):
    nb = run_notebook("02-store-and-record.ipynb", tmp_path)
    text = json.dumps([c.outputs for c in nb.cells if c.cell_type == "code"])
    assert "Where the time went" in text and "sha256:" in text
    # the last cell draws the run's times on the graph: `heavy` (4 ms a forward) is the slow node
    last = html_outputs(nb.cells[-1])[0]
    assert 'class="node slowest" data-node="heavy"' in svg_markup(last)


COMMITTED = ["01-graphs.ipynb", "02-store-and-record.ipynb", "03-training.ipynb"]


def panel_outputs(nb):
    """Our panels' outputs (fit's progress bar is tqdm's, not ours)."""
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
            and o["data"]["text/plain"].startswith(("Graph(", "Live(", "progress(", "spent("))]


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_notebook_shows_every_panel_as_a_picture_where_widgets_do_not_run(name):
    """Issue 9, item 3: no saved widget state hides the pictures, and each picture is an SVG image
    (JupyterLab's sanitiser keeps <img>, strips inline <svg>)."""
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    assert "widgets" not in nb.metadata  # saved state makes nbconvert emit placeholders that need a CDN
    panels = panel_outputs(nb)
    assert panels
    for out in panels:
        html = out["data"]["text/html"]
        assert "<svg" not in html and "<script" not in html
        pictures = parse(html).findall(f".//{SVG}svg")
        assert pictures and all(p.findall(f".//{SVG}text") for p in pictures)


def test_nbconvert_html_of_a_committed_notebook_shows_the_pictures_offline(tmp_path):
    """nbconvert --to html: the panels' pictures are inline data, nothing is loaded from a network."""
    done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--output-dir", str(tmp_path),
                           str(ROOT / "notebooks" / "03-training.ipynb")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "03-training.html").read_text()
    assert "application/vnd.jupyter.widget-state+json" not in page
    assert page.count("data:image/svg+xml;base64,") >= 5  # graph, Live, progress, spent, spent on the graph
    assert "somatize-static" in page
