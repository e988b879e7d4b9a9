"""The run browser's bucket stores (issue 33, item 4) through a real
jupyter_server (pytest-jupyter's ``jp_fetch``) against moto's S3 server on
127.0.0.1 (tests/buckets.py): ``c.SomatizeApp.stores = [url, ...]``.

What is asserted is the JSON the routes answer: the bucket store listed
after the local one, its runs as a local store's runs with the same facts
are listed, a curve as recorded, a chart overlaying a local and a bucket
run, delete refused, a bucket that does not answer as an error row naming
the URL and the cause, and what a poll asks of the bucket (conditional
GETs of the running runs' heads; a LIST only every LIST_S by the server's
clock). Every body answered is kept, and none may hold the access key, the
secret, the endpoint or the mirror's folder.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest
from buckets import ACCESS_KEY, SECRET_KEY
from labtools import LIVE_CHILD, free_port
from tornado.httpclient import HTTPClientError

from somatize import Recorder, Store
from somatize._base.bucket import Bucket
from somatize._server import _buckets
from somatize._server._buckets import bucket_id
from somatize._server._discover import store_id
from somatize._store.store import as_store
from somatize.record import _mirror, _segments

pytest_plugins = ("pytest_jupyter.jupyter_server",)

CREDENTIALED = "s3://AKIDEXAMPLEUSER:wJalrXUtnFEMIK7MDENG@somatize-other/store"


class Clock:
    """The server's clock (its walk of the root, its buckets' refreshes), moved by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def __deepcopy__(self, memo):  # the server's config is copied on its way: one clock stays one
        return self


CLOCK = Clock()


def record(store, run, losses):
    with Recorder(store, run=run, config={"lr": 0.1}) as r:
        for v in losses:
            r.forward_began()
            r({"fact": "ran", "node": "body", "began_us": 0, "took_us": 30})
            r({"fact": "ran", "node": "head", "began_us": 30, "took_us": 10})
            r({"fact": "finished", "took_us": 45})
            r({"fact": "loss", "value": float(v)})


ALPHA = np.linspace(2, 1, 50)
BETA = np.linspace(3, 0.5, 80)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """This machine's copies of buckets (the mirror the server reads, the
    writers' copies): a folder of the test's own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("SOMATIZE_CACHE", str(folder))
    return folder


@pytest.fixture
def missing_url(s3_url):
    return f"s3://somatize-never-made-{free_port()}/store"


@pytest.fixture
def jp_server_config(s3_url, missing_url, cache):
    CLOCK.now = 0.0
    return {"ServerApp": {"jpserver_extensions": {"somatize._server": True},
                          "tornado_settings": {"somatize_clock": CLOCK}},
            "SomatizeApp": {"stores": [s3_url, missing_url, CREDENTIALED, "/etc"]}}


@pytest.fixture
def layout(jp_root_dir, s3_url, cache):
    """A local store under the root, and the same runs in the bucket (plus one)."""
    local = Store(Path(jp_root_dir) / "proj" / "store")
    record(local, "alpha", ALPHA)
    record(local, "beta", BETA)
    bucket = Store(s3_url)
    record(bucket, "alpha", ALPHA)
    record(bucket, "beta", BETA)
    record(bucket, "gamma", [5.0, 4.0, 3.0])
    return {"local": local, "bucket": bucket}


class Answers:
    """``jp_fetch`` with every body it was answered kept (refusals too)."""

    def __init__(self, jp_fetch):
        self.fetch, self.bodies = jp_fetch, []

    async def raw(self, *parts, **kw):
        try:
            r = await self.fetch("somatize", *parts, **kw)
        except HTTPClientError as e:
            self.bodies.append(e.response.body.decode() if e.response is not None and e.response.body else "")
            raise
        self.bodies.append(r.body.decode())
        return r

    async def get(self, *parts, **params):
        return orjson.loads((await self.raw(*parts, params=params)).body)

    async def refused(self, *parts, method="GET"):
        with pytest.raises(HTTPClientError) as e:
            await self.raw(*parts, method=method)
        return e.value.code, orjson.loads(e.value.response.body)["message"]

    def assert_nothing_secret(self, *more):
        said = "\n".join(self.bodies)
        assert said
        for secret in (ACCESS_KEY, SECRET_KEY, "AKIDEXAMPLEUSER", "wJalrXUtnFEMIK7MDENG", "127.0.0.1",
                       "moto", str(_mirror.cache_root()), "mirror/", *more):
            assert secret not in said, secret


@pytest.fixture
def answers(jp_fetch):
    return Answers(jp_fetch)


def rows_of(page):
    return {r["run"]: r for r in page["runs"]}


async def test_a_bucket_store_is_listed_beside_the_local_one_and_its_runs_as_a_local_stores(
        answers, layout, s3_url, missing_url, moto_endpoint):
    stores = (await answers.get("stores"))["stores"]
    assert [s["path"] for s in stores] == ["proj/store", s3_url, missing_url, "s3://somatize-other/store", "<path>"]
    local, bucket = stores[0], stores[1]
    assert local == {"id": store_id("proj/store"), "path": "proj/store", "runs": 2}
    assert bucket == {"id": bucket_id(s3_url), "path": s3_url, "url": s3_url, "readonly": True, "runs": 3}
    here = rows_of(await answers.get("stores", local["id"], "runs"))
    there = rows_of(await answers.get("stores", bucket["id"], "runs"))
    assert sorted(there) == ["alpha", "beta", "gamma"]
    for run in ("alpha", "beta"):  # the same facts: the same row, but for when it was written
        a, b = dict(here[run]), dict(there[run])
        for when in ("started", "updated", "duration"):
            a.pop(when), b.pop(when)
        assert a == b and b["state"] == "finished" and b["steps"] == len(ALPHA if run == "alpha" else BETA)
    assert there["gamma"]["summarising"]["loss"]["last"] == 3.0 and there["gamma"]["config"] == {"lr": 0.1}
    one = await answers.get("stores", bucket["id"], "runs", "beta")
    assert one["run"] == "beta" and one["forwards"] == 80
    assert (await answers.get("stores", bucket["id"], "runs", match="ET"))["total"] == 1
    where = await answers.get("stores", bucket["id"], "runs", where="loss.best < 1", sort="loss.best")
    assert [r["run"] for r in where["runs"]] == ["beta"]
    answers.assert_nothing_secret(moto_endpoint)


async def test_a_bucket_runs_curve_nodes_facts_and_findings_are_served_as_recorded(answers, layout, s3_url):
    sid = bucket_id(s3_url)
    await answers.get("stores")
    c = await answers.get("stores", sid, "runs", "beta", "curve", name="loss")
    assert c["value"] == pytest.approx(list(BETA)) and c["step"] == list(range(80)) and c["points"] == 80
    assert c["min"] == pytest.approx(0.5) and c["max"] == pytest.approx(3.0)
    cut = await answers.get("stores", sid, "runs", "beta", "curve", name="loss", points="10")
    assert len(cut["value"]) <= 10 and max(cut["value"]) == pytest.approx(3.0) and min(cut["value"]) == 0.5
    nodes = {n["node"]: n for n in (await answers.get("stores", sid, "runs", "alpha", "nodes"))["nodes"]}
    assert nodes["body"]["calls"] == 50 and nodes["body"]["total_us"] == 50 * 30
    assert nodes["head"]["total_us"] == 50 * 10
    page = await answers.get("stores", sid, "runs", "alpha", "facts", forward="3")
    assert [f["fact"] for f in page["facts"]] == ["ran", "ran", "finished", "loss"]
    assert page["facts"][-1]["value"] == pytest.approx(ALPHA[3]) and page["forwards"] == 50
    assert (await answers.get("stores", sid, "runs", "alpha", "findings"))["run"] == "alpha"
    # one chart of a local run and a bucket run: the two lines are the same points
    local = store_id("proj/store")
    chart = orjson.loads((await answers.raw("chart", params=[("name", "loss"), ("run", f"{local}/alpha"),
                                                             ("run", f"{sid}/alpha")])).body)
    assert [r["store"] for r in chart["runs"]] == [local, sid] and all("missing" not in r for r in chart["runs"])
    assert chart["series"][0]["points"] == chart["series"][1]["points"] and len(chart["series"][1]["points"]) == 50
    code, message = await answers.refused("stores", sid, "runs", "nope", "curve")
    assert code == 404 and "nope" in message
    answers.assert_nothing_secret()


async def test_deleting_a_run_of_a_bucket_store_is_refused_and_deletes_nothing(answers, layout, s3_url):
    sid = bucket_id(s3_url)
    await answers.get("stores")
    keys = sorted(k for k, _ in layout["bucket"].bucket.list())
    code, message = await answers.refused("stores", sid, "runs", "alpha", method="DELETE")
    assert code == 405
    assert message.startswith(f"run 'alpha' is in the bucket store {s3_url}, which the run browser only reads")
    assert f"{s3_url}/heads/alpha.json" in message and "nothing was deleted" in message
    assert sorted(k for k, _ in layout["bucket"].bucket.list()) == keys
    assert "alpha" in rows_of(await answers.get("stores", sid, "runs"))
    answers.assert_nothing_secret()


async def test_a_bucket_that_cannot_be_read_is_an_error_row_naming_the_url_and_the_cause(
        answers, layout, s3_url, missing_url, moto_endpoint):
    stores = {s["path"]: s for s in (await answers.get("stores"))["stores"]}
    missing = stores[missing_url]
    assert missing["id"] == bucket_id(missing_url) and missing["url"] == missing_url and missing["runs"] == 0
    # no such bucket: its marker is not there (a 404), as Store(url, readonly=True) says it
    assert missing["error"].startswith(f"Store({missing_url!r}, readonly=True): not a store"), missing["error"]
    # a URL holding credentials: shown without them, refused as Bucket refuses it, its secrets never said
    other = stores["s3://somatize-other/store"]
    assert other["id"] == bucket_id("s3://somatize-other/store")
    assert "a bucket URL holds no credentials" in other["error"]
    assert "is not a bucket URL" in stores["<path>"]["error"]
    # the others are listed and read all the same
    assert stores["proj/store"]["runs"] == 2 and stores[s3_url]["runs"] == 3 and "error" not in stores[s3_url]
    code, message = await answers.refused("stores", missing["id"], "runs")
    assert code == 502 and message == missing["error"]
    code, _ = await answers.refused("stores", other["id"], "runs", "alpha", "curve")
    assert code == 502
    answers.assert_nothing_secret(moto_endpoint)


class TestABucketWhoseServerIsDown:
    """The endpoint the environment names answers nothing (a closed port):
    the store's row says so, after the client's retries, and the local
    store is listed and read as ever."""

    @pytest.fixture
    def jp_server_config(self, s3_url, cache, monkeypatch):
        CLOCK.now = 0.0
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
        return {"ServerApp": {"jpserver_extensions": {"somatize._server": True},
                              "tornado_settings": {"somatize_clock": CLOCK}},
                "SomatizeApp": {"stores": [s3_url]}}

    async def test_its_row_names_the_url_and_the_cause(self, answers, jp_root_dir, s3_url):
        record(Store(Path(jp_root_dir) / "store"), "alpha", ALPHA)
        stores = (await answers.get("stores"))["stores"]
        assert [s["path"] for s in stores] == ["store", s3_url]
        error = stores[1]["error"]
        assert error.startswith(f"HEAD {s3_url}/SOMATIZE failed 5 times"), error  # its marker, asked first
        assert "the bucket is down, slow or unreachable" in error
        assert "Error performing HEAD <url>" in error  # the endpoint the client asked is not said
        assert rows_of(await answers.get("stores", stores[0]["id"], "runs"))["alpha"]["steps"] == 50
        answers.assert_nothing_secret()


async def test_a_poll_asks_the_running_runs_heads_and_lists_only_every_list_s(answers, layout, s3_url, tmp_path):
    """A run another process records into the bucket, step by step: each
    poll (the server's clock moved FRESH_S) is one conditional GET of its
    head (plus its new segments when it moved) and no LIST; polls within
    FRESH_S ask nothing; a LIST once LIST_S has passed."""
    env = {**__import__("os").environ, "SOMATIZE_CACHE": str(tmp_path / "writer")}  # another machine's copy
    sid = bucket_id(s3_url)
    with subprocess.Popen([sys.executable, "-c", LIVE_CHILD, s3_url], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, env=env) as child:
        def step(n):
            child.stdin.write(f"{n}\n")
            child.stdin.flush()
            return int(child.stdout.readline())  # flushed: its segment and head are in the bucket

        assert step(3) == 3
        await answers.get("stores")  # the first refresh: one LIST, every head
        live = rows_of(await answers.get("stores", sid, "runs"))["live"]
        assert live["state"] == "running" and live["steps"] == 3
        bucket = as_store(s3_url, readonly=True).bucket  # the server's own (one Store a URL a process)
        before = dict(bucket.requests)

        async def poll():
            await answers.get("stores")
            return rows_of(await answers.get("stores", sid, "runs"))["live"]

        def asked():
            return {m: n - before.get(m, 0) for m, n in bucket.requests.items() if n != before.get(m, 0)}

        def segments():  # as the bucket holds them, asked through a Bucket of the test's own
            return _segments.decode_head(Bucket(s3_url).get(_segments.head_key("live"), 1 << 20), "live")["segments"]

        assert (await poll())["steps"] == 3 and asked() == {}  # within FRESH_S: nothing asked
        held = segments()
        assert step(4) == 7
        CLOCK.now += _buckets.FRESH_S
        live = await poll()
        assert live["steps"] == 7 and live["state"] == "running"
        assert asked() == {"GET": 1 + segments() - held}  # its head, then its new segments
        c = await answers.get("stores", sid, "runs", "live", "curve", name="loss")
        assert c["value"] == pytest.approx([2.0 / (i + 1) for i in range(7)])
        before = dict(bucket.requests)
        CLOCK.now += _buckets.FRESH_S
        assert (await poll())["steps"] == 7 and asked() == {"GET": 1}  # a 304 (or a head beaten: no segment)
        before = dict(bucket.requests)
        CLOCK.now += _buckets.LIST_S
        await poll()
        assert asked().get("LIST") == 1
        held = segments()
        child.stdin.close()
        assert child.wait(60) == 0
    before = dict(bucket.requests)
    CLOCK.now += _buckets.FRESH_S
    assert (await poll())["state"] == "finished"
    assert asked() == {"GET": 1 + segments() - held}  # the head, and the segment its close sent
    answers.assert_nothing_secret()
