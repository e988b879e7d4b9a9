"""The sidebar's poll under a large server root, medians, side by side.

    .venv/bin/python bench/bench_stores.py [--quick]

Each poll of the sidebar asks for the stores (``GET somatize/stores``) and
then each store's listing with its ETag (304 when unchanged). Until issue 19
every ask for the stores walked the whole root (``find_stores``), and an
unknown store id walked it again; now the walk is kept (``_discover.Walk``)
and rerun at most every ``Walk.gap()`` seconds. In one process, on
``_browse.Browser`` (no HTTP), for a small root (one store) and a root of
20,000 folders (the walk's cap) holding the same store:

1. one walk of the root (``find_stores``): what every poll paid before;
2. the poll, unchanged: ``stores()`` and the store's listing answered from
   its tag (the 304 path), the walk kept — target <= 5 ms at 20,000 folders,
   as with the small root;
3. a chart naming 20 unknown store ids: 20 walks before, none now.

Target: the poll under a root of 20,000 folders <= 5 ms.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from common import QUICK, machine, median_ms, reported, target

from somatize import Recorder, Store
from somatize._server._browse import Browser
from somatize._server._discover import MAX_FOLDERS, find_stores, store_id
from somatize._server._findings import _COUNTER
from somatize._server._public import NotFound

REPEAT = 5 if QUICK else 15
RUNS = 20  # runs in the store


def a_store(root: Path):
    store = Store(root / "store")
    for i in range(RUNS):
        with Recorder(store, run=f"run-{i:02d}") as r:
            for v in range(10):
                r.forward_began()
                r({"fact": "loss", "value": 1.0 / (v + 1)})


def large_root(root: Path):
    """The store, beside 198 folders of 100 folders each: 19,999 folders, the
    walk's cap (20,000) all but reached, the store still found (with
    ``--quick``, 20 folders of 100)."""
    a_store(root)
    for i in range(20 if QUICK else 198):
        for j in range(100):
            os.makedirs(root / f"project-{i:03d}" / f"folder-{j:03d}")


def poll(browser: Browser, sid: str, tag: str):
    browser.stores()
    page, again = browser.runs_tagged(sid, unless={tag})
    assert page is None and again == tag


def measure(root: Path) -> dict:
    browser = Browser(root)  # the real clock: the walk is kept 5 s at least, longer than the repeats take
    sid = store_id("store")
    assert [s["path"] for s in browser.stores()] == ["store"]
    _, tag = browser.runs_tagged(sid)
    _COUNTER.wait()
    _, tag = browser.runs_tagged(sid)
    walks = browser.walk.walks
    got = {"poll": median_ms(lambda: poll(browser, sid, tag), REPEAT * 10)}
    unknown = [(f"unknown-{i}", "run-00") for i in range(20)]

    def chart_of_unknowns():
        try:
            browser.chart("loss", unknown)
        except NotFound:
            return
        raise AssertionError("a chart of unknown stores answered")

    got["chart20"] = median_ms(chart_of_unknowns, REPEAT)
    got["walks"] = browser.walk.walks - walks
    got["gap"] = browser.walk.gap()
    got["walk"] = median_ms(lambda: find_stores(str(root)), REPEAT)  # last: it outlasts the walk kept
    return got


def main():
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        a_store(small)
        large_root(large)
        folders = sum(len(d) for _, d, _ in os.walk(large))
        s, big = measure(small), measure(large)
    print(f"roots: small (1 store), large ({folders:,} folders; the walk visits {MAX_FOLDERS:,}); {machine()}")
    print(f"{'':48} {'small':>10} {'large':>10} {'large/small':>12}")
    rows = [("one walk of the root (each poll paid it before)", "walk"),
            ("poll unchanged: stores + 304 listing (now)", "poll"),
            ("chart of 20 unknown store ids (now)", "chart20")]
    for label, key in rows:
        print(f"{label:48} {s[key]:>8.2f}ms {big[key]:>8.2f}ms {big[key] / s[key]:>11.1f}x")
    print(f"{'before: poll = a walk + the 304 listing':48} {s['walk'] + s['poll']:>8.2f}ms "
          f"{big['walk'] + big['poll']:>8.2f}ms")
    print(f"{'before: chart of 20 unknown ids = 20 walks':48} {20 * s['walk']:>8.2f}ms {20 * big['walk']:>8.2f}ms")
    print(f"walks made while measuring polls and charts: small {s['walks']}, large {big['walks']}; "
          f"the walk is kept {s['gap']:.1f} s (small), {big['gap']:.1f} s (large)")
    reported("the poll under the large root / under the small one", big["poll"] / s["poll"])
    target(f"the sidebar's poll (stores + a 304 listing) under {folders:,} folders", big["poll"], 5, "ms")


if __name__ == "__main__":
    main()
