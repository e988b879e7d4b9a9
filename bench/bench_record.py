"""The record's writes and reads, medians of repeated runs, side by side in
one process.

    .venv/bin/python bench/bench_record.py [--quick]

1. durable sustained writes: facts/s through recorder(fact) + close (every
   fact flushed and synced), beside sqlite batched executemany inserts +
   commit of the same rows (the anchor) — target >= 1M facts/s;
2. a 100k-point curve read — target <= 30 ms;
3. one forward's facts from a 1M-fact run — target <= 1 ms;
4. `somatize runs` on a store of 1,000 runs, the whole command — target
   <= 200 ms; beside it the function in process;
5. `somatize runs` beside a run summarising 40,000 facts (reported).

``--quick``: 200k facts, 200 runs, fewer repeats: checks the script runs.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import QUICK, machine, reported, target

from somatize import Recorder, Store
from somatize.cli import runs_table
from somatize.record import curve, facts

FACTS = 200_000 if QUICK else 1_000_000
RUNS = 200 if QUICK else 1_000
REPEAT = 3 if QUICK else 5


def median_of(fn, repeat=REPEAT):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def a_step(i):
    return [
        {"fact": "ran", "node": "body", "began_us": 2, "took_us": 100 + i % 7},
        {"fact": "ran", "node": "head", "began_us": 123, "took_us": 32},
        {"fact": "finished", "took_us": 175},
        {"fact": "updated"},
        {"fact": "loss", "value": 1.0 / (i + 1)},
    ]


STEPS = [a_step(i) for i in range(FACTS // 5)]


def recorder_writes(root):
    runs = iter(range(10**6))

    def once():
        recorder = Recorder(Store(root), run=f"w{next(runs)}")
        for step in STEPS:
            recorder.forward_began()
            for fact in step:
                recorder(fact)
        recorder.close()  # flush + fsync: every fact durable when this returns

    return FACTS / median_of(once)


def hand_over(root):
    """What the engine pays per fact: the hot path alone, on a Recorder made
    just before (the flusher leaves one younger than its period alone, so no
    flush falls inside the timing)."""
    some = STEPS[:20_000]
    times = []
    for k in range(REPEAT):
        recorder = Recorder(Store(root), run=f"hand-over-{k}")
        t = time.perf_counter()
        for step in some:
            recorder.forward_began()
            for fact in step:
                recorder(fact)
        times.append((time.perf_counter() - t) / (5 * len(some)))
        recorder.close()
    return statistics.median(times)


def sqlite_writes(root):
    rows = [(i, f["fact"], f.get("node"), f.get("took_us"), f.get("value"))
            for i, step in enumerate(STEPS) for f in step]
    runs = iter(range(10**6))

    def once():
        db = sqlite3.connect(Path(root) / f"s{next(runs)}.db")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("create table facts (forward int, fact text, node text, took_us int, value real)")
        for start in range(0, len(rows), 10_000):
            db.executemany("insert into facts values (?,?,?,?,?)", rows[start : start + 10_000])
        db.commit()
        db.close()

    return len(rows) / median_of(once)


def main():
    root = tempfile.mkdtemp(prefix="bench-record-", dir=os.environ.get("BENCH_DIR"))
    store = Store(Path(root) / "store")
    print(f"facts per write run: {FACTS:,}; {machine()}")
    ours = recorder_writes(Path(root) / "store")
    anchor = sqlite_writes(root)
    print(f"durable writes   : {ours / 1e6:.2f} M facts/s   "
          f"sqlite executemany+commit: {anchor / 1e6:.2f} M rows/s   ratio {ours / anchor:.2f}x")
    print(f"hand-over        : {hand_over(Path(root) / 'store') * 1e9:.0f} ns a fact on the caller's thread "
          "(recorder(fact), forward_began() shared by its forward)")

    with Recorder(store, run="curve") as recorder:
        for i in range(100_000):
            recorder.forward_began()
            recorder({"fact": "loss", "value": 1.0 / (i + 1)})
    assert len(curve(store, "curve", "loss")) == 100_000
    curve_ms = median_of(lambda: curve(store, "curve", "loss"), 11) * 1e3
    print(f"100k-point curve : {curve_ms:.2f} ms")

    big = "w0"  # the first write run: FACTS facts
    last = FACTS // 5 - 1
    assert facts(store, big, forward=last // 2) == STEPS[last // 2]
    forwards = [0, last // 3, last // 2, last]
    forward_ms = statistics.median(median_of(lambda n=n: facts(store, big, forward=n), 21) for n in forwards) * 1e3
    print(f"one forward      : {forward_ms:.3f} ms from a {FACTS:,}-fact run")

    many = Store(Path(root) / "many")
    for k in range(RUNS):
        with Recorder(many, run=f"run-{k:04d}", summarising=["loss"]) as recorder:
            recorder.forward_began()
            recorder({"fact": "loss", "value": float(k)})
    assert runs_table(many.path).count("\n") == RUNS
    t = median_of(lambda: runs_table(many.path), 7)
    cmd = [sys.executable, "-m", "somatize.cli", "runs", str(many.path)]
    whole = median_of(lambda: subprocess.run(cmd, capture_output=True, check=True), 5)
    bare = median_of(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 5)
    print(f"runs, {RUNS:,} runs : {t * 1e3:.1f} ms in process   whole command {whole * 1e3:.0f} ms "
          f"(python itself: {bare * 1e3:.0f} ms)")

    wide = Store(Path(root) / "wide")
    names = [f"m{i:05d}" for i in range(40_000)]
    with Recorder(wide, run="wide", summarising=names) as recorder:
        recorder.forward_began()
        recorder({"fact": "m00000", "value": 1.0})
    for k in range(10):
        Recorder(wide, run=f"run-{k}").close()
    wide_ms = median_of(lambda: runs_table(wide.path), 3) * 1e3
    reported("durable writes / sqlite executemany + commit (the anchor)", ours / anchor)
    reported("`somatize runs` beside a run summarising 40,000 facts, in process", wide_ms, "ms")
    target("durable sustained writes", ours / 1e6, 1.0, "M facts/s", at_least=True)
    target("a 100k-point curve read", curve_ms, 30, "ms")
    target(f"one forward's facts from a {FACTS:,}-fact run", forward_ms, 1, "ms")
    target(f"`somatize runs` on {RUNS:,} runs, the whole command", whole * 1e3, 200, "ms")


if __name__ == "__main__":
    main()
