"""The run browser's filter box takes a query (record/_where) in a real
JupyterLab in Chromium: the rows shown are the runs ``runs(store, where=)``
answers, a query that does not read shows the server's message pointing at
its place, and a part of a name still filters by name."""

from labtools import sidebar_page

from somatize import Recorder, Store
from somatize.record import runs

RUNS = {"lr-0.001": 0.001, "lr-0.01": 0.01, "lr-0.1": 0.1, "lr-1": 1.0}


def shown(side):
    return sorted(side.locator("tr.smz-row").evaluate_all("rows => rows.map(r => r.dataset.run)"))


def wait_shown(page, want):
    page.wait_for_function(
        "want => JSON.stringify([...document.querySelectorAll('#somatize-sidebar tr.smz-row')]"
        ".map(r => r.dataset.run).sort()) === JSON.stringify(want)", arg=sorted(want), timeout=30_000)


def test_the_filter_box_asks_the_server_a_query_and_shows_what_it_means(tmp_path):
    root = tmp_path / "root"
    store = Store(root / "sweep")
    for run, lr in RUNS.items():
        with Recorder(store, run=run, config={"lr": lr, "opt": "adam" if lr < 0.05 else "sgd"}) as r:
            for i in range(5):
                r.forward_began()
                r({"fact": "loss", "value": lr * 10 / (i + 1)})
    query = 'config.lr < 0.05 and loss.best < 0.05 or config.opt == "sgd" and not config.lr == 1'
    want = list(runs(store, where=query)["run"])
    assert sorted(want) == ["lr-0.001", "lr-0.01", "lr-0.1"]
    with sidebar_page(root, tmp_path) as page:
        side = page.locator("#somatize-sidebar")
        wait_shown(page, list(RUNS))
        box = side.locator("input.smz-filter")
        box.fill(query)
        wait_shown(page, want)
        assert side.get_attribute("data-problem") is None

        box.fill("config.lr < and")
        message = side.locator(".smz-message")
        message.wait_for(state="visible", timeout=30_000)
        text = message.text_content()
        assert side.get_attribute("data-problem") == "query"
        assert "character 12" in text and "expected" in text and "^" in text and shown(side) == []

        box.fill("0.0")  # a part of a name: matched in the page
        wait_shown(page, ["lr-0.001", "lr-0.01"])
        assert message.is_hidden()


def test_a_row_shows_nan_and_infinities_and_the_box_asks_by_the_one_rule(tmp_path):
    """The server sends NaN and the infinities as words (JSON has none); a
    row reads them as Python writes them, and min and best leave NaN out."""
    root = tmp_path / "root"
    store = Store(root / "s")
    for run, losses in {"up": [0.9, float("inf")], "nan": [0.9, float("nan")], "half": [float("nan"), 0.5]}.items():
        with Recorder(store, run=run) as r:
            for v in losses:
                r.forward_began()
                r({"fact": "loss", "value": v})
    with sidebar_page(root, tmp_path) as page:
        side = page.locator("#somatize-sidebar")
        wait_shown(page, ["half", "nan", "up"])
        cells = side.locator("tr.smz-row").evaluate_all(
            "rows => Object.fromEntries(rows.map(r => [r.dataset.run, "
            "r.querySelector('td[data-fact=loss]').textContent]))")
        assert cells == {"up": "inf / 0.9", "nan": "nan / 0.9", "half": "0.5 / 0.5"}  # last / best
        box = side.locator("input.smz-filter")
        for query, want in [("loss.last != 0.5", ["up"]), ("loss.last == null", []), ("loss.max == inf", ["up"]),
                            ("not loss.last == 0.5", ["nan", "up"])]:  # each a change of what is shown
            assert sorted(runs(store, where=query)["run"]) == want
            box.fill(query)
            wait_shown(page, want)
