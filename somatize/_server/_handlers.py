"""The routes under ``<base_url>/somatize/``: thin tornado handlers over
``_browse.Browser``.

Every verb is ``@tornado.web.authenticated`` and ``@authorized`` against the
resource ``somatize`` (reads are "read", DELETE is "write"); DELETE goes
through jupyter_server's XSRF check (never overridden here). Reads run on a
small thread pool, never on the event loop. GET answers carry an ETag
(tornado's, over the body; a listing's is ``Browser.runs_tagged``'s tag,
known before the body is built, which is then not built) and a poll that
sends it back gets 304 with no body. An error answers JSON ``{"message": ...}`` with no traceback and no
absolute path.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .._base.errors import BucketError, QueryError, SomatizeError, SomatizeKeyError
from ..record._where import MAX_LENGTH
from ._browse import CHART_RUNS, PAGE, POINTS, Browser
from ._public import Bad, Busy, Gone, NotFound, ReadOnly, Unreachable
from ._sort import MAX_COLUMN, order_of

RESOURCE = "somatize"
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="somatize-browse")
_TAGS = re.compile(r'"([^"]*)"')  # the tags of an If-None-Match header (weak or strong)


class _Handler(APIHandler):
    auth_resource = RESOURCE

    def initialize(self, browser: Browser):
        self.browser = browser

    async def _answer(self, fn, tagged=False):
        """Run ``fn()`` (it reads the query too) on the pool and answer its
        result as JSON; a refusal answers ``{"message"}`` with its status."""
        try:
            result = await asyncio.get_running_loop().run_in_executor(_POOL, fn)
        except (NotFound, SomatizeKeyError) as e:
            return self._fail(404, e)
        except (Bad, QueryError) as e:  # a query parameter, or a where= query, that does not read
            return self._fail(400, e)
        except Busy as e:
            return self._fail(409, e)
        except Gone as e:
            return self._fail(410, e)
        except ReadOnly as e:  # a bucket store: read, never changed
            return self._fail(405, e)
        except (Unreachable, BucketError) as e:  # a bucket that does not answer
            return self._fail(502, e)
        except SomatizeError as e:  # damage, a run that cannot answer this
            return self._fail(422, e)
        except OSError as e:
            return self._fail(500, f"could not read the store ({e.strerror or type(e).__name__})")
        if tagged:  # (answer, tag): a poll that sends the tag back gets 304, nothing serialised
            result, tag = result
            self.set_header("Etag", f'"{tag}"')
            if result is None or self.check_etag_header():  # None: the tag was one the poll sent
                self.set_status(304)
                return self.finish()
        if result is None:
            self.set_status(204)
            return self.finish()
        self.set_header("Content-Type", "application/json")
        return self.finish(orjson.dumps(result))

    def _fail(self, status, error):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        return self.finish(orjson.dumps({"message": self.browser.public(str(error))}))

    def _int(self, name, default, low=0, high=1 << 62) -> int:
        raw = self.get_query_argument(name, None)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise Bad(f"{name} must be a whole number, not {raw[:40]!r}") from None
        if not low <= value <= high:
            raise Bad(f"{name} must be between {low} and {high}")
        return value


class StoresHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self):
        await self._answer(lambda: {"root": os.path.basename(self.browser.root), "stores": self.browser.stores()})


class RunsHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self, sid):
        unless = frozenset(_TAGS.findall(self.request.headers.get("If-None-Match", "")[:4096]))
        await self._answer(lambda: self.browser.runs_tagged(
            sid, self._int("offset", 0), self._int("limit", PAGE, 1, PAGE), self.get_query_argument("match", "")[:200],
            unless, where=self.get_query_argument("where", "")[:MAX_LENGTH + 1],
            sort=self.get_query_argument("sort", "run")[:MAX_COLUMN + 1],
            descending=order_of(self.get_query_argument("order", "asc")[:40]),
            listing=self.get_query_argument("listing", "")[:64]), tagged=True)


class RunHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self, sid, run):
        await self._answer(lambda: self.browser.run(sid, run))

    @web.authenticated
    @authorized
    async def delete(self, sid, run):
        await self._answer(lambda: self.browser.delete(sid, run))


def _run_view(answer):
    """A GET-only handler for one view of a run: ``answer(handler, sid, run)``
    builds the JSON (it may read the query through the handler)."""

    class _RunView(_Handler):
        @web.authenticated
        @authorized
        async def get(self, sid, run):
            await self._answer(lambda: answer(self, sid, run))

    return _RunView


CurveHandler = _run_view(lambda h, sid, run: h.browser.curve(
    sid, run, h.get_query_argument("name", "loss")[:300], h._int("points", POINTS, 2, POINTS)))
# a run's time: each node's, and a data-parallel run's each rank's with its straggler (spent's numbers)
NodesHandler = _run_view(lambda h, sid, run: {"run": run, "nodes": h.browser.nodes(sid, run),
                                              **h.browser.rank_time(sid, run)})
FindingsHandler = _run_view(lambda h, sid, run: h.browser.findings(sid, run))
FactsHandler = _run_view(lambda h, sid, run: h.browser.facts(sid, run, h._int("forward", 0)))


class ChartHandler(_Handler):
    """``chart?name=loss&run=<store id>/<run>&run=...``: one chart of several
    runs, from any stores (``Browser.chart``)."""

    @web.authenticated
    @authorized
    async def get(self):
        name = self.get_query_argument("name", "loss")[:300]
        given = self.get_query_arguments("run")
        if len(given) > CHART_RUNS:
            return self._fail(400, f"a chart overlays at most {CHART_RUNS} runs, not {len(given)}: open fewer at once")
        runs = []
        for one in given:
            sid, slash, run = one.partition("/")
            if not (sid and slash and run):
                return self._fail(400, f"run={one[:80]!r}: name a run as run=STORE_ID/RUN")
            runs.append((sid, run))
        await self._answer(lambda: self.browser.chart(name, runs))


_ID = r"([^/]+)"
ROUTES = [
    (r"somatize/stores", StoresHandler),
    (r"somatize/chart", ChartHandler),
    (rf"somatize/stores/{_ID}/runs", RunsHandler),
    (rf"somatize/stores/{_ID}/runs/{_ID}", RunHandler),
    (rf"somatize/stores/{_ID}/runs/{_ID}/curve", CurveHandler),
    (rf"somatize/stores/{_ID}/runs/{_ID}/nodes", NodesHandler),
    (rf"somatize/stores/{_ID}/runs/{_ID}/facts", FactsHandler),
    (rf"somatize/stores/{_ID}/runs/{_ID}/findings", FindingsHandler),
]


def setup(web_app, root_dir, urls=()) -> Browser:
    """The routes added to ``web_app``, over a ``Browser`` of the stores
    under ``root_dir`` and of the bucket stores named by ``urls``."""
    # the clock the stores' walk and the buckets' refreshes are kept by: a test passes its own
    # in the server's tornado_settings
    browser = Browser(root_dir, clock=web_app.settings.get("somatize_clock", time.monotonic), urls=urls)
    base = web_app.settings["base_url"]
    web_app.add_handlers(".*$", [(url_path_join(base, path), h, {"browser": browser}) for path, h in ROUTES])
    return browser
