"""The run browser's server extension through real HTTP (pytest-jupyter's
``jp_fetch``): its routes, and the security battery.

The layout under the server's root holds a store with runs (one damaged on
purpose), and, planted around it, what a hostile neighbour could make: a
store that is a symlink out of the root, a run folder that is a symlink out,
a sibling folder whose name shares the root's prefix. Everything outside the
root is named ``OUTSIDE-…``; an audit hook records every ``open``/listing of
such a path while the battery runs, and none may happen.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import urllib.parse
from pathlib import Path

import numpy as np
import orjson
import pytest
from forked import ended
from jupyter_server.auth import Authorizer
from labtools import LIVE_CHILD
from tornado.httpclient import HTTPClientError

from somatize import Recorder, SomatizeError, Store
from somatize._pictures import _chart
from somatize._server._discover import store_id
from somatize._server._findings import _COUNTER
from somatize._server._handlers import ROUTES
from somatize.record import curve

pytest_plugins = ("pytest_jupyter.jupyter_server",)

ROOT = Path(__file__).resolve().parents[1]
GUARD_S = 60  # a guard against a hang, not a measurement

# ---- the audit hook: installed once, recording only while a battery runs ------------
_WATCHING: list | None = None
_OPENED: list | None = None  # every file opened, while a test wants to know
_OUTSIDE: list[str] = []
WATCHED = {"open", "os.listdir", "os.scandir", "os.remove", "os.rmdir", "os.rename"}


def _hook(event, args):
    if _OPENED is not None and event == "open" and args and isinstance(args[0], (str, bytes)):
        _OPENED.append(os.fsdecode(args[0]))
    if _WATCHING is None or event not in WATCHED or not args:
        return
    path = args[0]
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return
    if os.path.isabs(path):
        flags = args[2] if event == "open" and len(args) > 2 and isinstance(args[2], int) else 0
        if flags & os.O_NOFOLLOW:  # the last part is not followed: it stays where it is
            path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        else:
            path = os.path.realpath(path)
    # a name opened relative to a folder descriptor carries only its own name:
    # everything outside the root is named OUTSIDE-…, a name the root never holds
    if "OUTSIDE" in path or any(path.startswith(o + os.sep) for o in _OUTSIDE):
        _WATCHING.append(f"{event} {args[0]}")


sys.addaudithook(_hook)


def record(store, run, losses, **extra):
    with Recorder(store, run=run) as r:
        for v in losses:
            r.forward_began()
            r({"fact": "ran", "node": "body", "began_us": 0, "took_us": 30})
            r({"fact": "ran", "node": "head", "began_us": 30, "took_us": 10})
            r({"fact": "finished", "took_us": 45})
            r({"fact": "loss", "value": float(v)})


@pytest.fixture
def layout(jp_root_dir, tmp_path):
    root = Path(jp_root_dir)
    store = Store(root / "proj" / "store")
    record(store, "alpha", np.linspace(2, 1, 50))
    record(store, "beta", np.linspace(3, 0.5, 80))
    record(store, "broken", [1.0, 0.5])
    (root / "proj" / "store" / "runs" / "broken" / "summary.json").write_bytes(b"{garbage")
    # outside the root
    outside = tmp_path / "OUTSIDE-store"
    record(Store(outside), "OUTSIDE-run", [9.0, 8.0])
    sibling = Path(str(root) + "-OUTSIDE")  # shares the root's prefix
    record(Store(sibling / "store"), "OUTSIDE-sibling", [7.0])
    os.symlink(outside, root / "link-store")
    os.symlink(outside / "runs" / "OUTSIDE-run", root / "proj" / "store" / "runs" / "linked")
    # noise the walk must skip
    record(Store(root / ".hidden" / "store"), "hidden-run", [1.0])
    record(Store(root / "node_modules" / "store"), "nm-run", [1.0])
    global _OUTSIDE
    _OUTSIDE = [str(outside), str(sibling)]
    return {"root": root, "store": root / "proj" / "store", "outside": outside, "sibling": sibling}


class Clock:
    """The clock the server's walk of the stores is kept by (seconds), moved by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def __deepcopy__(self, memo):  # the server's config is copied on its way: one clock stays one
        return self


CLOCK = Clock()


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"somatize._server": True},
                          "tornado_settings": {"somatize_clock": CLOCK}}}


async def get(jp_fetch, *parts, **params):
    r = await jp_fetch("somatize", *parts, params=params)
    return orjson.loads(r.body)


async def the_store(jp_fetch):
    stores = (await get(jp_fetch, "stores"))["stores"]
    return next(s for s in stores if s["path"] == "proj/store")["id"]


# ---- routes ------------------------------------------------------------------------------


async def test_stores_found_under_the_root_only_real_folders_hidden_and_node_modules_skipped(jp_fetch, layout):
    got = await get(jp_fetch, "stores")
    assert [s["path"] for s in got["stores"]] == ["proj/store"]
    assert got["stores"][0]["runs"] == 3  # alpha, beta, broken; "linked" is a symlink, not listed


async def test_a_new_store_appears_without_a_restart_once_the_walk_is_due(jp_fetch, layout):
    """Issue 19, item 5: the walk of the root is kept AGAIN_S seconds (by the
    server's clock, moved here by hand); a store made since, and its id, are
    found by the next walk, not before, and an unknown id starts none."""
    from somatize._server._discover import AGAIN_S

    await get(jp_fetch, "stores")
    record(Store(layout["root"] / "later"), "x", [1.0])
    assert "later" not in [s["path"] for s in (await get(jp_fetch, "stores"))["stores"]]
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", store_id("later"), "runs")
    assert e.value.code == 404
    CLOCK.now += AGAIN_S
    assert "later" in [s["path"] for s in (await get(jp_fetch, "stores"))["stores"]]
    rows = (await get(jp_fetch, "stores", store_id("later"), "runs"))["runs"]
    assert [r["run"] for r in rows] == ["x"]
    # a store removed is no longer listed, before the next walk too
    shutil.rmtree(layout["root"] / "later")
    assert "later" not in [s["path"] for s in (await get(jp_fetch, "stores"))["stores"]]


def test_the_walk_of_the_root_is_kept_and_unknown_ids_start_no_walk(tmp_path):
    """Issue 19, item 5: polls, listings and unknown store ids (20 in one
    chart) answer from the kept walk; the walk reruns once it is AGAIN_S old."""
    from somatize._server._browse import Browser
    from somatize._server._discover import AGAIN_S
    from somatize._server._public import NotFound

    record(Store(tmp_path / "a"), "r", [1.0])
    clock = Clock()
    browser = Browser(tmp_path, clock=clock)
    for _ in range(10):
        assert [s["path"] for s in browser.stores()] == ["a"]
        browser.runs(store_id("a"))
    assert browser.walk.walks == 1
    record(Store(tmp_path / "b"), "r", [1.0])
    with pytest.raises(NotFound, match="no store 'nope-0' under the server's root"):
        browser.chart("loss", [(f"nope-{i}", "r") for i in range(20)])
    with pytest.raises(NotFound):
        browser.runs(store_id("b"))
    clock.now += AGAIN_S - 0.001
    assert [s["path"] for s in browser.stores()] == ["a"] and browser.walk.walks == 1
    clock.now += 0.001
    assert [r["run"] for r in browser.runs(store_id("b"))["runs"]] == ["r"] and browser.walk.walks == 2
    assert [s["path"] for s in browser.stores()] == ["a", "b"] and browser.walk.walks == 2


def test_a_long_walk_is_kept_longer(tmp_path):
    """A walk that took 1 s (by the clock given: it ticks 1 s a reading) is
    kept 1 / SHARE = 20 s, so walking takes at most SHARE of the time."""
    from somatize._server._discover import SHARE, Walk

    class Ticking(Clock):
        def __call__(self):
            self.now += 1.0
            return self.now

    record(Store(tmp_path / "a"), "r", [1.0])
    walk = Walk(str(tmp_path), Ticking())
    assert walk.stores() == {store_id("a"): "a"} and walk.walks == 1
    assert walk.gap() == pytest.approx(1.0 / SHARE) == 20.0
    for _ in range(18):  # each asking reads the clock once: 1 s
        walk.stores()
    assert walk.walks == 1
    walk.stores()
    walk.stores()
    assert walk.walks == 2


async def test_runs_listed_with_state_steps_times_and_summaries(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    got = await get(jp_fetch, "stores", sid, "runs")
    rows = {r["run"]: r for r in got["runs"]}
    assert sorted(rows) == ["alpha", "beta", "broken"] and got["total"] == 3 and got["next"] is None
    beta = rows["beta"]
    assert beta["state"] == "finished" and beta["steps"] == 80 and beta["forwards"] == 80
    loss = beta["summarising"]["loss"]
    assert loss["last"] == pytest.approx(0.5) and loss["min"] == pytest.approx(0.5)
    assert beta["duration"] >= 0 and beta["started"] > 0 and "loss" in beta["curves"]


async def test_a_damaged_run_lists_marked_damaged_with_what_check_says(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    r = await jp_fetch("somatize", "stores", sid, "runs")
    broken = next(x for x in orjson.loads(r.body)["runs"] if x["run"] == "broken")
    assert broken["state"] == "damaged" and "summary.json" in broken["problem"]
    assert broken["check"] and all("summary.json" in c for c in broken["check"])
    assert str(layout["root"]) not in r.body.decode()


async def test_a_listing_pages_beyond_its_limit_and_filters_by_name(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    first = await get(jp_fetch, "stores", sid, "runs", limit="2")
    assert [r["run"] for r in first["runs"]] == ["alpha", "beta"] and first["next"] == 2
    rest = await get(jp_fetch, "stores", sid, "runs", offset="2", limit="2")
    assert [r["run"] for r in rest["runs"]] == ["broken"] and rest["next"] is None
    assert [r["run"] for r in (await get(jp_fetch, "stores", sid, "runs", match="ET"))["runs"]] == ["beta"]


async def test_a_listing_of_no_rows_is_refused_as_a_client_following_next_would_never_end(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    with pytest.raises(HTTPClientError) as e:  # limit=0 answered next == offset: the same page for ever
        await get(jp_fetch, "stores", sid, "runs", limit="0")
    assert e.value.code == 400 and orjson.loads(e.value.response.body)["message"] == "limit must be between 1 and 1000"


async def test_a_listing_answers_304_to_its_etag_until_something_changes(jp_fetch, layout):
    from somatize._server._findings import _COUNTER

    sid = await the_store(jp_fetch)
    await jp_fetch("somatize", "stores", sid, "runs")
    _COUNTER.wait()  # a findings count landing changes the page too (tested below)
    r = await jp_fetch("somatize", "stores", sid, "runs")
    etag = r.headers["Etag"]
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", headers={"If-None-Match": etag})
    assert e.value.code == 304
    record(Store(layout["store"]), "gamma", [1.0])
    again = await jp_fetch("somatize", "stores", sid, "runs", headers={"If-None-Match": etag})
    assert again.code == 200 and "gamma" in again.body.decode()


# ---- a listing's tag: an unchanged poll is cheap, a changed listing is never a 304 -------



def stepper(store):
    child = subprocess.Popen([sys.executable, "-c", LIVE_CHILD, str(store)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    step(child, 3)
    return child


def step(child, n):
    child.stdin.write(f"{n}\n")
    child.stdin.flush()
    return int(child.stdout.readline())


async def settled_tag(jp_fetch, sid):
    """The listing's tag once every count of findings it asked for has landed."""
    await jp_fetch("somatize", "stores", sid, "runs")
    _COUNTER.wait()
    return (await jp_fetch("somatize", "stores", sid, "runs")).headers["Etag"]


async def poll(jp_fetch, sid, etag):
    """The rows a poll sending ``etag`` gets: None for a 304."""
    try:
        r = await jp_fetch("somatize", "stores", sid, "runs", headers={"If-None-Match": etag})
    except HTTPClientError as e:
        assert e.code == 304
        return None
    return {row["run"]: row for row in orjson.loads(r.body)["runs"]}


async def test_an_unchanged_poll_reads_no_summary_even_while_a_run_is_going(jp_fetch, layout):
    """The 304 is made from one stat per run and the rows kept: no summary
    is read, not even the running run's (its lock is asked instead)."""
    global _OPENED
    child = stepper(layout["store"])
    try:
        sid = await the_store(jp_fetch)
        etag = await settled_tag(jp_fetch, sid)
        _OPENED = []
        try:
            got = await poll(jp_fetch, sid, etag)
            opened = list(_OPENED)
        finally:
            _OPENED = None
        assert got is None
        assert not [p for p in opened if p.endswith("summary.json")], opened
        # still running? asked, not assumed: its lock opened (from the store down, folder by folder)
        assert any(a == "live" and b == "lock" for a, b in zip(opened, opened[1:])), opened
    finally:
        child.communicate("", timeout=GUARD_S)


async def test_a_running_runs_steps_rising_and_its_process_dying_each_change_the_tag(jp_fetch, layout):
    child = stepper(layout["store"])
    try:
        sid = await the_store(jp_fetch)
        etag = await settled_tag(jp_fetch, sid)
        assert step(child, 5) == 8
        rows = await poll(jp_fetch, sid, etag)
        assert rows is not None and rows["live"]["steps"] == 8 and rows["live"]["state"] == "running"
        etag = await settled_tag(jp_fetch, sid)
        assert await poll(jp_fetch, sid, etag) is None
        child.send_signal(signal.SIGKILL)  # its lock goes with it; no file changes
        child.wait(GUARD_S)
        rows = await poll(jp_fetch, sid, etag)
        assert rows is not None and rows["live"]["state"] == "interrupted"
    finally:
        child.kill()
        child.communicate(timeout=GUARD_S)


async def test_a_run_deleted_by_the_route_or_from_outside_changes_the_tag(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    etag = await settled_tag(jp_fetch, sid)
    await jp_fetch("somatize", "stores", sid, "runs", "alpha", method="DELETE")
    rows = await poll(jp_fetch, sid, etag)
    assert rows is not None and sorted(rows) == ["beta", "broken"]
    etag = await settled_tag(jp_fetch, sid)
    shutil.rmtree(layout["store"] / "runs" / "beta")
    rows = await poll(jp_fetch, sid, etag)
    assert rows is not None and sorted(rows) == ["broken"]


async def test_a_run_damaged_in_place_changes_the_tag(jp_fetch, layout):
    """Cut short where it lies (same file, fewer bytes), as a torn copy leaves it."""
    sid = await the_store(jp_fetch)
    etag = await settled_tag(jp_fetch, sid)
    summary = layout["store"] / "runs" / "alpha" / "summary.json"
    with open(summary, "r+b") as f:
        f.truncate(summary.stat().st_size // 2)
    rows = await poll(jp_fetch, sid, etag)
    assert rows is not None and rows["alpha"]["state"] == "damaged" and "summary.json" in rows["alpha"]["problem"]


async def test_a_log_cut_in_place_lists_damaged_once_a_query_finds_it(jp_fetch, layout):
    """A log cut short after the listing read its summary changes no summary.json,
    so no tag: the first query that reads the log finds the damage (422, naming
    facts.log), and from then on the listing shows the run damaged. A store the
    server has not listed yet shows it damaged at once (test_record_disk)."""
    sid = await the_store(jp_fetch)
    etag = await settled_tag(jp_fetch, sid)
    log = layout["store"] / "runs" / "alpha" / "facts.log"
    os.truncate(log, log.stat().st_size // 2)
    with pytest.raises(HTTPClientError) as refused:
        await get(jp_fetch, "stores", sid, "runs", "alpha", "facts", forward="3")
    assert refused.value.code == 422 and "facts.log" in orjson.loads(refused.value.response.body)["message"]
    rows = await poll(jp_fetch, sid, etag)
    assert rows is not None and rows["alpha"]["state"] == "damaged" and "facts.log" in rows["alpha"]["problem"]
    assert rows["beta"]["state"] == "finished"


async def test_a_run_whose_facts_come_before_its_summary_changes_the_tag(jp_fetch, layout):
    """A run folder with nothing in it is not listed; once it holds facts and
    still no summary.json it lists as damaged, and a poll must see that
    although no summary.json changed."""
    (layout["store"] / "runs" / "early").mkdir()
    sid = await the_store(jp_fetch)
    etag = await settled_tag(jp_fetch, sid)
    assert await poll(jp_fetch, sid, etag) is None
    (layout["store"] / "runs" / "early" / "facts.log").write_bytes(b"\0" * 64)
    rows = await poll(jp_fetch, sid, etag)
    assert rows is not None and rows["early"]["state"] == "damaged" and "no summary.json" in rows["early"]["problem"]


async def test_a_run_that_is_gone_leaves_no_count_of_findings_behind(jp_fetch, layout):
    """Deleted through the route, removed from outside, or deleted while its
    count waits in the queue: the count (or its job) goes with the run."""
    folder = os.path.realpath(layout["store"])
    sid = await the_store(jp_fetch)
    await settled_tag(jp_fetch, sid)
    assert {"alpha", "beta"} <= _COUNTER.counted(folder)
    await jp_fetch("somatize", "stores", sid, "runs", "alpha", method="DELETE")
    assert "alpha" not in _COUNTER.counted(folder)
    shutil.rmtree(layout["store"] / "runs" / "beta")
    await get(jp_fetch, "stores", sid, "runs")
    assert "beta" not in _COUNTER.counted(folder)
    record(Store(layout["store"]), "gamma", [1.0])
    record(Store(layout["store"]), "delta", [1.0])
    with _COUNTER.listing():  # no count starts while it is held: gamma's and delta's wait in the queue
        await get(jp_fetch, "stores", sid, "runs")
        await jp_fetch("somatize", "stores", sid, "runs", "gamma", method="DELETE")
        shutil.rmtree(layout["store"] / "runs" / "delta")
    _COUNTER.wait()
    assert not {"alpha", "beta", "gamma", "delta"} & _COUNTER.counted(folder)
    shutil.rmtree(layout["store"])  # the whole store
    await get(jp_fetch, "stores")
    assert _COUNTER.counted(folder) == set()


@pytest.mark.parametrize("view", ["", "curve", "nodes", "facts", "findings"])
async def test_an_empty_run_folder_is_no_run_listed_counted_or_served(jp_fetch, layout, view):
    """Issue 19, item 2: a folder under runs/ with nothing recorded in it (a
    run being made, or none) made the run route answer 500, the listing say
    total 4 over 3 rows, and findings suggest the name asked for."""
    (layout["store"] / "runs" / "empty").mkdir()
    sid = await the_store(jp_fetch)
    assert next(s for s in (await get(jp_fetch, "stores"))["stores"] if s["id"] == sid)["runs"] == 3
    listing = await get(jp_fetch, "stores", sid, "runs")
    assert [r["run"] for r in listing["runs"]] == ["alpha", "beta", "broken"] and listing["total"] == 3
    assert (await get(jp_fetch, "stores", sid, "runs", match="empty"))["total"] == 0
    page = await get(jp_fetch, "stores", sid, "runs", offset="2", limit="1")
    assert [r["run"] for r in page["runs"]] == ["broken"] and page["total"] == 3 and page["next"] is None
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", "empty", *([view] if view else []))
    assert e.value.code == 404
    message = orjson.loads(e.value.response.body)["message"]
    assert message.startswith("no run 'empty' in this store: its folder holds nothing recorded"), message
    assert "did you mean" not in message
    got = await chart(jp_fetch, "loss", f"{sid}/alpha", f"{sid}/empty")
    assert [len(x["points"]) for x in got["series"]] == [50, 0]
    assert got["runs"][1]["missing"].startswith("no run 'empty' in this store")


def test_a_folder_lists_once_it_holds_a_run_and_not_once_emptied_by_hand(tmp_path):
    """The listing keeps which folders hold a run (so an unchanged poll of
    10,000 runs stats only its page): a folder filled later lists, one
    emptied by hand stops listing once a page holding it is asked, and the
    total follows."""
    from somatize._server._browse import Browser

    store = Store(tmp_path / "store")
    record(store, "alpha", [1.0])
    record(store, "beta", [2.0])
    (store.path / "runs" / "later").mkdir()
    browser = Browser(tmp_path)
    sid = store_id("store")
    listed = browser.runs(sid)
    assert [r["run"] for r in listed["runs"]] == ["alpha", "beta"] and listed["total"] == 2
    shutil.copy(store.path / "runs" / "alpha" / "summary.json", store.path / "runs" / "later" / "summary.json")
    listed = browser.runs(sid)
    assert [r["run"] for r in listed["runs"]] == ["alpha", "beta", "later"] and listed["total"] == 3
    assert browser.run(sid, "later")["run"] == "later"
    for f in (store.path / "runs" / "beta").iterdir():
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    # off the page, a run emptied by hand is not looked into again (one stat a run a poll saved): it counts
    listed = browser.runs(sid, limit=1)
    assert [r["run"] for r in listed["runs"]] == ["alpha"] and listed["total"] == 3
    # on the page, it is found emptied: not listed, no longer counted
    listed = browser.runs(sid, offset=1, limit=1)
    assert [r["run"] for r in listed["runs"]] == [] and listed["total"] == 2
    listed = browser.runs(sid)
    assert [r["run"] for r in listed["runs"]] == ["alpha", "later"] and listed["total"] == 2


def test_the_record_says_an_empty_run_folder_holds_nothing_and_suggests_no_run_that_is_none(tmp_path):
    """The record layer's readers (what the findings route used to answer
    with): no "did you mean 'empty'?", no 'empty' among the runs there."""
    from somatize import SomatizeKeyError, diagnose

    store = Store(tmp_path / "store")
    record(store, "empty-ish", [1.0])
    (store.path / "runs" / "empty").mkdir()
    (store.path / "runs" / "emptz").mkdir()
    with pytest.raises(SomatizeKeyError) as e:
        diagnose(store, run="empty")
    text = str(e.value)
    assert "no run 'empty'" in text and "its folder holds nothing recorded (no summary.json, no facts.log)" in text
    assert "did you mean 'empty-ish'?" in text and "runs there: 'empty-ish'" in text and "'emptz'" not in text
    with pytest.raises(SomatizeKeyError, match="runs there: 'empty-ish'$"):
        curve(store, "nothing-here", "loss")


async def test_a_curve_is_cut_to_2000_points_keeping_the_exact_extremes(jp_fetch, layout):
    rng = np.random.default_rng(1)
    values = rng.normal(size=30_000).cumsum()
    record(Store(layout["store"]), "long", values)
    sid = await the_store(jp_fetch)
    got = await get(jp_fetch, "stores", sid, "runs", "long", "curve", name="loss")
    assert got["points"] == 30_000 and len(got["value"]) <= 2_000
    assert got["min"] == values.min() and got["max"] == values.max()
    assert min(got["value"]) == values.min() and max(got["value"]) == values.max()
    assert got["forward"] == sorted(got["forward"])
    assert got["forward"][0] == 0 and got["forward"][-1] == 29_999  # the x range a chart of it spans
    # each point served is the run's own point
    served = curve(layout["store"], "long", "loss")
    assert [served[f] for f in got["forward"][:50]] == got["value"][:50]


async def chart(jp_fetch, name, *runs):
    r = await jp_fetch("somatize", "chart", params=[("name", name)] + [("run", run) for run in runs])
    return orjson.loads(r.body)


async def test_a_chart_overlays_runs_of_two_stores_as_the_notebook_panels_chart_them(jp_fetch, layout):
    record(Store(layout["root"] / "elsewhere" / "store"), "gamma", np.geomspace(100, 0.01, 60))  # four decades
    ids = {s["path"]: s["id"] for s in (await get(jp_fetch, "stores"))["stores"]}
    mine, theirs = ids["proj/store"], ids["elsewhere/store"]
    got = await chart(jp_fetch, "loss", f"{mine}/beta", f"{theirs}/gamma", f"{mine}/alpha")
    # the oracle: the panels' one chart of the same curves, from the record
    series = [{"name": run, "color": "", "points": list(curve(store, run, "loss").items())}
              for store, run in ((layout["store"], "beta"), (layout["root"] / "elsewhere" / "store", "gamma"),
                                 (layout["store"], "alpha"))]
    want = _chart.chart(series, ylabel="loss", xlabel="step")
    assert got["log"] is want["log"] is True  # 100 down to 0.01 spans decades
    assert got["yticks"] == want["yticks"] and got["xticks"] == want["xticks"] and got["y"] == want["y"]
    assert [s["name"] for s in got["series"]] == ["beta", "gamma", "alpha"]
    assert [s["points"] for s in got["series"]] == [[list(p) for p in s["points"]] for s in want["series"]]
    assert [(r["store"], r["run"], r["points"]) for r in got["runs"]] == [(mine, "beta", 80), (theirs, "gamma", 60),
                                                                          (mine, "alpha", 50)]


async def test_a_chart_draws_no_line_for_a_run_without_the_curve_damaged_or_gone_and_says_why(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    got = await chart(jp_fetch, "loss", f"{sid}/alpha", f"{sid}/broken", f"{sid}/deleted-since")
    assert [len(s["points"]) for s in got["series"]] == [50, 0, 0]
    assert "summary.json" in got["runs"][1]["missing"] and str(layout["root"]) not in got["runs"][1]["missing"]
    assert "no run 'deleted-since'" in got["runs"][2]["missing"]
    got = await chart(jp_fetch, "accuracy", f"{sid}/alpha")
    assert got["runs"][0]["missing"] == "no such curve" and got["y"] is None


@pytest.mark.parametrize("runs, status, says", [
    ((), 400, "name the runs to chart: run=STORE_ID/RUN, once for each"),
    (("no-slash",), 400, "run='no-slash': name a run as run=STORE_ID/RUN"),
    (("/alpha",), 400, "run='<path>': name a run as run=STORE_ID/RUN"),  # what looks like a path is never echoed
    (("nosuchstore/alpha",), 404,
     "no store 'nosuchstore' under the server's root: list them again (GET somatize/stores)"),
    (("SID/nosuchrun", "SID/nosuchrun-either"), 404, "no run 'nosuchrun' in this store"),
    (("SID/alpha",) * 100, 400, "a chart overlays at most 20 runs, not 100: open fewer at once")])
async def test_a_chart_asked_wrong_gets_400_or_404_naming_the_fix(jp_fetch, layout, runs, status, says):
    sid = await the_store(jp_fetch)
    with pytest.raises(HTTPClientError) as e:
        await chart(jp_fetch, "loss", *(r.replace("SID", sid) for r in runs))
    assert e.value.code == status
    assert orjson.loads(e.value.response.body)["message"] == says


async def test_per_node_time_and_facts_one_forward_a_page(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    nodes = (await get(jp_fetch, "stores", sid, "runs", "alpha", "nodes"))["nodes"]
    by = {n["node"]: n for n in nodes}
    assert by["body"]["total_us"] == 50 * 30 and by["head"]["calls"] == 50
    page = await get(jp_fetch, "stores", sid, "runs", "alpha", "facts", forward="3")
    assert page["forwards"] == 50 and page["next"] == 4
    assert [f["fact"] for f in page["facts"]] == ["ran", "ran", "finished", "loss"]
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", "alpha", "facts", params={"forward": "50"})
    assert e.value.code == 400


def record_ddp(store):
    """A data-parallel run "ddp" of two ranks: rank 0 900-905 µs a step, rank 1 600-605."""
    from somatize import Recorder

    with Recorder(store, run="ddp") as rec:
        rec({"fact": "ranks", "value": 2})
        for i in range(6):
            rec.forward_began()
            rec({"fact": "ran", "node": "body", "began_us": 0, "took_us": 30})
            rec({"fact": "finished", "took_us": 40})
            for rank, us in ((0, 900), (1, 600)):
                rec({"fact": "rank_us", "rank": rank, "value": us + i})


async def test_the_nodes_route_sends_a_data_parallel_runs_time_per_rank_as_spent_computes_it(jp_fetch, layout):
    from somatize.record import spent

    record_ddp(layout["store"])
    sid = await the_store(jp_fetch)
    got = await get(jp_fetch, "stores", sid, "runs", "ddp", "nodes")
    want = spent(layout["store"], run="ddp")
    assert got["ranks"] == want.ranks and got["straggler"] == want.straggler
    assert [r["mean_us"] for r in got["ranks"]] == [903.0, 603.0] and got["straggler"]["rank"] == 0  # warm-up out
    alone = await get(jp_fetch, "stores", sid, "runs", "alpha", "nodes")
    assert alone["ranks"] == [] and alone["straggler"] is None


async def test_a_damaged_rank_series_leaves_the_nodes_route_answering_the_nodes_and_naming_the_damage(
        jp_fetch, layout):
    """The ranks are the nodes route's optional part: a rank series whose
    bytes no longer match their checksum answered 422 for the whole route,
    so the run's Time view showed nothing. Now the nodes' times answer, no
    rank is served from the damaged bytes, and the damage is named."""
    record_ddp(layout["store"])
    series = layout["store"] / "runs" / "ddp" / "series" / "rank_us%2Frank1.bin"
    data = bytearray(series.read_bytes())
    data[-1] ^= 0xFF  # the last value's last byte: the checksum the summary holds no longer matches
    series.write_bytes(bytes(data))
    sid = await the_store(jp_fetch)
    got = await get(jp_fetch, "stores", sid, "runs", "ddp", "nodes")
    assert [n["node"] for n in got["nodes"]] == ["body"] and got["nodes"][0]["ran"] == 6
    assert got["ranks"] == [] and got["straggler"] is None
    problem = got["ranks_problem"]
    assert "rank_us%2Frank1.bin does not verify" in problem and str(layout["store"]) not in problem


async def test_delete_removes_one_run_and_leaves_the_others(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    r = await jp_fetch("somatize", "stores", sid, "runs", "alpha", method="DELETE")
    assert r.code == 204
    assert not (layout["store"] / "runs" / "alpha").exists()
    assert [x["run"] for x in (await get(jp_fetch, "stores", sid, "runs"))["runs"]] == ["beta", "broken"]
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", "alpha", method="DELETE")
    assert e.value.code == 404


async def test_delete_refuses_a_run_a_live_recorder_holds(jp_fetch, layout):
    """Decided: a run still being written is never deleted (409): its Recorder
    would go on writing into a folder nobody lists. Told by the run's lock."""
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from somatize import Recorder
            r = Recorder({str(layout["store"])!r}, run="live")
            r.forward_began(); r({{"fact": "loss", "value": 1.0}}); r.flush()
            print("ready", flush=True)
            sys.stdin.readline()
            r.close()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        sid = await the_store(jp_fetch)
        row = await get(jp_fetch, "stores", sid, "runs", "live")
        assert row["state"] == "running"
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("somatize", "stores", sid, "runs", "live", method="DELETE")
        assert e.value.code == 409 and b"being recorded" in e.value.response.body
        assert (layout["store"] / "runs" / "live").is_dir()
    finally:
        child.communicate("\n", timeout=GUARD_S)
    r = await jp_fetch("somatize", "stores", sid, "runs", "live", method="DELETE")
    assert r.code == 204


async def test_delete_refuses_a_run_recorded_in_the_server_process(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    with Recorder(layout["store"], run="here") as r:
        r.forward_began()
        r({"fact": "loss", "value": 1.0})
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("somatize", "stores", sid, "runs", "here", method="DELETE")
        assert e.value.code == 409


# ---- security ------------------------------------------------------------------------------


def our_routes(web_app):
    """(pattern, handler class) of every rule in the server's route table under /somatize/."""
    found = []
    rules = list(web_app.default_router.rules) + list(web_app.wildcard_router.rules)
    while rules:
        rule = rules.pop()
        if hasattr(rule.target, "rules"):  # a router for one host pattern: walk into it
            rules.extend(rule.target.rules)
            continue
        pattern = getattr(rule.matcher, "regex", None)
        if pattern is not None and "/somatize/" in pattern.pattern:
            found.append((pattern.pattern, rule.target))
    return sorted(found, key=lambda r: r[0])


async def test_every_route_requires_an_authenticated_user(jp_fetch, jp_web_app, http_server_client, layout):
    sid = await the_store(jp_fetch)
    routes = our_routes(jp_web_app)
    assert len(routes) == len(ROUTES)
    tried = 0
    for pattern, handler in routes:
        path = pattern.rstrip("$").replace("([^/]+)", sid, 1).replace("([^/]+)", "beta", 1)
        for method in ("GET", "DELETE"):
            if getattr(handler, method.lower()) is getattr(handler.__mro__[-2], method.lower(), None):
                continue  # the verb is not served by this route
            r = await http_server_client.fetch(path, method=method, raise_error=False)
            assert r.code == 403, (method, path)
            tried += 1
    assert tried == len(ROUTES) + 1  # one DELETE
    assert (layout["store"] / "runs" / "beta").is_dir()


class DenySomatize(Authorizer):
    """Says no to the resource ``somatize`` only: the routes must ask for it."""

    def is_authorized(self, handler, user, action, resource):
        return resource != "somatize"


@pytest.mark.parametrize("jp_server_config", [{"ServerApp": {"jpserver_extensions": {"somatize._server": True},
                                                             "authorizer_class": DenySomatize}}])
async def test_every_route_goes_through_the_authorizer_with_our_resource(jp_fetch, jp_web_app, http_server_client,
                                                                         jp_auth_header, layout):
    sid = store_id("proj/store")
    for pattern, _ in our_routes(jp_web_app):
        path = pattern.rstrip("$").replace("([^/]+)", sid, 1).replace("([^/]+)", "beta", 1)
        r = await http_server_client.fetch(path, headers=jp_auth_header, raise_error=False)
        assert r.code == 403, path
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", "beta", method="DELETE")
    assert e.value.code == 403
    assert (layout["store"] / "runs" / "beta").is_dir()
    await jp_fetch("api", "status")  # the rest of the server still answers


def test_delete_goes_through_the_xsrf_check():
    """jupyter_server checks XSRF on every non-GET request of a handler that
    does not opt out; none of ours opts out."""
    from jupyter_server.base.handlers import JupyterHandler

    for _, handler in ROUTES:
        assert handler.check_xsrf_cookie is JupyterHandler.check_xsrf_cookie
        assert handler.auth_resource == "somatize"


def _cookies(response) -> dict[str, str]:
    """name -> value of each cookie a response sets."""
    out = {}
    for header in response.headers.get_list("Set-Cookie"):
        name, _, rest = header.partition("=")
        out[name.strip()] = rest.split(";", 1)[0]
    return out


async def test_a_cookie_authenticated_delete_needs_the_xsrf_token(http_server_client, jp_auth_header, jp_base_url,
                                                                  layout):
    """Issue 19, item 8: as a browser sends it (a login cookie, no token
    header), a DELETE without the _xsrf token is refused (403) and deletes
    nothing; with it (the cookie the server set, echoed in X-XSRFToken, as
    JupyterLab's ServerConnection does) it deletes."""
    base = jp_base_url.rstrip("/")
    sid = store_id("proj/store")
    # log in with the token once: the server answers with its login cookie
    r = await http_server_client.fetch(f"{base}/somatize/stores", headers=jp_auth_header)
    login = {k: v for k, v in _cookies(r).items() if k.startswith("username-")}
    assert len(login) == 1, r.headers.get_list("Set-Cookie")
    # a page of the server gives the browser its _xsrf cookie
    r = await http_server_client.fetch(f"{base}/login", raise_error=False, follow_redirects=False)
    xsrf = _cookies(r)["_xsrf"]
    jar = "; ".join(f"{k}={v}" for k, v in {**login, "_xsrf": xsrf}.items())
    # the cookie alone authenticates: a GET answers
    r = await http_server_client.fetch(f"{base}/somatize/stores/{sid}/runs", headers={"Cookie": jar})
    assert r.code == 200 and "beta" in r.body.decode()
    url = f"{base}/somatize/stores/{sid}/runs/beta"
    for headers in ({"Cookie": jar}, {"Cookie": jar, "X-XSRFToken": "2|00000000|" + "0" * 32 + "|1"}):
        r = await http_server_client.fetch(url, method="DELETE", headers=headers, raise_error=False)
        assert r.code == 403, (headers, r.code)
        assert (layout["store"] / "runs" / "beta").is_dir()
    r = await http_server_client.fetch(url, method="DELETE", headers={"Cookie": jar, "X-XSRFToken": xsrf},
                                       raise_error=False)
    assert r.code == 204
    assert not (layout["store"] / "runs" / "beta").exists()


HOSTILE = [
    "..", "../", "..%2f", "..%2F", "%2e%2e%2f", "%2e%2e", "%252e%252e%252f", "..%255c", "..\\", "..%5c",
    "....//", "%2e%2e%5c", "..;", "/etc/passwd", "%2fetc%2fpasswd", "%2Fetc%2Fshadow", "C:\\Windows", "C%3A%5CWindows",
    "\\\\server\\share", "%5c%5cserver%5cshare", "%23", "a%23b", "%3f", "a%3fb%3d1", "%00", "a%00b", "..%00",
    "x" * 300, "y" * 5000, "%c0%ae%c0%ae%2f", "%ef%bc%8e%ef%bc%8e%ef%bc%8f", "~", "~root", "%24%7BHOME%7D", ".",
    "%2e", "runs", "SOMATIZE", "objects", "%20", "*", "OUTSIDE-run", "OUTSIDE-sibling", "linked", "link-store",
    "proj", "proj%2fstore", "%2e%2e%2f%2e%2e%2fOUTSIDE-store", "%252e%252e%252fOUTSIDE-store",
]


async def test_hostile_ids_get_400_or_404_and_nothing_outside_is_opened(jp_fetch, http_server_client, jp_auth_header,
                                                                       jp_base_url, layout):
    global _WATCHING
    sid = await the_store(jp_fetch)
    outside_ids = [store_id(r) for r in ("link-store", "../OUTSIDE-store", str(layout["outside"]),
                                          os.path.relpath(layout["sibling"] / "store", layout["root"]))]
    base = jp_base_url.rstrip("/") + "/somatize/stores"
    chart_at = jp_base_url.rstrip("/") + "/somatize/chart"
    urls = []
    for bad in HOSTILE + outside_ids:
        urls += [("GET", f"{base}/{bad}/runs"), ("GET", f"{base}/{bad}/runs/beta/curve"),
                 ("GET", f"{base}/{sid}/runs/{bad}"), ("GET", f"{base}/{sid}/runs/{bad}/curve"),
                 ("GET", f"{base}/{sid}/runs/{bad}/nodes"), ("GET", f"{base}/{sid}/runs/{bad}/facts"),
                 ("GET", f"{base}/{sid}/runs/{bad}/findings"),
                 ("DELETE", f"{base}/{sid}/runs/{bad}"), ("DELETE", f"{base}/{bad}/runs/beta"),
                 ("GET", f"{base}/{sid}/runs/beta/curve?name={bad}"),
                 ("GET", f"{chart_at}?run={urllib.parse.quote(bad, safe='')}/beta"),
                 ("GET", f"{chart_at}?run={sid}/{urllib.parse.quote(bad, safe='')}"),
                 ("GET", f"{chart_at}?run={bad}/beta"), ("GET", f"{chart_at}?run={sid}/{bad}")]
    assert len(HOSTILE) >= 40
    _WATCHING = []
    answers = {}
    try:
        for method, url in urls:
            r = await http_server_client.fetch(url, method=method, headers=jp_auth_header, raise_error=False,
                                               request_timeout=GUARD_S, follow_redirects=False)
            if r.code in (301, 302):  # jupyter_server's own redirect that drops a trailing "/": follow it here
                assert r.headers["Location"] == url.rstrip("/").split("?")[0], url
                r = await http_server_client.fetch(r.headers["Location"], method=method, headers=jp_auth_header,
                                                   raise_error=False, request_timeout=GUARD_S, follow_redirects=False)
            answers[(method, url)] = r
        touched = list(_WATCHING)
    finally:
        _WATCHING = None
    # a URL ending in "/" never reaches our routes: jupyter_server's own
    # trailing-slash handler answers it (a redirect for GET, 403 for DELETE)
    wrong = {k: r.code for k, r in answers.items()
             if r.code not in (400, 404) and not (r.code == 403 and k[0] == "DELETE" and k[1].endswith("/"))}
    assert wrong == {}
    for r in answers.values():
        body = (r.body or b"").decode(errors="replace")
        assert "Traceback" not in body and str(layout["root"]) not in body and "/tmp" not in body
    assert touched == []
    # nothing was removed, inside or out
    assert sorted(os.listdir(layout["store"] / "runs")) == ["alpha", "beta", "broken", "linked"]
    assert (layout["outside"] / "runs" / "OUTSIDE-run" / "summary.json").is_file()


async def test_a_symlinked_store_or_run_is_not_listed_read_or_served(jp_fetch, layout):
    global _WATCHING
    _WATCHING = []
    try:
        stores = (await get(jp_fetch, "stores"))["stores"]
        sid = await the_store(jp_fetch)
        rows = (await get(jp_fetch, "stores", sid, "runs"))["runs"]
        touched = list(_WATCHING)
    finally:
        _WATCHING = None
    assert "link-store" not in [s["path"] for s in stores]
    assert "linked" not in [r["run"] for r in rows]
    for parts in (("stores", store_id("link-store"), "runs"), ("stores", sid, "runs", "linked", "curve")):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("somatize", *parts)
        assert e.value.code == 404
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", "linked", method="DELETE")
    assert e.value.code == 404
    assert touched == []
    assert (layout["outside"] / "runs" / "OUTSIDE-run" / "facts.log").is_file()


async def test_a_store_whose_runs_folder_links_out_lists_nothing_and_deletes_nothing(jp_fetch, layout):
    store = Store(layout["root"] / "trap")
    store.keep("x", 1)
    os.symlink(layout["outside"] / "runs", layout["root"] / "trap" / "runs")
    rows = (await get(jp_fetch, "stores", store_id("trap"), "runs"))["runs"]
    assert rows == []
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", store_id("trap"), "runs", "OUTSIDE-run", method="DELETE")
    assert e.value.code == 404
    assert (layout["outside"] / "runs" / "OUTSIDE-run").is_dir()


async def test_error_bodies_name_no_absolute_path_and_carry_no_traceback(jp_fetch, layout):
    sid = await the_store(jp_fetch)
    for parts, params, code in ((("stores", sid, "runs", "broken", "curve"), {}, 422),
                                (("stores", sid, "runs", "beta", "curve"), {"name": "nope"}, 404),
                                (("stores", sid, "runs", "nope"), {}, 404),
                                (("stores", sid, "runs"), {"offset": "x"}, 400)):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("somatize", *parts, params=params)
        body = e.value.response.body.decode()
        assert e.value.code == code, (parts, body)
        assert "Traceback" not in body and str(layout["root"]) not in body and "/tmp/" not in body
        assert orjson.loads(body)["message"]


async def test_a_listing_counts_each_runs_findings_off_the_request_sick_above_zero_healthy_zero(jp_fetch, layout):
    """The table's "findings" column: a run whose loss diverged has findings,
    a healthy one none; the count is made off the request (the first listing
    may say None, counting) and the listing's tag changes when it lands."""
    from somatize._server._findings import _COUNTER

    record(Store(layout["store"]), "sick", [1.0] * 5 + [50.0] * 20)
    sid = await the_store(jp_fetch)
    first = await jp_fetch("somatize", "stores", sid, "runs")
    _COUNTER.wait()
    again = await jp_fetch("somatize", "stores", sid, "runs")
    rows = {r["run"]: r for r in orjson.loads(again.body)["runs"]}
    assert rows["sick"]["findings"] == 1 and rows["sick"]["counting"] is False
    assert rows["alpha"]["findings"] == 0 and rows["beta"]["findings"] == 0
    assert "findings" not in rows["broken"]  # damaged: not diagnosed
    if any(r.get("counting") for r in orjson.loads(first.body)["runs"]):
        assert first.headers["Etag"] != again.headers["Etag"]
    # the panel's list: kind, node, steps, and the sentence that says why
    (f,) = (await get(jp_fetch, "stores", sid, "runs", "sick", "findings"))["findings"]
    assert f["kind"] == "diverged" and f["node"] is None and f["first"] == 5
    assert (await get(jp_fetch, "stores", sid, "runs", "alpha", "findings"))["findings"] == []


@pytest.mark.parametrize("count", [float("inf"), 1e9])
async def test_a_ranks_fact_that_counts_absurdly_many_ranks_reads_only_the_ranks_there(jp_fetch, layout, count):
    """``ranks`` is a fact any run may say: an infinite count answered 500
    (int(inf)), a count of a billion asked a billion series, one at a time,
    holding a thread of the pool. Only the ranks with a series are read."""
    with Recorder(Store(layout["store"]), run="odd") as r:
        r({"fact": "ranks", "value": count})
        for _ in range(3):
            r.forward_began()
            r({"fact": "loss", "value": 1.0})
            r({"fact": "rank_us", "rank": 0, "value": 100.0})
            r({"fact": "rank_us", "rank": 2, "value": 150.0})
    sid = await the_store(jp_fetch)
    got = await get(jp_fetch, "stores", sid, "runs", "odd", "nodes")
    assert [(x["rank"], x["mean_us"], x["steps"]) for x in got["ranks"]] == [(0, 100.0, 2), (2, 150.0, 2)]
    assert got["straggler"]["rank"] == 2 and got["straggler"]["fastest"] == 0


def test_waiting_for_counts_held_back_by_a_listing_is_bounded_and_says_why(tmp_path):
    """A wait for the counts of findings made inside a listing (which holds
    every count back) waited forever; it now ends, naming the run and why."""
    from somatize._server._browse import Browser

    record(Store(tmp_path / "s"), "held", [1.0, 0.5])
    browser = Browser(tmp_path)
    (sid,) = [s["id"] for s in browser.stores()]
    with _COUNTER.listing():
        browser.runs(sid)  # queues the count of "held"; none starts while the listing is held
        with pytest.raises(SomatizeError, match=r"s/held had not landed after 0.5 s \(1 listing"):
            _COUNTER.wait(timeout=0.5)
    _COUNTER.wait()
    assert "held" in _COUNTER.counted(str(tmp_path / "s"))


def test_a_forked_child_counts_findings_and_its_wait_ends(tmp_path):
    """A child forked from a server process whose counting thread had started
    (a kernel's or a user's fork) kept the parent's thread as if it ran: the
    counts it queued were never made and a wait for them never ended."""
    from somatize._server._browse import Browser

    store = Store(tmp_path / "s")
    record(store, "before", [1.0])
    browser = Browser(tmp_path)
    (sid,) = [s["id"] for s in browser.stores()]
    browser.runs(sid)
    _COUNTER.wait()  # the parent's thread has run
    record(store, "after", [1.0, 2.0])
    pid = os.fork()
    if pid == 0:  # the child: list, so the new run's count is queued, and wait for it
        code = 1
        try:
            browser.runs(sid)
            _COUNTER.wait()  # bounded (WAIT_S) now; the parent kills a child that hangs
            counted = {r["run"]: r["findings"] for r in browser.runs(sid)["runs"]}
            code = 0 if counted["after"] is not None else 2
        finally:
            os._exit(code)
    assert ended(pid, within=60) == 0
