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


def sweep(root, n):
    """A store of ``n`` finished runs ``r0000``…, their losses in the reverse order of their names."""
    store = Store(root / "sweep")
    for i in range(n):
        with Recorder(store, run=f"r{i:04d}") as r:
            r.forward_began()
            r({"fact": "loss", "value": float(RUNS - i)})
    return store


def opened(page, run, second_page):
    """The sidebar once it lists ``run``, and its store's id; each request for
    the second page of a listing by loss.last handed to ``second_page`` (a
    Playwright route handler)."""
    side = page.locator("#somatize-sidebar")
    side.locator(f"tr.smz-row[data-run='{run}']").wait_for(timeout=60_000)
    sid = side.locator(f"section:has(tr[data-run='{run}'])").get_attribute("data-store")
    page.route(lambda url: "/somatize/stores/" in url and "offset=1000" in url and "sort=loss.last" in url,
               second_page)
    return side, sid


def test_a_run_moving_between_two_pages_of_a_sorted_listing_is_listed_once(tmp_path):
    root = tmp_path / "root"
    store = sweep(root, RUNS)
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
            side, sid = opened(page, "zz-live", second_page)
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


def test_a_listing_the_server_no_longer_keeps_is_read_again_and_then_without_tokens(tmp_path):
    """A later page asked with a token the server no longer keeps answers
    410: the sidebar reads the listing again from its first page; after
    three such, page by page with no token. Each way it lists every run
    once. (The 410s are the server's words, made here by Playwright in place
    of the server's answer to the second page.)"""
    root = tmp_path / "root"
    sweep(root, RUNS + 1)
    gone = {"left": 0, "asked": []}

    def second_page(route):
        url = route.request.url
        gone["asked"].append("listing=" in url)
        if gone["left"] and "listing=" in url:
            gone["left"] -= 1
            route.fulfill(status=410, content_type="application/json",
                          body='{"message": "the listing is no longer kept: read its first page again"}')
        else:
            route.continue_()

    with sidebar_page(root, tmp_path) as page:
        side, sid = opened(page, "r1000", second_page)
        by_loss = [f"r{i:04d}" for i in reversed(range(RUNS + 1))]
        for left, tokens in ((1, [True, True]), (3, [True, True, True, False])):
            gone["left"], gone["asked"] = left, []
            side.locator("select.smz-sort-menu").select_option("run")
            page.wait_for_function(f"s => ({ROWS_JS})(s)[0] === 'r0000'", arg=sid, timeout=60_000)
            side.locator("select.smz-sort-menu").select_option("loss.last")
            page.wait_for_function(f"s => ({ROWS_JS})(s)[0] === 'r1000'", arg=sid, timeout=60_000)
            assert page.evaluate(ROWS_JS, sid) == by_loss  # every run once, in order
            # one 410: asked again with a token; three: the fourth time with none
            assert gone["asked"][: len(tokens)] == tokens and gone["left"] == 0
            assert side.get_attribute("data-problem") is None  # no "Could not read the stores"
