"""The run browser and the questions asked of many runs: listing 1,000 and
10,000 runs, a query over 10,000 (``runs(store, where=...)`` and the
sidebar's filtered page), sorting, a long curve served, and the poll the
sidebar makes every few seconds. Medians of repeated calls.

The stores (``common.sweep``): 1,000 runs, and 10,000 runs of 5 config keys
and 2 summarised facts (one recorded, the rest copies with a summary.json
of their own); and one run of 1M losses. The query is ``common.QUERY``
(240 of the 10,000 runs match).

In process (``_browse.Browser``, no HTTP; ``somatize.record.runs``):

- listing 1,000 runs, the first time (a fresh Browser: every summary read)
  and again (rows kept); every page of 10,000 runs (1,000 a page, later pages
  asked with the first page's ``listing`` token), first time and again, and
  again sorted by ``loss.last``;
- ``runs(store, where=QUERY)`` of 10,000 runs warm (the store's table kept
  by an earlier listing), its CPU time, ``runs(store)`` with no query, and
  the listing's floor: the two ``stat`` calls a run the kept table asks;
- the browser's filtered first page, first time and again, again sorted by
  ``loss.best`` descending, and the whole store sorted by ``config.lr``;
- an unchanged first page polled with its tag (the 304 path);
- a curve of 1M points cut to 2,000, and the same as the panel's chart.

Over HTTP, a real ``jupyter server`` with the extension in a child process,
each figure one request from this process (the server's work and one local
round trip): the same listings, poll, curve and filtered pages.

    .venv/bin/python bench/bench_browser.py [--quick] [--no-http]
    .venv/bin/python bench/bench_browser.py --against REV [--rounds 4]

``--against REV``: the in-process figures measured alternately by processes
under REV's somatize and this tree's (``--rounds`` of each, on the same
stores), side by side, each the median over processes.

Targets: listing 1,000 runs <= 100 ms (first time and again), all 10,000 runs
in pages <= 1 s (first time and again), ``runs(where=)`` of 10,000 runs
<= 100 ms warm, the filtered first page again <= 200 ms, the 1M-point curve
served <= 100 ms, the unchanged listing polled (304) <= 5 ms; over HTTP,
``runs(where=)`` in process.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import common
from common import QUERY, cpu_ms, machine, median_ms, reported, sweep, target

QUICK = common.QUICK
SMALL, LARGE, POINTS = (100, 1_001, 100_000) if QUICK else (1_000, 10_000, 1_000_000)
REPEAT = 3 if QUICK else 11
TOKEN = "bench-browser"


def stores(root: Path):
    from somatize import Recorder, Store

    sweep(root / "thousand", SMALL)
    sweep(root / "ten-thousand", LARGE)
    values = [float(v) for v in range(POINTS)]
    with Recorder(Store(root / "long"), run="long") as r:
        for v in values:
            r.forward_began()
            r({"fact": "loss", "value": 1.0 / (1.0 + v)})


def _counts_landed():
    """Waits for the counts of findings the listings queued (a background
    thread per process), so that they weigh on no later figure."""
    try:
        from somatize._server._findings import _COUNTER
    except ImportError:  # a commit before the counts
        return
    _COUNTER.wait(timeout=3600)


def stats_alone(path):
    """The floor of a listing of the kept table: the two ``stat`` calls a run, nothing else."""
    fd = os.open(path / "runs", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(fd):
            os.stat(name + "/summary.json", dir_fd=fd, follow_symlinks=False)
            os.stat(name + "/facts.log", dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def in_process(root: Path, repeat: int) -> dict:
    from somatize._server._browse import Browser
    from somatize._server._discover import store_id
    from somatize.record import runs

    small, large, long = store_id("thousand"), store_id("ten-thousand"), store_id("long")
    path = root / "ten-thousand"

    def pages(browser, sid, **asked):
        offset, listing = 0, ""
        while offset is not None:
            page = browser.runs(sid, offset=offset, **asked, **({"listing": listing} if listing else {}))
            offset, listing = page["next"], page.get("listing") or ""

    got = {}
    Browser(root).stores()
    got["list 1,000, first time"] = median_ms(lambda: Browser(root).runs(small), repeat=3)
    got["list 10,000 in pages, first time"] = median_ms(lambda: pages(Browser(root), large), repeat=1)
    got["filtered first page, first time"] = median_ms(lambda: Browser(root).runs(large, where=QUERY), repeat=1)
    _counts_landed()
    browser = Browser(root)
    browser.runs(small)
    pages(browser, large)
    got["list 1,000, again"] = median_ms(lambda: browser.runs(small), repeat)
    got["list 10,000 in pages, again"] = median_ms(lambda: pages(browser, large), repeat)
    pages(browser, large, sort="loss.last")
    got["  the same sorted by loss.last"] = median_ms(lambda: pages(browser, large, sort="loss.last"), repeat)

    time.sleep(2.1)  # the kept table trusts no file's times within 2 s of its write (record/_table)
    runs(path, where=QUERY)  # warm: the OS has read every summary once, the table is kept
    got["runs(where=) of 10,000, warm"] = median_ms(lambda: runs(path, where=QUERY), repeat)
    got["  the same, CPU time"] = cpu_ms(lambda: runs(path, where=QUERY), repeat)
    got["  runs(store), no query"] = median_ms(lambda: runs(path), repeat)
    got["  the floor: 2 stats a run"] = median_ms(lambda: stats_alone(path), repeat)

    browser.runs(large, where=QUERY)
    got["filtered first page, again"] = median_ms(lambda: browser.runs(large, where=QUERY), repeat)
    got["  the same sorted by loss.best"] = median_ms(
        lambda: browser.runs(large, where=QUERY, sort="loss.best", descending=True), repeat)
    got["first page of 10,000 sorted by config.lr"] = median_ms(lambda: browser.runs(large, sort="config.lr"),
                                                                repeat)
    _counts_landed()
    _, tag = browser.runs_tagged(small)
    got["poll an unchanged listing (304)"] = median_ms(lambda: browser.runs_tagged(small, unless={tag}), repeat)
    got["curve of 1M points cut to 2,000"] = median_ms(lambda: browser.curve(long, "long", "loss"), repeat)
    got["  the same as the panel's chart"] = median_ms(lambda: browser.chart("loss", [(long, "long")]), repeat)
    return got


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A ``jupyter server`` with the extension, in a child process, on ``root``."""

    def __init__(self, root: Path, work: Path):
        config = work / "config"
        config.mkdir()
        (config / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"somatize._server": True}}}))
        self.port = free_port()
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(work / "rt"),
               "PYTHONPATH": str(common.ROOT)}
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


def over_http(root: Path, work: Path, repeat: int) -> dict:
    from somatize._server._discover import store_id

    small, large, long = store_id("thousand"), store_id("ten-thousand"), store_id("long")
    server = Server(root, work)
    got = {}
    try:
        listing = f"somatize/stores/{small}/runs"

        def pages():
            offset, token = 0, ""
            while offset is not None:
                asked = {"offset": offset, **({"listing": token} if token else {})}
                body = json.loads(server.get(f"somatize/stores/{large}/runs?" + urllib.parse.urlencode(asked))[2])
                offset, token = body["next"], body.get("listing") or ""

        got["list 1,000, first time"] = median_ms(lambda: server.get(listing), repeat=1)
        got["list 10,000 in pages, first time"] = median_ms(pages, repeat=1)
        filtered = f"somatize/stores/{large}/runs?" + urllib.parse.urlencode({"where": QUERY})
        got["filtered first page, first time"] = median_ms(lambda: server.get(filtered), repeat=1)
        while any(r.get("counting") for r in json.loads(server.get(listing)[2])["runs"]):
            time.sleep(0.5)  # until the server's counts of findings have landed (they change the tag)
        got["list 1,000, again"] = median_ms(lambda: server.get(listing), repeat)
        got["list 10,000 in pages, again"] = median_ms(pages, repeat)
        got["filtered first page, again"] = median_ms(lambda: server.get(filtered), repeat)
        by_loss = f"somatize/stores/{large}/runs?" + urllib.parse.urlencode(
            {"where": QUERY, "sort": "loss.best", "order": "desc"})
        server.get(by_loss)
        got["  the same sorted by loss.best"] = median_ms(lambda: server.get(by_loss), repeat)
        by_lr = f"somatize/stores/{large}/runs?" + urllib.parse.urlencode({"sort": "config.lr"})
        server.get(by_lr)
        got["first page of 10,000 sorted by config.lr"] = median_ms(lambda: server.get(by_lr), repeat)
        _, etag, _ = server.get(listing)
        assert server.get(listing, etag)[0] == 304
        got["poll an unchanged listing (304)"] = median_ms(lambda: server.get(listing, etag), repeat)
        curve = f"somatize/stores/{long}/runs/long/curve?name=loss"
        served = json.loads(server.get(curve)[2])
        assert len(served["value"]) <= 2000 and served["points"] == POINTS
        got["curve of 1M points cut to 2,000"] = median_ms(lambda: server.get(curve), repeat)
        chart = f"somatize/chart?name=loss&run={long}/long"
        got["  the same as the panel's chart"] = median_ms(lambda: server.get(chart), repeat)
    finally:
        server.close()
    return got


TARGETS = {  # a row -> its bound, ms
    "list 1,000, first time": 100, "list 1,000, again": 100,
    "list 10,000 in pages, first time": 1000, "list 10,000 in pages, again": 1000,
    "runs(where=) of 10,000, warm": 100, "filtered first page, again": 200,
    "curve of 1M points cut to 2,000": 100, "poll an unchanged listing (304)": 5,
}


def named(row):
    """A row's label with the sizes this run used."""
    return (row.replace("10,000", f"{LARGE:,}").replace("1,000", f"{SMALL:,}")
            .replace("1M points", f"{POINTS:,} points"))


def against(args):
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp) / "root"
        stores(root)
        other = common.other_tree(args.against)
        got = {args.against: [], "this tree": []}
        for r in range(args.rounds):
            trees = [(args.against, other), ("this tree", str(common.ROOT))]
            for name, tree in trees if r % 2 == 0 else trees[::-1]:
                out = common.run_in(tree, __file__, "--inner", str(root), *(["--quick"] if QUICK else []))
                got[name].append(json.loads(out.splitlines()[-1]))
    print(f"in process, {args.rounds} processes of each tree alternating, medians over processes, ms; {machine()}")
    print(f"  {'':46} {args.against:>10} {'this tree':>10} {'this / ' + args.against:>16}")
    mine = {}
    for row in got["this tree"][0]:
        theirs = statistics.median(g[row] for g in got[args.against])
        mine[row] = statistics.median(g[row] for g in got["this tree"])
        print(f"  {named(row):<46} {theirs:>10.1f} {mine[row]:>10.1f} {mine[row] / theirs:>15.3f}x")
    for row, bound in TARGETS.items():
        target(named(row) + " (in process)", mine[row], bound, "ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small stores, few repeats: checks the script runs")
    ap.add_argument("--no-http", action="store_true", help="in process only")
    ap.add_argument("--against", metavar="REV")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--inner", metavar="ROOT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        return print(json.dumps(in_process(Path(args.inner), REPEAT)))
    if args.against:
        return against(args)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp) / "root"
        t = time.perf_counter()
        stores(root)
        print(f"(stores of {SMALL:,} and {LARGE:,} runs and a run of {POINTS:,} points made in "
              f"{time.perf_counter() - t:.0f} s)")
        mine = in_process(root, REPEAT)
        http = {} if args.no_http else over_http(root, Path(tmp), REPEAT)
    print(f"medians of {REPEAT} (first times: of 1 to 3); {machine()}")
    print(f"  {'':46} {'HTTP ms':>9} {'in process ms':>14} {'target ms':>10}")
    for row, ms in mine.items():
        h = http.get(row)
        print(f"  {named(row):<46} {'-' if h is None else f'{h:.1f}':>9} {ms:>14.1f} {TARGETS.get(row, '-'):>10}")
    reported(f"runs(where=) of {LARGE:,} runs, over its floor (2 stats a run)",
             mine["runs(where=) of 10,000, warm"] / mine["  the floor: 2 stats a run"])
    for row, bound in TARGETS.items():
        over = "" if row not in http else " (HTTP)"
        target(named(row) + over, http.get(row, mine[row]), bound, "ms")


if __name__ == "__main__":
    main()
