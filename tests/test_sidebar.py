"""The run browser (js/sidebar, somatize/_server) in a real browser: Debian's
Chromium, driven by Python playwright, against a real `jupyter lab`.

Its sidebar lists a store's runs, a run being recorded by another process
counts its steps up without a reload, two runs overlay as two curves, "Insert
code" puts a cell in the notebook that runs, Delete removes one run after the
confirmation and leaves the others, the table moves with the keyboard, and a
store named like markup stays text. At JupyterLab's default width of the left
panel (at 1400 and 800 px) the table fits it: name, state and steps shown,
the count of findings after the name, nothing outside the panel, a long name ellipsized. Screenshots, light
and dark, 1400 and 800 px wide, go to test-artifacts/sidebar/. Without its server extension the
sidebar names the command that enables it.
"""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from labtools import (
    ARTIFACTS,
    CHROMIUM,
    FLAGS,
    LIVE_CHILD,
    NAME_CUT,
    ROOT,
    accept_kernel_dialog,
    open_sidebar,
    open_two_runs,
    running_lab,
    shoot,
    sidebar_page,
    theme,
    wait_for_findings_counted,
)

from somatize._pictures import _chart
from somatize.record import curve, progress

# ---- the run browser --------------------------------------------------------------------

SIDEBAR_SHOTS = ARTIFACTS / "sidebar"
HOSTILE_NAME = "<img src=x onerror=alert(1)>"
LONG_NAME = "a-run-whose-name-is-far-too-long-for-the-sidebar-at-the-default-width"
# Where each shown column's header and cells lie, against the sidebar's box.
LAYOUT_JS = r"""() => {
  const NAME_CUT = """ + NAME_CUT + r""";
  const side = document.querySelector('#somatize-sidebar');
  const box = side.getBoundingClientRect();
  const shown = e => getComputedStyle(e).display !== 'none' && e.getBoundingClientRect().width > 0;
  const outside = [];
  for (const cell of side.querySelectorAll('table.smz-table th, table.smz-table td, .smz-details, .smz-found')) {
    const r = cell.getBoundingClientRect();
    if (shown(cell) && (r.left < box.left - 0.5 || r.right > box.right + 0.5)) {
      outside.push(`${cell.tagName} ${cell.dataset.col ?? cell.className} ${r.left}-${r.right}`);
    }
  }
  const section = side.querySelector("section:has(tr[data-run='alpha'])");
  const long = side.querySelector('tr[data-run^="a-run-whose"] .smz-run-name');
  return {
    width: box.width,
    layout: side.dataset.layout,
    outside,
    sideways: [...side.querySelectorAll('.smz-table-wrap')].filter(w => w.scrollWidth > w.clientWidth).length,
    columns: [...section.querySelectorAll('th')].filter(shown).map(th => th.dataset.col),
    cutHeaders: [...section.querySelectorAll('th .smz-sort')].filter(b => shown(b) && b.scrollWidth > b.clientWidth)
      .map(b => b.textContent),
    findings: [...section.querySelectorAll('td[data-col="findings"]')].filter(shown).length,
    signs: [...section.querySelectorAll('tr.smz-row .smz-state')].filter(shown).length,
    rows: section.querySelectorAll('tr.smz-row').length,
    // each run's name as drawn: whole (not cut) or not
    whole: Object.fromEntries([...section.querySelectorAll('tr.smz-row')]
      .map(r => [r.dataset.run, !NAME_CUT(r.querySelector('.smz-run-name'))])),
    long: {cut: NAME_CUT(long), overflow: getComputedStyle(long).textOverflow,
           height: long.getBoundingClientRect().height, font: parseFloat(getComputedStyle(long).fontSize)},
  };
}"""

# A chart as drawn, whatever draws it: its parts (each kind of element once, by
# tag and class), its tick labels, axis titles and lines (name, points).
DRAWING = r"""svg => ({
  parts: [...new Set([...svg.querySelectorAll('*')].map(n => `${n.tagName}.${n.getAttribute('class') ?? ''}`))].sort(),
  x: [...svg.querySelectorAll("text.tick[text-anchor='middle']")].map(t => t.textContent),
  y: [...svg.querySelectorAll("text.tick[text-anchor='end']")].map(t => [t.dataset.value, t.textContent]),
  axes: [...svg.querySelectorAll('text.axis')].map(t => t.textContent),
  lines: [...svg.querySelectorAll('polyline.curve')].map(p => [p.dataset.name, p.dataset.points]),
})"""


def record_run(store, run, losses):
    from somatize import Recorder

    with Recorder(store, run=run) as r:
        for i, v in enumerate(losses):
            r.forward_began()
            r({"fact": "ran", "node": "encoder", "began_us": 0, "took_us": 300 + i % 7})
            r({"fact": "ran", "node": "head", "began_us": 300, "took_us": 90})
            r({"fact": "finished", "took_us": 420})
            r({"fact": "loss", "value": float(v)})
            r({"fact": "accuracy", "value": 1.0 - float(v) / 4})


@pytest.fixture
def runs_root(tmp_path):
    import numpy as np

    from somatize import Store

    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    root = tmp_path / "root"
    store = Store(root / "experiments" / "store")
    steps = np.arange(400)
    record_run(store, "alpha", 2.5 * np.exp(-steps / 90) + 0.2 + 0.05 * np.sin(steps / 7))
    record_run(store, "beta", 2.8 * np.exp(-steps / 150) + 0.35 + 0.05 * np.cos(steps / 5))
    record_run(store, "sick", [1.0] * 5 + [50.0] * 20)  # its loss diverged: one finding
    record_run(Store(root / HOSTILE_NAME), "inert", [1.0, 0.5])
    record_run(Store(root / "long-names"), LONG_NAME, [1.0, 0.5])
    record_run(Store(root / "long-names"), "decades", np.geomspace(100, 0.01, 60))  # a loss over four decades
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell("Runs, from the sidebar"))
    nbformat.write(nb, root / "runs.ipynb")
    return root


def assert_fits_the_panel(page, width):
    """At the panel's default width for a window ``width`` px wide: every
    shown header and cell inside the sidebar, no table scrolling sideways,
    name (with its state) and steps shown, the short names whole, a long
    name cut with an ellipsis on one line; the findings fold into a count
    after the name."""
    page.set_viewport_size({"width": width, "height": 900})
    # the sidebar folds on the resize; wait (a guard, not a measurement) for the cells to lie inside
    page.wait_for_function(f"() => ({LAYOUT_JS})().outside.length === 0", timeout=30_000)
    got = page.evaluate(LAYOUT_JS)
    assert got["outside"] == [] and got["sideways"] == 0, got
    assert {"run", "steps"} <= set(got["columns"]) and "findings" not in got["columns"], got
    assert got["cutHeaders"] == [] and got["findings"] == 0 and got["rows"] == got["signs"] == 4, got
    assert got["whole"] == {"alpha": True, "beta": True, "live": True, "sick": True}, got
    assert got["long"]["cut"] and got["long"]["overflow"] == "ellipsis", got
    assert got["long"]["height"] < 2 * got["long"]["font"], got  # one line, not wrapped
    return got


def test_run_browser_sidebar_in_jupyterlab(runs_root, tmp_path):
    from playwright.sync_api import sync_playwright

    SIDEBAR_SHOTS.mkdir(parents=True, exist_ok=True)
    store = runs_root / "experiments" / "store"
    child = subprocess.Popen([sys.executable, "-c", LIVE_CHILD, str(store)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    dialogs, stray = [], []
    try:
        child.stdin.write("30\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "30"
        with running_lab(runs_root, tmp_path) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("request", lambda r: stray.append(r.url) if r.url.split("?")[0].rsplit("/", 1)[-1] == "x" else None)
            try:
                open_sidebar(page, url, "lab/tree/runs.ipynb")
                side = page.locator("#somatize-sidebar")
                for run in ("alpha", "beta", "live", "sick", "inert"):
                    side.locator(f"tr.smz-row[data-run='{run}']").wait_for(timeout=30_000)
                # the store named like markup is shown as its name, as text
                assert HOSTILE_NAME in side.locator("h3.smz-store-name").all_text_contents()
                assert side.locator("img").count() == 0

                # at the panel's default width the table fits it, folded, with the counts of findings in
                side.locator(f"tr.smz-row[data-run='{LONG_NAME}']").wait_for(timeout=30_000)
                wait_for_findings_counted(page)
                for width in (1400, 800):
                    got = assert_fits_the_panel(page, width)
                    assert got["layout"] == "narrow", got  # the whole table is wider than either
                page.set_viewport_size({"width": 1400, "height": 900})
                details = side.locator("tr.smz-row[data-run='alpha'] .smz-details")
                assert "loss" in details.text_content() and details.is_visible()
                assert "loss" in side.locator("tr.smz-row[data-run='alpha'] td[data-col='run']").get_attribute("title")

                # a running run counts up without a reload
                steps = side.locator("tr.smz-row[data-run='live'] td[data-col='steps']")
                assert steps.text_content() == "30"
                assert side.locator("tr.smz-row[data-run='live']").get_attribute("data-state") == "running"
                child.stdin.write("25\n")
                child.stdin.flush()
                assert child.stdout.readline().strip() == "55"
                page.wait_for_function(
                    "() => document.querySelector(\"#somatize-sidebar tr[data-run='live'] td[data-col='steps']\")"
                    "?.textContent === '55'", timeout=30_000)
                loss = side.locator("tr.smz-row[data-run='alpha'] td[data-fact='loss']").text_content()
                assert " / " in loss

                # each run's count of findings, counted off the request: the table reads it again
                # soon while it is being counted; none shows as a dash, some in the warn colour
                page.wait_for_function(
                    "() => document.querySelector(\"#somatize-sidebar tr[data-run='sick'] td[data-col='findings']\")"
                    "?.dataset.count === '1'", timeout=30_000)
                found = side.locator("tr.smz-row[data-run='sick'] td[data-col='findings']")
                assert found.text_content() == "1" and "smz-warn" in found.get_attribute("class")
                # narrow, the count follows the name, in the warn colour; none shows nothing
                pill = side.locator("tr.smz-row[data-run='sick'] .smz-found")
                assert pill.is_visible() and pill.text_content() == "1" and "smz-warn" in pill.get_attribute("class")
                assert "finding" in pill.get_attribute("title")
                page.wait_for_function(
                    "() => document.querySelector(\"#somatize-sidebar tr[data-run='alpha'] td[data-col='findings']\")"
                    "?.dataset.count === '0'", timeout=30_000)
                none = side.locator("tr.smz-row[data-run='alpha'] td[data-col='findings']")
                assert none.text_content() == "–" and "smz-warn" not in (none.get_attribute("class") or "")
                assert side.locator("tr.smz-row[data-run='alpha'] .smz-found").count() == 0

                # keyboard: focus moves down the table, Space selects
                first = side.locator("tr.smz-row").first
                first.focus()
                page.keyboard.press("ArrowDown")
                focused = page.evaluate("() => document.activeElement.dataset.run")
                assert focused == side.locator("tr.smz-row").nth(1).get_attribute("data-run")
                page.keyboard.press(" ")
                assert side.locator(f"tr.smz-row[data-run='{focused}']").get_attribute("aria-selected") == "true"

                # sorted by name; a click on the column's header turns it round (the server sorts), another back
                ours = side.locator("section:has(tr[data-run='alpha'])")
                for want in (["sick", "live", "beta", "alpha"], ["alpha", "beta", "live", "sick"]):
                    ours.locator("th[data-col='run'] button").click()
                    page.wait_for_function(
                        "want => JSON.stringify([...document.querySelectorAll(\"#somatize-sidebar "
                        "section:has(tr[data-run='alpha']) tr.smz-row\")].map(r => r.dataset.run)) === "
                        "JSON.stringify(want)", arg=want, timeout=30_000)

                # two runs overlaid: two curves and a legend
                panel = open_two_runs(page, "alpha", "beta")
                assert panel.locator(".smz-bar-row[data-node='encoder']").count() == 2
                # recorded with no config: no config row (an empty config once drew a blank one)
                heads = panel.locator(".smz-summaries tr > th:first-child").all_text_contents()
                assert "loss last" in heads and not [h for h in heads if h.startswith("config")], heads
                # the panel lists each run's findings: these two healthy runs have none
                panel.locator(".smz-findings-run[data-run='beta'] .smz-empty").wait_for(timeout=30_000)
                assert panel.locator(".smz-findings-run .smz-empty").all_text_contents() == ["No finding."] * 2
                theme(page, "JupyterLab Light", True)
                shoot(page, SIDEBAR_SHOTS / "light")
                theme(page, "JupyterLab Dark", False)
                shoot(page, SIDEBAR_SHOTS / "dark")
                page.set_viewport_size({"width": 1400, "height": 900})

                # the panel dragged wide: the table unfolds, every column shown, still inside
                handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle:not(.lm-mod-hidden)").first
                at = handle.bounding_box()
                page.mouse.move(at["x"] + at["width"] / 2, at["y"] + at["height"] / 2)
                page.mouse.down()
                page.mouse.move(at["x"] + 700, at["y"] + at["height"] / 2, steps=5)
                page.mouse.up()
                page.wait_for_selector("#somatize-sidebar[data-layout='wide']", timeout=30_000)
                got = page.evaluate(LAYOUT_JS)
                assert got["outside"] == [] and got["sideways"] == 0 and got["width"] > 600, got
                assert {"run", "steps", "findings", "fact", "duration", "age"} <= set(got["columns"]), got
                assert not side.locator("tr.smz-row[data-run='alpha'] .smz-details").is_visible()
                page.screenshot(path=SIDEBAR_SHOTS / "wide-dark-1400.png")
                back = handle.bounding_box()  # and back where it was, for the notebook's toolbar
                page.mouse.move(back["x"] + back["width"] / 2, back["y"] + back["height"] / 2)
                page.mouse.down()
                page.mouse.move(at["x"] + at["width"] / 2, at["y"] + at["height"] / 2, steps=5)
                page.mouse.up()
                page.wait_for_selector("#somatize-sidebar[data-layout='narrow']", timeout=30_000)

                # delete one run after confirming; the others stay
                side.locator("tr.smz-row[data-run='beta']").click()
                side.locator("button", has_text="Delete").click()
                page.locator(".jp-Dialog").wait_for()
                assert "beta" in page.locator(".jp-Dialog").text_content()
                page.locator(".jp-Dialog button.jp-mod-accept").click()
                side.locator("tr.smz-row[data-run='beta']").wait_for(state="detached", timeout=30_000)
                assert side.locator("tr.smz-row[data-run='alpha']").count() == 1
                assert not (store / "runs" / "beta").exists() and (store / "runs" / "alpha").is_dir()

                # a loss over four decades: the panel draws the notebook panels' log axis, read off the page
                side.locator("tr.smz-row[data-run='decades']").click()
                side.locator("button", has_text="Open").click()
                lone = page.locator(".somatize-runs-panel").last
                lone.locator("svg.somatize-chart polyline.curve").wait_for(timeout=30_000)
                want = _chart.chart([{"name": "decades", "color": "", "points": list(
                    curve(runs_root / "long-names", "decades", "loss").items())}], ylabel="loss")
                assert want["log"] and lone.locator("svg.somatize-chart").get_attribute("data-log") == "true"
                assert lone.locator(".smz-curves h3").text_content() == "loss by step, on a log scale"
                ticks = lone.locator("svg.somatize-chart text.tick[text-anchor='end']").evaluate_all(
                    "ts => ts.map(t => [t.textContent, t.getBoundingClientRect().y])")
                assert [label for label, _ in ticks] == [label for _, label in want["yticks"]] == \
                    ["0.01", "0.1", "1", "10", "100"]
                gaps = [a[1] - b[1] for a, b in zip(ticks, ticks[1:])]  # decades evenly apart, up the page
                assert all(g > 0 for g in gaps) and max(gaps) - min(gaps) < 1, ticks
                page.screenshot(path=SIDEBAR_SHOTS / "log-axis-1400.png")

                # insert code into the notebook, and run it there
                page.locator(".lm-TabBar-tab", has_text="runs.ipynb").first.click()
                accept_kernel_dialog(page)
                side.locator("tr.smz-row[data-run='alpha']").click()
                side.locator("button", has_text="Insert code").click()
                # the cell holding the code (running it adds an empty cell below)
                cell = page.locator(".jp-Notebook .jp-CodeCell", has_text='progress(store, run="alpha")')
                cell.wait_for(timeout=30_000)
                code = cell.locator(".cm-content").text_content()
                assert 'store = "experiments/store"' in code
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
                cell.click()
                page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
                page.locator(".lm-Menu-itemLabel", has_text="Run Selected Cell").first.click()
                cell.locator(".somatize-progress").first.wait_for(state="attached", timeout=120_000)
                errors = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
                assert errors.count() == 0

                # one renderer: alpha's loss drawn by that progress in the notebook and by the panel
                # the sidebar opens is the same drawing, read off the page: the same parts, ticks, labels
                notebook = cell.locator(".somatize-progress svg.somatize-chart")
                notebook.locator("polyline.curve").wait_for(state="attached", timeout=60_000)
                side.locator("button", has_text="Open").click()  # alpha, still selected
                own = page.locator(".somatize-runs-panel").last
                own.locator("svg.somatize-chart polyline.curve").wait_for(timeout=30_000)
                drawn = [chart.evaluate(DRAWING) for chart in (notebook, own.locator("svg.somatize-chart"))]
                # x: every k-th label of the one list, k as the width allows (the cells' widths differ)
                every = [label for _, label in progress(runs_root / "experiments" / "store",
                                                                 run="alpha").chart()["xticks"]]
                for x in (d.pop("x") for d in drawn):
                    assert len(x) >= 3 and x == every[::every.index(x[1])], (x, every)
                assert drawn[0] == drawn[1], drawn
                assert drawn[0]["axes"] == ["step", "loss"] and drawn[0]["lines"] == [["alpha", "400"]], drawn
                assert len(drawn[0]["y"]) >= 2, drawn
                # and it answers the pointer as the notebook's does: the step under it and alpha's value
                box = own.locator("svg.somatize-chart rect.frame").bounding_box()
                page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                said = own.locator("svg.somatize-chart g.hover").evaluate(
                    "g => [g.getAttribute('visibility'), ...[...g.querySelectorAll('tspan')].map(t => t.textContent)]")
                assert said[0] == "visible" and said[1].startswith("step ") and said[2].startswith("alpha: "), said
                page.screenshot(path=SIDEBAR_SHOTS / "hover-1400.png")
                assert dialogs == [] and stray == []
            finally:
                page.screenshot(path=SIDEBAR_SHOTS / "page.png")
                browser.close()
    finally:
        child.stdin.close()
        child.wait(60)
        child.stdout.close()


def test_sidebar_names_the_command_when_the_server_extension_is_off(runs_root, tmp_path):
    from playwright.sync_api import sync_playwright

    with running_lab(runs_root, tmp_path, server_extension=False) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            open_sidebar(page, url, "lab/tree/runs.ipynb")
            message = page.locator("#somatize-sidebar .smz-message")
            page.wait_for_function(
                "() => document.querySelector('#somatize-sidebar .smz-message')?.textContent.includes('extension')",
                timeout=30_000)
            assert "jupyter server extension enable somatize._server" in message.text_content()
            assert page.locator("#somatize-sidebar").get_attribute("data-problem") == "missing-server-extension"
        finally:
            browser.close()


# The x a chart's lines are drawn at, read back through its own x axis (the
# labelled ticks' places), and the half pixel that reading is good to.
LINES_BY_X = r"""svg => {
  const ticks = [...svg.querySelectorAll("text.tick[text-anchor='middle']")];
  const at = ticks.map(t => [+t.dataset.value, +t.getAttribute('x')]);
  const [[v0, p0], [v1, p1]] = [at[0], at[at.length - 1]];
  const per = (p1 - p0) / (v1 - v0);
  return {half: 0.5 / per, labels: ticks.map(t => t.textContent),
          lines: [...svg.querySelectorAll('polyline.curve')].map(p => p.getAttribute('points').trim().split(' ')
            .map(q => (+q.split(',')[0] - p0) / per + v0))};
}"""


def test_the_panel_s_step_axis_counts_steps_when_a_step_runs_two_forwards(tmp_path):
    """A Trainer with micro=2 runs two forwards a step and records its loss
    once a step, after the second: the panel's axis says "step", so its line
    runs over steps 0 to 39 as the notebook's progress draws it, not over
    the forwards 1, 3, … 79 the loss was said at (issue 19, item 4). The
    panel draws the x the server's chart gives; read off the page."""
    from somatize import Recorder, Store

    SIDEBAR_SHOTS.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "root"
    store = Store(root / "store")
    with Recorder(store, run="micro") as r:
        for step in range(40):
            for _ in range(2):  # micro=2: two forwards, one step
                r.forward_began()
                r({"fact": "ran", "node": "body", "began_us": 0, "took_us": 40})
                r({"fact": "finished", "took_us": 50})
            r({"fact": "loss", "value": 2.0 / (step + 1)})
    assert list(curve(store, "micro", "loss").index[:3]) == [1, 3, 5]  # said at these forwards
    want = progress(store, run="micro").chart()
    assert want["x"] == [0, 39] and want["xlabel"] == "step"
    with sidebar_page(root, tmp_path) as page:
        side = page.locator("#somatize-sidebar")
        side.locator("tr.smz-row[data-run='micro']").click()
        side.locator("button", has_text="Open").click()
        panel = page.locator(".somatize-runs-panel").last
        chart = panel.locator("svg.somatize-chart")
        chart.locator("polyline.curve").wait_for(timeout=30_000)
        assert chart.locator("text.axis").first.text_content() == "step"
        assert panel.locator(".smz-curves h3").text_content() == "loss by step"
        got = chart.evaluate(LINES_BY_X)
        every = [label for _, label in want["xticks"]]
        assert got["labels"] == every[::every.index(got["labels"][1])], (got["labels"], every)
        (line,) = got["lines"]
        assert len(line) == 40
        assert all(abs(x - step) <= got["half"] for step, x in enumerate(line)), line
        page.screenshot(path=SIDEBAR_SHOTS / "micro-steps-1400.png")
