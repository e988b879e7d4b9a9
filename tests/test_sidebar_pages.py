"""The run browser reads a store of more than one page of runs (1,000 a
page) sorted by a column that moves while the pages are read, in a real
JupyterLab in Debian's Chromium: each run is listed once. The pages were cut
by offset from the order of the moment each was asked, so a running run
whose loss took it from the second page to the first between the two
requests was never listed, and another was listed twice; now the second
page is asked with the first's ``listing`` and cut from its order. The move
is made by the test between the two requests (Playwright holds the second
one until it is made): no clock, no race."""

from labtools import ARTIFACTS, sidebar_page

from somatize import Recorder, Store

SHOTS = ARTIFACTS / "sidebar-pages"
RUNS = 1_000  # one whole page; the running run makes the second

ROWS_JS = ("s => [...document.querySelectorAll(`#somatize-sidebar section[data-store='${s}'] tr.smz-row`)]"
           ".map(r => r.dataset.run)")


def test_a_run_moving_between_two_pages_of_a_sorted_listing_is_listed_once(tmp_path):
    root = tmp_path / "root"
    store = Store(root / "sweep")
    for i in range(RUNS):
        with Recorder(store, run=f"r{i:04d}") as r:
            r.forward_began()
            r({"fact": "loss", "value": float(RUNS - i)})  # by loss, the reverse of by name
    live = Recorder(store, run="zz-live")  # last by its loss: alone on the second page
    live.forward_began()
    live({"fact": "loss", "value": 5_000.0})
    live.flush()
    moved = []

    def second_page(route):
        """The second page of the listing by loss.last, held until the running
        run's loss has taken it to the top of the order."""
        if not moved:
            live.forward_began()
            live({"fact": "loss", "value": -1.0})
            live.flush()
            moved.append(route.request.url)
        route.continue_()

    try:
        with sidebar_page(root, tmp_path) as page:
            side = page.locator("#somatize-sidebar")
            side.locator("tr.smz-row[data-run='zz-live']").wait_for(timeout=60_000)
            sid = side.locator("section:has(tr[data-run='zz-live'])").get_attribute("data-store")
            page.route(lambda url: "/somatize/stores/" in url and "offset=1000" in url and "sort=loss.last" in url,
                       second_page)
            side.locator("select.smz-sort-menu").select_option("loss.last")
            page.wait_for_function(f"s => ({ROWS_JS})(s)[0] === 'r{RUNS - 1:04d}'", arg=sid, timeout=60_000)
            rows = page.evaluate(ROWS_JS, sid)
            assert len(rows) == len(set(rows)) == RUNS + 1, rows[-3:]  # each run once: none twice, none missing
            assert moved and "listing=" in moved[0]  # the second page was asked in the first one's order
            by_loss = [f"r{i:04d}" for i in reversed(range(RUNS))]
            assert rows[-1] == "zz-live" and rows[:-1] == by_loss  # where it stood when the listing began
            # the next poll lists the order as it is now: the running run first
            page.wait_for_function(f"s => ({ROWS_JS})(s)[0] === 'zz-live'", arg=sid, timeout=60_000)
            rows = page.evaluate(ROWS_JS, sid)
            assert len(rows) == len(set(rows)) == RUNS + 1 and rows[1:] == by_loss
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "sorted-1400.png"))
    finally:
        live.close()
