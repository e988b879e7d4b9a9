"""The run browser's listing of a store of more than one page, this tree
beside another commit's: every page by name and by ``loss.last`` (later
pages asked with the first page's ``listing`` token where the code answers
one), and an unchanged first page polled with its tag (the 304 the sidebar
gets every few seconds).

    .venv/bin/python bench/bench_pages.py [--runs 2500] [--rounds 6] [--against 219e2a6]

Each round runs one process of each tree, in turn, on the same store
(``Browser`` in-process, no HTTP; medians of 15 repetitions a process);
the ratio is the median over rounds of this tree's figure over the other's
in the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def inner(root, repeat):
    from somatize._server._browse import Browser

    b = Browser(root)
    (sid,) = [s["id"] for s in b.stores()]

    def pages(**asked):
        offset, listing = 0, ""
        while offset is not None:
            page = b.runs(sid, offset=offset, **asked, **({"listing": listing} if listing else {}))
            offset, listing = page["next"], page.get("listing") or ""

    def polled(**asked):
        _, tag = b.runs_tagged(sid, **asked)
        return lambda: b.runs_tagged(sid, unless={tag}, **asked)

    asks = {"every page by name": pages, "every page by loss.last": lambda: pages(sort="loss.last"),
            "first page polled (304), by name": polled(),
            "first page polled (304), by loss.last": polled(sort="loss.last")}
    out = {}
    for name, fn in asks.items():
        fn()
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        out[name] = statistics.median(times) * 1e3
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2500)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--against", default="219e2a6")
    ap.add_argument("--inner", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        return inner(args.inner[0], int(args.inner[1]))
    from somatize import Recorder, Store

    root = tempfile.mkdtemp()
    store = Store(os.path.join(root, "s"))
    for i in range(args.runs):
        with Recorder(store, run=f"r{i:05d}") as r:
            r.forward_began()
            r({"fact": "loss", "value": float(i % 97)})
    other = tempfile.mkdtemp()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.against, "somatize"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", other], input=archive, check=True)
    got = {"this tree": [], args.against: []}
    for _ in range(args.rounds):
        for name, path in (("this tree", str(ROOT)), (args.against, other)):
            done = subprocess.run([sys.executable, __file__, "--inner", root, "15"], capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": path}, check=True)
            got[name].append(json.loads(done.stdout))
    print(f"{args.runs} runs (3 pages of 1,000), {args.rounds} rounds, Browser in-process, medians in ms")
    print(f"{'ask':<40} {args.against:>10} {'this tree':>10} {'ratio':>7}")
    for ask in got["this tree"][0]:
        mine = statistics.median(g[ask] for g in got["this tree"])
        theirs = statistics.median(g[ask] for g in got[args.against])
        ratio = statistics.median(a[ask] / b[ask] for a, b in zip(got["this tree"], got[args.against]))
        print(f"{ask:<40} {theirs:>10.1f} {mine:>10.1f} {ratio:>6.3f}x")


if __name__ == "__main__":
    main()
