"""The run browser's server half, medians of repeated requests, side by side.

    .venv/bin/python bench/bench_browser.py [--quick]

A real `jupyter server` with the extension runs in a child process; each
figure is the wall time of one HTTP request from this process (so it holds
the server's work and one local round trip), beside the same work called
in-process on ``_browse.Browser`` (no HTTP):

1. listing a store of 1,000 runs: the first time (every summary read) and
   again (summaries unchanged, rows reused) — target <= 100 ms;
2. listing a store of 10,000 runs, all ten pages of 1,000 — target <= 1 s;
3. a curve of 1M points cut to 2,000 and served — target <= 100 ms; the
   same curve as the panel's chart (record/_chart: scale, ticks, labels);
4. an unchanged listing of 1,000 runs polled with its ETag (304) — target <= 5 ms.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from somatize import Recorder, Store
from somatize._server._browse import Browser
from somatize._server._discover import store_id
from somatize._server._findings import _COUNTER

QUICK = "--quick" in sys.argv
REPEAT = 5 if QUICK else 15
POINTS = 200_000 if QUICK else 1_000_000
TOKEN = "bench-browser"


def median_ms(fn, repeat=REPEAT):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def many_runs(root: Path, count: int):
    """A store of ``count`` runs of 100 forwards each: one recorded, the rest copies."""
    store = Store(root)
    with Recorder(store, run="run-00000") as r:
        for i in range(100):
            r.forward_began()
            r({"fact": "ran", "node": "body", "began_us": 0, "took_us": 20})
            r({"fact": "finished", "took_us": 25})
            r({"fact": "loss", "value": 1.0 / (i + 1)})
    first = root / "runs" / "run-00000"
    for i in range(1, count):
        shutil.copytree(first, root / "runs" / f"run-{i:05d}")


def long_run(root: Path):
    store = Store(root)
    values = np.random.default_rng(0).normal(size=POINTS).cumsum()
    with Recorder(store, run="long") as r:
        for v in values.tolist():
            r.forward_began()
            r({"fact": "loss", "value": v})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, root: Path, work: Path):
        config = work / "config"
        config.mkdir()
        (config / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"somatize._server": True}}}))
        self.port = free_port()
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(work / "rt"),
               "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        self.log = open(work / "server.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--port={self.port}",
             "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}",
             "--ServerApp.log_level=WARN"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(240):
            try:
                self.get("api/status")
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError((work / "server.log").read_text()) from None
                time.sleep(0.25)
        raise RuntimeError("the server did not start")

    def get(self, path, etag=None):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/{path}",
                                         headers={"Authorization": f"token {TOKEN}"})
        if etag:
            request.add_header("If-None-Match", etag)
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, r.headers.get("Etag"), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Etag"), b""

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def main():
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        tmp = Path(tmp)
        root = tmp / "root"
        t = time.perf_counter()
        many_runs(root / "thousand", 1_000)
        many_runs(root / "ten-thousand", 10_000)
        long_run(root / "long")
        print(f"(stores made in {time.perf_counter() - t:.0f} s)")
        rows = []

        browser = Browser(root)
        browser.stores()
        a, b, c = store_id("thousand"), store_id("ten-thousand"), store_id("long")

        def pages(get):
            offset = 0
            while offset is not None:
                offset = get(offset)

        first = median_ms(lambda: Browser(root).runs(a), repeat=3)
        again = median_ms(lambda: browser.runs(a))
        browser10k = Browser(root)
        cold10k = median_ms(lambda: pages(lambda o: Browser(root).runs(b, offset=o)["next"]), repeat=1)
        pages(lambda o: browser10k.runs(b, offset=o)["next"])
        warm10k = median_ms(lambda: pages(lambda o: browser10k.runs(b, offset=o)["next"]), repeat=3)
        curve = median_ms(lambda: browser.curve(c, "long", "loss"))
        chart = median_ms(lambda: browser.chart("loss", [(c, "long")]))
        # the listings above queued every run's count of findings: let them land
        # here, so they do not weigh on the HTTP figures below
        t = time.perf_counter()
        _COUNTER.wait(timeout=3600)  # 11,000 counts: minutes, bounded still
        print(f"(findings of 11,000 runs counted in the background, {time.perf_counter() - t:.1f} s after)")

        server = Server(root, tmp)
        try:
            base = f"somatize/stores/{a}/runs"
            # the server's first listing reads every summary, as a fresh server would
            h_first = median_ms(lambda: server.get(base), repeat=1)
            h_again = median_ms(lambda: server.get(base))  # while the server counts findings
            while any(r.get("counting") for r in json.loads(server.get(base)[2])["runs"]):
                time.sleep(0.5)  # until the server's counts of findings have landed (they change the tag)
            h_settled = median_ms(lambda: server.get(base))
            status, etag, _ = server.get(base)
            assert server.get(base, etag)[0] == 304
            h_poll = median_ms(lambda: server.get(base, etag))

            def http_pages(offset):
                body = json.loads(server.get(f"somatize/stores/{b}/runs?offset={offset}")[2])
                return body["next"]

            h_cold10k = median_ms(lambda: pages(http_pages), repeat=1)
            h_warm10k = median_ms(lambda: pages(http_pages), repeat=3)
            served = json.loads(server.get(f"somatize/stores/{c}/runs/long/curve?name=loss")[2])
            assert len(served["value"]) <= 2000 and served["points"] == POINTS
            h_curve = median_ms(lambda: server.get(f"somatize/stores/{c}/runs/long/curve?name=loss"))
            drawn = json.loads(server.get(f"somatize/chart?name=loss&run={c}/long")[2])
            assert len(drawn["series"][0]["points"]) <= 2000 and drawn["runs"][0]["points"] == POINTS
            h_chart = median_ms(lambda: server.get(f"somatize/chart?name=loss&run={c}/long"))
        finally:
            server.close()

        rows = [
            ("list 1,000 runs, first time (every summary read)", h_first, first, 100),
            ("list 1,000 runs again (summaries unchanged)", h_again, again, 100),
            ("  the same, once every count of findings has landed", h_settled, None, 100),
            ("list 10,000 runs in 10 pages, first time", h_cold10k, cold10k, 1000),
            ("list 10,000 runs in 10 pages again", h_warm10k, warm10k, 1000),
            (f"curve of {POINTS:,} points cut to 2,000, served", h_curve, curve, 100),
            ("  the same as the panel's chart (scale, ticks, labels)", h_chart, chart, 100),
            ("poll an unchanged 1,000-run listing with its ETag (304)", h_poll, None, 5),
        ]
        print(f"{'':58} {'HTTP ms':>9} {'in-process ms':>14} {'target ms':>10}")
        for label, http, core, target in rows:
            core_text = f"{core:14.1f}" if core is not None else f"{'-':>14}"
            print(f"{label:58} {http:9.1f} {core_text} {target:10}")


if __name__ == "__main__":
    main()
