"""Asking 10,000 runs a question (issue 21): ``runs(store, where=...)`` and
the run browser's filtered first page, medians, side by side in one process.

    .venv/bin/python bench/bench_where.py [--quick]

The store: 10,000 runs of 5 config keys (lr, batch, opt, bn, seed: a float,
an int, a str, a bool, an int) and 2 summarised facts (loss, acc). One run is
recorded by a Recorder; the others are copies of its folder, each with a
summary.json of its own config and summaries (what a listing reads; the log,
index and series stay the recorded run's, and verify). Figures:

1. ``runs(store, where=...)`` warm (the summaries in the OS's cache, the
   store's table kept by an earlier listing: ``record/_table``) — target
   <= 100 ms; beside it, in the same process: the same answered as before
   the table was kept (``_runs.summaries`` with each run's columns kept by
   its summary's identity, the query asked row by row), ``runs(store)`` with
   no query, the listing's floor (the two ``stat`` calls a run the kept
   table asks, nothing else), the query read alone, and the query asked of
   10,000 rows alone, row by row and of the table's columns;
2. the browser's first page (1,000 runs at most) for the same query, in
   process (``Browser.runs``) and over HTTP: the first time (every summary
   read) and again (rows kept) — target <= 200 ms; and again sorted by a
   summary (``sort=loss.best&order=desc``: every run matching sorted before
   the page is cut), and the whole store sorted by a config key with no
   query (10,000 runs sorted, the first 1,000 sent).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))
from bench_browser import Server, median_ms  # noqa: E402  (one timing helper, one server)

from somatize import Recorder, Store  # noqa: E402
from somatize._server._browse import Browser  # noqa: E402
from somatize._server._discover import store_id  # noqa: E402
from somatize._server._findings import _COUNTER  # noqa: E402
from somatize.record import runs  # noqa: E402
from somatize.record._columns import QUERY_STATS, row  # noqa: E402
from somatize.record._queries import frame  # noqa: E402
from somatize.record._runs import summaries  # noqa: E402
from somatize.record._table import table as kept_table  # noqa: E402
from somatize.record._where import Columns, Query, matching  # noqa: E402

QUICK = "--quick" in sys.argv
RUNS = 2_000 if QUICK else 10_000
REPEAT = 5 if QUICK else 11
QUERY = 'config.lr < 1e-2 and loss.best < 0.1 and config.opt in ["adam", "rmsprop"] and not config.bn == false'


def cpu_ms(fn, repeat=REPEAT):
    """The median CPU time of ``fn`` (this process's, user and system): on a
    machine other work keeps busy, closer to what a quiet one shows."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return 1000 * sorted(times)[len(times) // 2]


_BEFORE: dict = {}  # run -> (its summary.json's identity, state, problem, its columns), as _queries kept them


def runs_as_before(path, where):
    """``runs(store, where=...)`` as it was answered before the store's table
    was kept (commit 793f8b4): every run's folder opened, its summary's
    identity asked, its columns made again only when that changed, the
    query asked of each row, the table made of the rows that hold."""
    identities: list = []
    rows = []
    for s, ident in zip(summaries(path, identities=identities), identities):
        got = _BEFORE.get(s["run"])
        if ident is not None and got is not None and got[:3] == (ident, s["state"], s.get("problem")):
            rows.append(got[3])
            continue
        r = row(s, QUERY_STATS)
        if ident is not None:
            _BEFORE[s["run"]] = (ident, s["state"], s.get("problem"), r)
        rows.append(r)
    return frame(matching(rows, where))


def stats_alone(path):
    """The floor of a listing of the kept table: the two ``stat`` calls a run, nothing else."""
    fd = os.open(path / "runs", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(fd):
            os.stat(name + "/summary.json", dir_fd=fd, follow_symlinks=False)
            os.stat(name + "/facts.log", dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def sweep(root: Path, count: int):
    store = Store(root)
    first = root / "runs" / "run-00000"
    with Recorder(store, run="run-00000", summarising=["loss", "acc"],
                  config={"lr": 0.01, "batch": 32, "opt": "adam", "bn": True, "seed": 0}) as r:
        for i in range(20):
            r.forward_began()
            r({"fact": "finished", "took_us": 25})
            r({"fact": "loss", "value": 1.0 / (i + 1)})
            r({"fact": "acc", "value": 1.0 - 1.0 / (i + 1)})
    base = orjson.loads((first / "summary.json").read_bytes())
    rng = random.Random(0)
    for k in range(1, count):
        folder = root / "runs" / f"run-{k:05d}"
        shutil.copytree(first, folder)
        s = dict(base, run=folder.name)
        s["config"] = {"lr": 10 ** rng.uniform(-4, 0), "batch": rng.choice([16, 32, 64, 128]),
                       "opt": rng.choice(["adam", "sgd", "rmsprop"]), "bn": rng.random() < 0.5, "seed": k % 10}
        loss = sorted(rng.uniform(0, 2) for _ in range(3))
        acc = sorted(rng.uniform(0, 1) for _ in range(3))
        s["summarising"] = {
            "loss": {"count": 20, "first": loss[2], "last": loss[1], "min": loss[0], "max": loss[2]},
            "acc": {"count": 20, "first": acc[0], "last": acc[1], "min": acc[0], "max": acc[2]},
        }
        (folder / "summary.json").write_bytes(orjson.dumps(s))


def main():
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        tmp = Path(tmp)
        root = tmp / "root"
        path = root / "sweep"
        t = time.perf_counter()
        sweep(path, RUNS)
        print(f"(a store of {RUNS:,} runs made in {time.perf_counter() - t:.0f} s)")
        query = Query(QUERY)
        rows = [row(s, QUERY_STATS) for s in summaries(path)]
        matched = len(matching(rows, query))
        assert matched == len(runs(path, where=QUERY)) > 0
        print(f"(the query: {QUERY!r}; {matched:,} of {RUNS:,} runs match)")

        time.sleep(2.1)  # the table trusts no file's times within 2 s of its write (record/_table)
        runs(path, where=QUERY)  # warm: the OS has read every summary once, the table is kept
        assert runs_as_before(path, QUERY).equals(runs(path, where=QUERY))
        plain = median_ms(lambda: runs(path), repeat=REPEAT)
        where = median_ms(lambda: runs(path, where=QUERY), repeat=REPEAT)
        before = median_ms(lambda: runs_as_before(path, QUERY), repeat=REPEAT)
        where_cpu = cpu_ms(lambda: runs(path, where=QUERY))
        before_cpu = cpu_ms(lambda: runs_as_before(path, QUERY))
        listing = median_ms(lambda: kept_table(path, QUERY_STATS), repeat=REPEAT)
        floor = median_ms(lambda: stats_alone(path), repeat=REPEAT)
        parse = median_ms(lambda: Query(QUERY), repeat=REPEAT)
        ask = median_ms(lambda: matching(rows, query), repeat=REPEAT)
        columns = Columns(rows)
        query.mask(columns)  # the columns made once, as the kept table keeps them
        ask_columns = median_ms(lambda: query.mask(columns), repeat=REPEAT)

        sid = store_id("sweep")

        def fresh():
            b = Browser(root)
            b.runs(sid, where=QUERY)

        first = median_ms(fresh, repeat=3)
        browser = Browser(root)
        page = browser.runs(sid, where=QUERY)
        assert page["total"] == matched and len(page["runs"]) == min(matched, 1000)
        again = median_ms(lambda: browser.runs(sid, where=QUERY), repeat=REPEAT)
        by_loss = median_ms(lambda: browser.runs(sid, where=QUERY, sort="loss.best", descending=True), repeat=REPEAT)
        by_lr = median_ms(lambda: browser.runs(sid, sort="config.lr"), repeat=REPEAT)
        sorted_page = browser.runs(sid, where=QUERY, sort="loss.best", descending=True)["runs"]
        assert [r["summarising"]["loss"]["best"] for r in sorted_page] == sorted(
            (r["summarising"]["loss"]["best"] for r in sorted_page), reverse=True)
        t = time.perf_counter()
        _COUNTER.wait(timeout=3600)  # the listings queued counts of findings (10,000: minutes): let them land
        print(f"(findings of the first page counted in the background, {time.perf_counter() - t:.1f} s after)")

        server = Server(root, tmp)
        try:
            url = f"somatize/stores/{sid}/runs?" + urllib.parse.urlencode({"where": QUERY})
            h_first = median_ms(lambda: server.get(url), repeat=1)
            status, _, body = server.get(url)
            assert status == 200 and json.loads(body)["total"] == matched
            h_again = median_ms(lambda: server.get(url), repeat=REPEAT)
            url = f"somatize/stores/{sid}/runs?" + urllib.parse.urlencode(
                {"where": QUERY, "sort": "loss.best", "order": "desc"})
            server.get(url)
            h_by_loss = median_ms(lambda: server.get(url), repeat=REPEAT)
            url = f"somatize/stores/{sid}/runs?" + urllib.parse.urlencode({"sort": "config.lr"})
            server.get(url)
            h_by_lr = median_ms(lambda: server.get(url), repeat=REPEAT)
        finally:
            server.close()

        table = [
            (f"runs(store) of {RUNS:,} runs, no query", None, plain, None),
            (f"runs(store, where=...) of {RUNS:,} runs", None, where, 100),
            ("  the same, CPU time", None, where_cpu, None),
            ("  as before the table was kept", None, before, None),
            ("  as before, CPU time", None, before_cpu, None),
            ("  the kept table's listing (2 stats a run, rows kept)", None, listing, None),
            ("  the 2 stats a run alone", None, floor, None),
            ("  the query read (tokens, parse)", None, parse, None),
            (f"  the query asked of {RUNS:,} rows, row by row", None, ask, None),
            (f"  the query asked of {RUNS:,} rows' columns", None, ask_columns, None),
            ("browser's filtered first page, first time", h_first, first, 200),
            ("browser's filtered first page again (rows kept)", h_again, again, 200),
            ("  the same, sorted by loss.best, descending", h_by_loss, by_loss, 200),
            (f"browser's first page of all {RUNS:,}, sorted by config.lr", h_by_lr, by_lr, None),
        ]
        print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end)")
        print(f"{'':56} {'HTTP ms':>9} {'in-process ms':>14} {'target ms':>10}")
        for label, http, core, target in table:
            http_text = f"{http:9.1f}" if http is not None else f"{'-':>9}"
            print(f"{label:56} {http_text} {core:14.2f} {target if target else '-':>10}")


if __name__ == "__main__":
    main()
