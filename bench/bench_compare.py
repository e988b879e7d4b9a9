"""The explorer of 10,000 runs (issue 21): ``compare(store)``'s first picture
and a brush's round trip to ``explorer.selected``, medians, in one process.

    .venv/bin/python bench/bench_compare.py [--quick]

The store is ``common.sweep``'s: 10,000 runs of 5 config keys (lr, batch, opt,
bn, seed) and 2 summarised facts (loss, acc). Figures:

1. the first picture: ``compare(store)`` and its notebook bundle (the static
   SVG and the bqplot views, built) — target <= 1 s; beside it the same of
   400 runs' worth (one line a run) and ``runs(store)`` alone;
2. a brush's round trip, Python side: a selector's extent set as the page
   sets it, to the query, ``explorer.selected`` and the lines and curves
   handed back to the widgets — target <= 150 ms; beside it ``runs(store,
   where=explorer.where)`` asking the same.

``--quick``: 600 runs, fewer repeats: checks the script runs.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
from common import QUICK, machine, reported, sweep, target
from common import median_ms as timed_ms

from somatize._widgets._compare import DENSE_ABOVE
from somatize.record import compare, runs

RUNS = 600 if QUICK else 10_000
REPEAT = 5 if QUICK else 9


def median_ms(fn, repeat=REPEAT):
    return timed_ms(fn, repeat=repeat)


def first_picture(path, where=None):
    explorer = compare(path, where=where)
    explorer._repr_mimebundle_()
    return explorer


def main():
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        path = Path(tmp) / "sweep"
        t = time.perf_counter()
        sweep(path, RUNS)
        print(f"(a store of {RUNS:,} runs made in {time.perf_counter() - t:.0f} s)")
        runs(path)  # warm: the OS has read every summary once
        first_picture(path)  # and bqplot is imported
        plain = median_ms(lambda: runs(path))
        first = median_ms(lambda: first_picture(path))
        few_where = "config.seed == 3 and config.batch == 32"
        few = median_ms(lambda: first_picture(path, where=few_where))
        small = len(runs(path, where=few_where))

        explorer = first_picture(path)
        selector = explorer._view.selectors[explorer.axes.index("config.lr")]
        extents = [[0.1 + 0.01 * k, 0.5 + 0.01 * k] for k in range(REPEAT)]
        times = []
        for extent in extents:
            t = time.perf_counter()
            selector.brushing = True
            selector.selected = np.array(extent)
            selector.brushing = False  # the brush let go: the query, the selection, the lines, the curves
            chosen = explorer.selected
            times.append(time.perf_counter() - t)
        trip = 1000 * sorted(times)[len(times) // 2]
        assert set(chosen["run"]) == set(runs(path, where=explorer.where)["run"])
        ask = median_ms(lambda: runs(path, where=explorer.where))
        print(f"(the brush's query: {explorer.where!r}; {len(chosen):,} of {RUNS:,} runs)")
        print(f"({machine()} at the end)")
        table = [
            (f"runs(store) of {RUNS:,} runs", plain, None),
            (f"explorer's first picture, {RUNS:,} runs (binned)", first, 1000),
            (f"explorer's first picture, {small} runs "
             f"({'binned' if small > DENSE_ABOVE else 'one line a run'})", few, None),
            (f"brush round trip to explorer.selected, {RUNS:,} runs", trip, 150),
            ("  runs(store, where=explorer.where) asking the same", ask, None),
        ]
        print(f"{'':58} {'ms':>9} {'target ms':>10}")
        for label, ms, bound in table:
            print(f"{label:58} {ms:9.1f} {bound if bound else '-':>10}")
        reported("the brush's round trip / runs(where=) asking the same", trip / ask)
        target(f"the explorer's first picture, {RUNS:,} runs", first, 1000, "ms")
        target(f"a brush's round trip to explorer.selected, {RUNS:,} runs", trip, 150, "ms")


if __name__ == "__main__":
    main()
