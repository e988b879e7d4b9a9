"""The main job's store in the run browser, as a person first sees it: the
demo runs (`python -m somatize.demo --record`, what `scripts/demo` and
Binder record) in a real `jupyter lab` and Debian's Chromium. The sidebar
shows each run's state by its sign and word and its name whole, a damaged
run's tooltip names the file that is wrong and what still reads, and the two
finished runs open side by side: their summarised fact's curves, bars of one
length, their configs key by key.
This is the README's picture of the run browser (docs/screenshots/
run-browser.png); light and dark, 1400 and 800 px, go to
test-artifacts/demo-lab/."""

import subprocess
import sys
from pathlib import Path

import pytest
from labtools import (
    ARTIFACTS,
    CHROMIUM,
    FLAGS,
    NAME_CUT,
    ROOT,
    open_sidebar,
    open_two_runs,
    running_lab,
    shoot,
    theme,
    wait_for_findings_counted,
)

from somatize._pictures import _chart
from somatize.record import curve

SHOTS = ARTIFACTS / "demo-lab"
STATES = {"demo-smooth": ("finished", "✓"), "demo-noisy": ("finished", "✓"),
          "demo-interrupted": ("interrupted", "‖"), "demo-damaged": ("damaged", "✗")}


@pytest.fixture
def notebooks(tmp_path):
    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    root = tmp_path / "notebooks"
    done = subprocess.run([sys.executable, "-m", "somatize.demo", "--record", "--store", str(root / "demo-store")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def test_the_demo_runs_in_the_run_browser(notebooks, tmp_path):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with running_lab(notebooks, tmp_path) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        try:
            open_sidebar(page, url)
            side = page.locator("#somatize-sidebar")
            for run in STATES:
                side.locator(f"tr.smz-row[data-run='{run}']").wait_for(timeout=30_000)
            assert side.locator("h3.smz-store-name").all_text_contents() == ["demo-store"]
            shown = {}
            for run in STATES:
                row = side.locator(f"tr.smz-row[data-run='{run}']")
                shown[run] = (row.get_attribute("data-state"), row.locator(".smz-state").text_content())
                assert f"({shown[run][0]})" in row.locator(".smz-sr").text_content()  # the word, for a reader
            assert shown == STATES
            # at the panel's default width every demo run's name is drawn whole, not as 'demo-…',
            # with the counts of findings in (they change the layout)
            wait_for_findings_counted(page)
            for width in (1400, 800):
                page.set_viewport_size({"width": width, "height": 900})
                assert side.get_attribute("data-layout") == "narrow"
                cut = side.locator(".smz-run-name").evaluate_all(
                    f"names => names.filter({NAME_CUT}).map(n => n.textContent)")
                assert cut == [], f"{width} px: {cut}"
            page.set_viewport_size({"width": 1400, "height": 900})
            damaged = side.locator("tr.smz-row[data-run='demo-damaged'] td[data-col='run']").get_attribute("title")
            # it names the file that is wrong, and what still reads
            assert damaged.startswith("demo-damaged: damaged\n"), damaged
            assert "runs/demo-damaged/summary.json is not JSON" in damaged and "facts(store, run)" in damaged, damaged

            panel = open_two_runs(page, "demo-smooth", "demo-noisy")
            # the fact the runs summarise first is the curve shown first
            assert panel.locator(".smz-curves h3").text_content() == "roughness/smooth by step"
            assert panel.locator(".smz-curve-picker").input_value() == "roughness/smooth"
            # its axes are the notebook panels' one chart of those curves, read off the page
            order = [s.get_attribute("data-name") for s in panel.locator("svg.somatize-chart polyline.curve").all()]
            want = _chart.chart([{"name": run, "color": "", "points": list(curve(notebooks / "demo-store", run,
                                                                                   "roughness/smooth").items())}
                                 for run in order], ylabel="roughness/smooth")
            ticks = panel.locator("svg.somatize-chart text.tick").evaluate_all(
                "ts => ts.map(t => [t.getAttribute('text-anchor'), t.textContent])")
            assert [s for a, s in ticks if a == "end"] == [label for _, label in want["yticks"]]
            shown_x = [s for a, s in ticks if a == "middle"]
            every = [label for _, label in want["xticks"]]
            assert len(shown_x) >= 3 and shown_x == every[::every.index(shown_x[1])], (shown_x, every)
            # each run's bars run on tracks of one length, whatever their labels say
            assert panel.locator(".smz-spent-run").count() == 2
            for run in panel.locator(".smz-spent-run").all():
                tracks = run.locator(".smz-bar-track").evaluate_all(
                    "ts => ts.map(t => t.getBoundingClientRect().width)")
                assert len(tracks) == 4 and max(tracks) - min(tracks) < 0.5, tracks
            # the summaries compare the runs' configs key by key, and have no empty row
            side_by_side = panel.locator(".smz-summaries tr").evaluate_all(
                "rows => rows.map(r => [...r.children].map(c => c.textContent))")
            assert ["config.seed", "1", "0"] in side_by_side and ["config.settle", "1200", "300"] in side_by_side
            assert [r for r in side_by_side if r[0] and not any(r[1:])] == [], side_by_side
            panel.locator(".smz-findings-run[data-run='demo-noisy']").wait_for(timeout=30_000)
            theme(page, "JupyterLab Light", True)
            shoot(page, SHOTS / "light", readme="run-browser.png")
            theme(page, "JupyterLab Dark", False)
            shoot(page, SHOTS / "dark")
            assert dialogs == []
        finally:
            page.screenshot(path=SHOTS / "page.png")
            browser.close()
