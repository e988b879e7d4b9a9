"""The run browser's listing answers a ``where=`` query (record/_where) over
every run of a store, then pages the runs that match: the same answer as
``runs(store, where=...)``, through real HTTP too."""

from __future__ import annotations

import orjson
import pytest
from tornado.httpclient import HTTPClientError

from somatize import Recorder, Store
from somatize._server._browse import Browser
from somatize._server._findings import _COUNTER
from somatize.record import runs

pytest_plugins = ("pytest_jupyter.jupyter_server",)


def record(store, run, lr, losses, opt="adam"):
    with Recorder(store, run=run, config={"lr": lr, "opt": opt}) as r:
        for v in losses:
            r.forward_began()
            r({"fact": "loss", "value": v})


def sweep(store):
    for i in range(12):
        record(store, f"run-{i:02d}", 10.0 ** -(i % 4), [1.0, 0.5 / (i + 1)], "adam" if i % 3 else "sgd")


def names(answer):
    return [r["run"] for r in answer["runs"]]


QUERIES = ["config.lr < 0.05", 'config.opt == "sgd" or loss.best < 0.05', "not config.lr in [1, 0.1]",
           "loss.last > 1", 'state == "finished"']


@pytest.mark.parametrize("query", QUERIES)
def test_the_listing_answers_as_runs_where_does(tmp_path, query):
    store = Store(tmp_path / "s")
    sweep(store)
    browser = Browser(tmp_path)
    (sid,) = [s["id"] for s in browser.stores()]
    want = list(runs(store, where=query)["run"])
    got = browser.runs(sid, where=query)
    assert names(got) == want and got["total"] == len(want)


def test_the_matching_runs_are_paged(tmp_path):
    store = Store(tmp_path / "s")
    sweep(store)
    browser = Browser(tmp_path)
    (sid,) = [s["id"] for s in browser.stores()]
    want = list(runs(store, where="config.lr <= 0.01")["run"])
    assert len(want) == 6
    first = browser.runs(sid, where="config.lr <= 0.01", limit=2)
    second = browser.runs(sid, where="config.lr <= 0.01", offset=first["next"], limit=2)
    third = browser.runs(sid, where="config.lr <= 0.01", offset=second["next"], limit=2)
    assert names(first) + names(second) + names(third) == want
    assert (first["total"], first["next"], second["next"], third["next"]) == (6, 2, 4, None)
    assert names(browser.runs(sid, where="config.lr <= 0.01", match="-0")) == [n for n in want if "-0" in n]


def test_a_run_that_comes_to_match_changes_the_tag(tmp_path):
    store = Store(tmp_path / "s")
    sweep(store)
    browser = Browser(tmp_path)
    (sid,) = [s["id"] for s in browser.stores()]
    answer, tag = browser.runs_tagged(sid, where="loss.best < 0.01")
    assert names(answer) == [] and browser.runs_tagged(sid, where="loss.best < 0.01", unless={tag}) == (None, tag)
    live = Recorder(store, run="late", config={"lr": 1.0})
    live.forward_began()
    live({"fact": "loss", "value": 0.001})
    live.flush()
    answer, again = browser.runs_tagged(sid, where="loss.best < 0.01", unless={tag})
    assert again != tag and names(answer) == ["late"] and answer["runs"][0]["state"] == "running"
    live.close()
    answer, last = browser.runs_tagged(sid, where="loss.best < 0.01", unless={again})
    assert last != again and answer["runs"][0]["state"] == "finished"


# ---- through HTTP -------------------------------------------------------------------


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"somatize._server": True}}}


async def test_the_runs_route_takes_where_and_refuses_a_bad_query_with_400_pointing_at_it(jp_fetch, jp_root_dir):
    store = Store(jp_root_dir / "store")
    sweep(store)
    stores = orjson.loads((await jp_fetch("somatize", "stores")).body)["stores"]
    sid = stores[0]["id"]
    await jp_fetch("somatize", "stores", sid, "runs", params={"where": "config.lr < 0.05", "limit": "3"})
    _COUNTER.wait()  # a count of findings landing changes the page (test_server.py)
    r = await jp_fetch("somatize", "stores", sid, "runs", params={"where": "config.lr < 0.05", "limit": "3"})
    got = orjson.loads(r.body)
    want = list(runs(store, where="config.lr < 0.05")["run"])
    assert names(got) == want[:3] and got["total"] == len(want) and got["next"] == 3
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", params={"where": "config.lr < 0.05", "limit": "3"},
                       headers={"If-None-Match": r.headers["Etag"]})
    assert e.value.code == 304
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", params={"where": "config.lr < and"})
    assert e.value.code == 400
    message = orjson.loads(e.value.response.body)["message"]
    assert "character 12" in message and "expected" in message
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", params={"where": "__import__('os')"})
    assert e.value.code == 400
