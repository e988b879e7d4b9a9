"""The routes under ``<base_url>/somatize/``: thin tornado handlers over
``_browse.Browser``.

Every verb is ``@tornado.web.authenticated`` and ``@authorized`` against the
resource ``somatize`` (reads are "read", DELETE is "write"); DELETE goes
through jupyter_server's XSRF check (never overridden here). Reads run on a
small thread pool, never on the event loop. GET answers carry an ETag
(tornado's, over the body; a listing's is ``Browser.runs_tagged``'s tag,
known before the body is built) and a poll that sends it back gets 304 with
no body. An error answers JSON ``{"message": ...}`` with no traceback and no
absolute path.
"""

from __future__ import annotations

import asyncio
import os
import re
from concurrent.futures import ThreadPoolExecutor

import orjson
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .._base.errors import SomatizeError, SomatizeKeyError
from ._browse import PAGE, POINTS, Bad, Browser, Busy, NotFound

RESOURCE = "somatize"
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="somatize-browse")
_ABSOLUTE = re.compile(r"(?<![\w.~])/[^\s'\"]+")


class _Handler(APIHandler):
    auth_resource = RESOURCE

    def initialize(self, browser: Browser):
        self.browser = browser

    async def _answer(self, fn, *args, tagged=False):
        try:
            result = await asyncio.get_running_loop().run_in_executor(_POOL, fn, *args)
            if tagged:  # (answer, tag): a poll that sends the tag back gets 304, nothing serialised
                result, tag = result
                self.set_header("Etag", f'"{tag}"')
                if self.check_etag_header():
                    self.set_status(304)
                    self.finish()
                    return
        except NotFound as e:
            raise web.HTTPError(404, self._text(e)) from None
        except Bad as e:
            raise web.HTTPError(400, self._text(e)) from None
        except Busy as e:
            raise web.HTTPError(409, self._text(e)) from None
        except SomatizeKeyError as e:
            raise web.HTTPError(404, self._text(e)) from None
        except SomatizeError as e:  # damage, a run that cannot answer this
            raise web.HTTPError(422, self._text(e)) from None
        except OSError as e:
            raise web.HTTPError(500, f"could not read the store ({e.strerror or type(e).__name__})") from None
        if result is not None:
            self.set_header("Content-Type", "application/json")
            self.finish(orjson.dumps(result))
        else:
            self.set_status(204)
            self.finish()

    def _text(self, e) -> str:
        root = self.browser.root
        text = str(e).replace(root + os.sep, "").replace(root, ".")
        # tornado formats log_message with %: keep a literal % as it is
        return _ABSOLUTE.sub("<path>", text).replace("%", "%%")

    def _int(self, name, default, low=0, high=1 << 62) -> int:
        raw = self.get_query_argument(name, None)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise web.HTTPError(400, f"{name} must be a whole number") from None
        if not low <= value <= high:
            raise web.HTTPError(400, f"{name} must be between {low} and {high}")
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
        offset = self._int("offset", 0)
        limit = self._int("limit", PAGE, 0, PAGE)
        match = self.get_query_argument("match", "")[:200]
        await self._answer(self.browser.runs_tagged, sid, offset, limit, match, tagged=True)


class RunHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self, sid, run):
        await self._answer(self.browser.run, sid, run)

    @web.authenticated
    @authorized
    async def delete(self, sid, run):
        await self._answer(self.browser.delete, sid, run)


class CurveHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self, sid, run):
        name = self.get_query_argument("name", "loss")[:300]
        points = self._int("points", POINTS, 2, POINTS)
        await self._answer(self.browser.curve, sid, run, name, points)


class NodesHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self, sid, run):
        await self._answer(lambda: {"run": run, "nodes": self.browser.nodes(sid, run)})


class FactsHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self, sid, run):
        await self._answer(self.browser.facts, sid, run, self._int("forward", 0))


_ID = r"([^/]+)"
ROUTES = [
    (r"somatize/stores", StoresHandler),
    (rf"somatize/stores/{_ID}/runs", RunsHandler),
    (rf"somatize/stores/{_ID}/runs/{_ID}", RunHandler),
    (rf"somatize/stores/{_ID}/runs/{_ID}/curve", CurveHandler),
    (rf"somatize/stores/{_ID}/runs/{_ID}/nodes", NodesHandler),
    (rf"somatize/stores/{_ID}/runs/{_ID}/facts", FactsHandler),
]


def setup(web_app, root_dir) -> Browser:
    browser = Browser(root_dir)
    base = web_app.settings["base_url"]
    web_app.add_handlers(".*$", [(url_path_join(base, path), h, {"browser": browser}) for path, h in ROUTES])
    return browser
