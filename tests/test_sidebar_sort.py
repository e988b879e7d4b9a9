"""The run browser sorts by any column and opens its runs in a notebook, in
a real JupyterLab in Debian's Chromium: picking a column in the sort menu,
turning the order round and clicking a header reorder the rows as the server
sorts them, read off the page and checked against ``runs(store)`` sorted by
hand in pandas; a column the table lacks gets a column of its own, inside
the panel at 1400 and 800 px; a store none of whose runs has the column is
listed by name and says so. "Explore in notebook" inserts
``compare(store, where=..., metric=...)``: the cell's text, read off the
page, names the store relative to the notebook's folder, the filter (quotes,
backslashes and all) as a Python literal meaning the same string, and the
sort's column as the metric; run in the notebook's kernel, the explorer
shows the runs the filter lists. Screenshots at 1400 and 800 px, light and
dark, go to test-artifacts/sidebar-sort/."""

import ast

import nbformat
from labtools import ARTIFACTS, CHROMIUM, FLAGS, accept_kernel_dialog, open_sidebar, running_lab, shoot, theme

from somatize import Recorder, Store
from somatize.record import runs

SHOTS = ARTIFACTS / "sidebar-sort"
NOTE = 'say "hi" \\ it\'s'  # a config value the filter asks for: quotes, a backslash, an apostrophe
# run -> (lr, opt, losses); loss.best ties for c and f (stable: by name)
SWEEP = {
    "a": (0.1, "sgd", [2.0, 0.9]),
    "b": (0.001, "adam", [1.5, 0.2]),
    "c": (0.03, "adam", [1.0, 0.5]),
    "d": (0.3, "sgd", [3.0, 1.4]),
    "e": (0.003, "adam", [0.8, 0.1]),
    "f": (0.01, "sgd", [0.7, 0.5]),
    "g": (1.0, "sgd", [4.0, 2.5]),
}
QUERY = 'config.note == "say \\"hi\\" \\\\ it\'s" or config.lr < 0.01'


def make(root):
    store = Store(root / "sweep")
    for run, (lr, opt, losses) in SWEEP.items():
        config = {"lr": lr, "opt": opt, **({"note": NOTE} if run == "d" else {})}
        with Recorder(store, run=run, config=config) as r:
            for v in losses:
                r.forward_began()
                r({"fact": "loss", "value": v})
    for run in ("x", "y"):  # a store with no config: sorted by a config key it cannot be
        with Recorder(Store(root / "plain"), run=run) as r:
            r.forward_began()
            r({"fact": "loss", "value": 1.0})
    (root / "notes").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell("The sweep, from the sidebar"))
    nbformat.write(nb, root / "notes" / "explore.ipynb")
    return store


def by_hand(store, column, descending, where=None):
    table = runs(store, where=where).sort_values("run", kind="stable")
    return list(table.sort_values(column, ascending=not descending, na_position="last", kind="stable")["run"])


ORDER_JS = ("s => [...document.querySelectorAll(`#somatize-sidebar section[data-store='${s}'] tr.smz-row`)]"
            ".map(r => r.dataset.run)")


def wait_order(page, sid, want):
    page.wait_for_function(f"([s, want]) => JSON.stringify(({ORDER_JS})(s)) === JSON.stringify(want)",
                           arg=[sid, want], timeout=30_000)


# every shown cell and control inside the sidebar's box, no table scrolling sideways
INSIDE_JS = r"""() => {
  const side = document.querySelector('#somatize-sidebar');
  const box = side.getBoundingClientRect();
  const shown = e => getComputedStyle(e).display !== 'none' && e.getBoundingClientRect().width > 0;
  const outside = [...side.querySelectorAll('th, td, .smz-order *, .smz-actions button')].filter(shown)
    .filter(e => { const r = e.getBoundingClientRect(); return r.left < box.left - 0.5 || r.right > box.right + 0.5; })
    .map(e => `${e.tagName} ${e.dataset.col ?? e.className}`);
  const sideways = [...side.querySelectorAll('.smz-table-wrap')].filter(w => w.scrollWidth > w.clientWidth).length;
  const sorted = [...side.querySelectorAll("section td[data-col='sorted']")].filter(shown).length;
  return {outside, sideways, sorted, layout: side.dataset.layout};
}"""


def cell_text(cell):
    return cell.evaluate("c => [...c.querySelectorAll('.cm-line')].map(l => l.textContent).join('\\n')")


def test_the_sidebar_sorts_by_any_column_and_opens_the_runs_in_a_notebook(tmp_path):
    from playwright.sync_api import sync_playwright

    root = tmp_path / "root"
    store = make(root)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with running_lab(root, tmp_path) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            open_sidebar(page, url, "lab/tree/notes/explore.ipynb")
            accept_kernel_dialog(page)
            side = page.locator("#somatize-sidebar")
            side.locator("tr.smz-row[data-run='g']").wait_for(timeout=30_000)
            sid = side.locator("section:has(tr[data-run='g'])").get_attribute("data-store")
            plain = side.locator("section:has(tr[data-run='x'])").get_attribute("data-store")
            wait_order(page, sid, sorted(SWEEP))

            # the menu lists the fixed columns, each fact's summaries, each config key
            menu = side.locator("select.smz-sort-menu")
            options = menu.locator("option").evaluate_all("os => os.map(o => o.value)")
            assert {"run", "state", "steps", "age", "loss.last", "loss.best", "loss.min", "loss.max",
                    "config.lr", "config.opt", "config.note"} <= set(options), options

            # a summary from the menu: the server's order, its column shown after the steps
            menu.select_option("loss.best")
            want = by_hand(store, "loss.best", False)
            assert want[:4] == ["e", "b", "c", "f"]  # c and f tie: by name
            wait_order(page, sid, want)
            ours = side.locator(f"section[data-store='{sid}']")
            assert ours.locator("th[data-col='sorted']").get_attribute("aria-sort") == "ascending"
            values = ours.locator("td[data-col='sorted']").all_text_contents()
            assert values == ["0.1", "0.2", "0.5", "0.5", "0.9", "1.4", "2.5"], values

            # turned round; then a config key; then a header
            side.locator("button.smz-sort-dir").click()
            wait_order(page, sid, by_hand(store, "loss.best", True))
            assert ours.locator("th[data-col='sorted']").get_attribute("aria-sort") == "descending"
            menu.select_option("config.lr")  # a new column starts ascending
            wait_order(page, sid, by_hand(store, "config.lr", False))
            # the store whose runs have no config is listed by name, and says why
            note = side.locator(f"section[data-store='{plain}'] .smz-note")
            note.wait_for(timeout=30_000)
            assert "config.lr" in note.text_content()
            wait_order(page, plain, ["x", "y"])
            ours.locator("th[data-col='run'] button").click()
            wait_order(page, sid, sorted(SWEEP))
            ours.locator("th[data-col='run'] button").click()
            wait_order(page, sid, sorted(SWEEP, reverse=True))
            assert ours.locator("th[data-col='run']").get_attribute("aria-sort") == "descending"
            assert menu.input_value() == "run" and side.get_attribute("data-sort") == "run desc"

            # at both widths, the sorted column stays, inside the panel
            menu.select_option("loss.best")
            wait_order(page, sid, by_hand(store, "loss.best", False))
            for width in (1400, 800):
                page.set_viewport_size({"width": width, "height": 900})
                page.wait_for_function(f"() => ({INSIDE_JS})().outside.length === 0", timeout=30_000)
                got = page.evaluate(INSIDE_JS)
                # the sweep's runs and plain's two
                assert got["outside"] == [] and got["sideways"] == 0 and got["sorted"] == len(SWEEP) + 2, got

            # a filter with quotes and a backslash, sorted: what "Explore in notebook" opens
            side.locator("input.smz-filter").fill(QUERY)
            listed = by_hand(store, "loss.best", False, where=QUERY)
            assert listed == ["e", "b", "d"]  # d: by its note
            wait_order(page, sid, listed)
            side.locator("section[data-store] .smz-empty").first.wait_for(timeout=30_000)  # plain: none match
            page.set_viewport_size({"width": 1400, "height": 900})
            theme(page, "JupyterLab Light", True)
            shoot(page, SHOTS / "light")
            theme(page, "JupyterLab Dark", False)
            shoot(page, SHOTS / "dark")
            page.set_viewport_size({"width": 1400, "height": 900})

            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
            explore = side.locator("button.smz-explore")
            assert explore.is_enabled()
            explore.click()
            cell = page.locator(".jp-Notebook .jp-CodeCell", has_text="compare(store")
            cell.wait_for(timeout=30_000)
            code = cell_text(cell)
            tree = ast.parse(code)  # valid Python
            call = tree.body[-1].value
            assert isinstance(call, ast.Call) and call.func.id == "compare", code
            given = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            assert given == {"where": QUERY, "metric": "loss.best"}, code
            assigned = {t.targets[0].id: ast.literal_eval(t.value) for t in tree.body if isinstance(t, ast.Assign)}
            assert assigned == {"store": "../sweep"}, code  # relative to notes/, where the notebook is
            assert list(runs(root / "notes" / assigned["store"], where=given["where"])["run"]) == sorted(listed)

            # run in the notebook's kernel: the explorer of the same runs
            cell.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Shift+Enter")
            head = cell.locator(".somatize-explorer-head")
            head.wait_for(timeout=120_000)
            assert head.text_content().startswith(f"{len(listed)} runs by loss.best"), head.text_content()
            errors = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            assert errors.count() == 0
            page.screenshot(path=SHOTS / "explorer-1400.png")

            # a part of a name: the explorer of the runs listed, by name
            side.locator("input.smz-filter").fill("d")
            wait_order(page, sid, ["d"])
            page.wait_for_function("() => !document.querySelector('#somatize-sidebar button.smz-explore').disabled")
            explore.click()
            cell = page.locator(".jp-Notebook .jp-CodeCell", has_text="run in [")
            cell.wait_for(timeout=30_000)
            call = ast.parse(cell_text(cell)).body[-1].value
            given = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            assert given == {"where": 'run in ["d"]', "metric": "loss.best"}, given
            assert list(runs(store, where=given["where"])["run"]) == ["d"]
        finally:
            page.screenshot(path=SHOTS / "page.png")
            browser.close()
