"""A user's own export: a notebook with a panel, executed and turned into HTML
by `jupyter nbconvert --execute --to html`, opened in Debian's Chromium with
no network. nbclient keeps the widgets' state by default, and with it
nbconvert draws each panel as a widget view whose code would come from a
CDN: offline, an empty box. With the one flag the README and the panel's
text/plain name (`_views.EXPORT_FLAG`) no state is kept and the panel's
static picture shows: its axis titles and tick labels are read off the page
(issue 19, item 6). Screenshots go to test-artifacts/export/.
"""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from labtools import ARTIFACTS, CHROMIUM, FLAGS, ROOT

from somatize import Recorder, Store
from somatize._widgets._views import EXPORT_FLAG
from somatize.record import progress

SHOTS = ARTIFACTS / "export"
CODE = '''from somatize import Store
from somatize.record import progress
progress(Store("store"), run="r")'''

# Every text of each SVG picture the page shows, read out of its <img>
# (data:image/svg+xml;base64), and whether the image was drawn.
PICTURES = r"""imgs => imgs.map(img => {
  const svg = new DOMParser().parseFromString(atob(img.src.split(',')[1]), 'image/svg+xml');
  return {drawn: img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().height > 0,
          texts: [...svg.querySelectorAll('text')].map(t => t.textContent)};
})"""


@pytest.fixture
def notebook(tmp_path):
    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    with Recorder(Store(tmp_path / "store"), run="r") as rec:
        for i in range(60):
            rec.forward_began()
            rec({"fact": "loss", "value": 3.0 / (i + 1)})
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_code_cell(CODE))
    nbformat.write(nb, tmp_path / "mine.ipynb")
    return tmp_path / "mine.ipynb"


def export(notebook, name, *flags):
    """`jupyter nbconvert --execute --to html` of `notebook`, as a user runs it, to `name`.html."""
    done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--execute", "--to", "html", *flags,
                           "--output", name, str(notebook)], cwd=notebook.parent, capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return notebook.parent / f"{name}.html"


def test_an_executed_export_shows_the_panel_s_picture_offline_with_the_flag_it_names(notebook):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    assert EXPORT_FLAG in (ROOT / "README.md").read_text()  # said where a user looks (and in the text/plain)
    want = progress(Store(notebook.parent / "store"), run="r").chart()
    kept = export(notebook, "kept")  # as nbconvert does by default: the widgets' state kept
    flagged = export(notebook, "flagged", *EXPORT_FLAG.split())
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1000, "height": 900})
        page.route("http*://**", lambda route: route.abort())  # offline: nothing may come from a network
        try:
            # by default: a widget view, empty without its CDN, and no picture
            page.goto(kept.as_uri())
            page.screenshot(path=SHOTS / "default.png", full_page=True)
            assert page.locator(".jupyter-widgets script[type='application/vnd.jupyter.widget-view+json']").count() == 1
            assert page.locator("img.somatize-picture").count() == 0
            # with the flag: the picture, its axes read off the page
            page.goto(flagged.as_uri())
            page.screenshot(path=SHOTS / "flagged.png", full_page=True)
            assert page.locator(".jupyter-widgets").count() == 0
            (picture,) = page.locator("img.somatize-picture").evaluate_all(PICTURES)
            assert picture["drawn"], picture
            texts = picture["texts"]
            assert {"step", "loss (log scale)" if want["log"] else "loss"} <= set(texts), texts
            for _, label in want["xticks"] + want["yticks"]:
                assert label in texts, (label, texts)
        finally:
            browser.close()

