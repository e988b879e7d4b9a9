"""A real S3 server on 127.0.0.1 for the tests of bucket stores (issue 33):
moto's ``ThreadedMotoServer``, started once per test process (an xdist
worker), and only when a test asks for it; reset between tests.

Fixtures (conftest.py imports them):

- ``moto_endpoint``: the server's ``http://127.0.0.1:port`` (session-wide).
- ``s3_url``: ``s3://<fresh bucket>/store``, the server reset before the
  test, and the environment set as a user's would be (``AWS_ENDPOINT_URL``,
  ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
  ``AWS_ALLOW_HTTP``), so ``Store(s3_url)`` finds its credentials there.

Helpers: ``make_bucket(endpoint, name)``, ``reset(endpoint)``,
``s3_environment(monkeypatch, endpoint)``, and ``Faulty``, a real HTTP
proxy on 127.0.0.1 in front of the server that answers some requests
itself (a 503, or nothing for a while) before forwarding the rest.
"""

from __future__ import annotations

import http.client
import itertools
import logging
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

_server = None
_lock = threading.Lock()
_names = itertools.count()
ACCESS_KEY = "testing-key"
SECRET_KEY = "testing-secret-never-shown"


def endpoint() -> str:
    """The moto server of this process, started on first use."""
    global _server
    with _lock:
        if _server is None:
            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line a request otherwise
            _atomic_conditional_puts()
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            _server = server
        host, port = _server.get_host_and_port()
    return f"http://{host}:{port}"


def _atomic_conditional_puts() -> None:
    """moto 5.2 checks a PUT's If-None-Match / If-Match, then writes, with no
    lock between: two racing creates can both be answered 200, where S3 (and
    GCS, Azure, obstore's memory store) answer one 200 and one 412. The
    server's object PUTs are made one at a time, so its conditional writes
    are atomic as a real bucket's are (what every race test here relies on)."""
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "_one_at_a_time", False):
        return
    put, lock = S3Response.put_object, threading.Lock()

    def put_object(self, *args, **kwargs):
        with lock:
            return put(self, *args, **kwargs)

    put_object._one_at_a_time = True
    S3Response.put_object = put_object


def reset(url) -> None:
    """Forget every bucket of the server at ``url``."""
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=30).read()


def make_bucket(url, name) -> None:
    """Make the bucket ``name`` on the server at ``url`` (moto takes unsigned requests)."""
    urllib.request.urlopen(urllib.request.Request(f"{url}/{name}", method="PUT"), timeout=30).read()


def s3_environment(monkeypatch, url) -> None:
    """The environment of a user of the S3 server at ``url``."""
    for key, value in {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                       "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
                       "AWS_ALLOW_HTTP": "true"}.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="session")
def moto_endpoint():
    return endpoint()


@pytest.fixture
def s3_url(moto_endpoint, monkeypatch):
    """``s3://<a fresh bucket>/store`` on the reset server, the environment set."""
    reset(moto_endpoint)
    name = f"somatize-test-{next(_names)}"
    make_bucket(moto_endpoint, name)
    s3_environment(monkeypatch, moto_endpoint)
    return f"s3://{name}/store"


class Faulty:
    """A real HTTP proxy on 127.0.0.1 in front of ``upstream``: the first
    ``fail`` requests are answered ``status`` (a 503) by the proxy itself,
    each of the first ``stall`` requests after those waits ``stall_s``
    seconds before any answer (a slow server), each of the next ``lose``
    is forwarded and its answer then held back ``stall_s`` seconds (a write
    that lands and whose answer is lost), and every other request is
    forwarded whole. ``seen``: the requests come in, as ``(method, path)``.
    Use as a context manager; ``url`` is its ``http://127.0.0.1:port``."""

    def __init__(self, upstream, fail=0, status=503, stall=0, stall_s=0.0, lose=0):
        self.upstream = upstream.split("://", 1)[1]
        self.fail, self.status, self.stall, self.stall_s, self.lose = fail, status, stall, stall_s, lose
        self.seen = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy._lock:
                    proxy.seen.append((self.command, self.path))
                    n = len(proxy.seen)
                if n <= proxy.fail:
                    self.send_response(proxy.status)
                    text = b"<Error><Code>ServiceUnavailable</Code><Message>Slow down</Message></Error>"
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(text)
                    return
                if n <= proxy.fail + proxy.stall:
                    proxy._release.wait(proxy.stall_s)  # no answer for a while
                host, port = proxy.upstream.split(":")
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                    if n <= proxy.fail + proxy.stall + proxy.lose:
                        proxy._release.wait(proxy.stall_s)  # landed; the answer comes too late
                    self.send_response(answer.status)
                    for k, v in answer.getheaders():
                        if k.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                except (TimeoutError, BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
