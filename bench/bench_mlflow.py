"""Listing 1,000 runs: somatize's run browser beside `mlflow.search_runs`,
side by side in one process (issue 10 asks for the comparison if MLflow
installs here; it does, as `mlflow-skinny`); and one question asked of them
both (issue 21): `runs(store, where=...)` beside `search_runs(filter_string=)`.

    python -m venv /tmp/mlvenv && /tmp/mlvenv/bin/pip install mlflow-skinny sqlalchemy alembic orjson xxhash
    PYTHONPATH=. /tmp/mlvenv/bin/python bench/bench_mlflow.py [--quick]

MLflow is kept out of somatize's own environments (it would bring dozens of
packages into them), so this bench runs in a venv of its own with somatize
on PYTHONPATH. The same 1,000 runs are written to both: 100 forwards each, a
`loss` per forward and an `lr` parameter; MLflow's in a local SQLite database, the
backend MLflow 3 asks for (its file store is in maintenance mode and refuses
to open unless told to) (`log_batch`, one call a run), somatize's by a Recorder. Medians of repeated
calls; "first time" builds a new reader each call (nothing cached).

The anchor of the listing's targets (bench_browser.py): the run browser's
first listing and ``runs(where=)`` at least as fast as MLflow's search of
the same runs (<= 1x its time).
"""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from pathlib import Path

from common import QUICK, machine, reported, target
from common import median_ms as timed_ms

RUNS = 200 if QUICK else 1_000
REPEAT = 3 if QUICK else 7


def median_ms(fn):
    return timed_ms(fn, repeat=REPEAT)


def somatize_runs(root: Path):
    from somatize import Recorder, Store

    store = Store(root / "store")
    for k in range(RUNS):
        with Recorder(store, run=f"run-{k:05d}", config={"lr": 10.0 ** -(k % 4)}) as r:
            for i in range(100):
                r.forward_began()
                r({"fact": "ran", "node": "body", "began_us": 0, "took_us": 20})
                r({"fact": "finished", "took_us": 25})
                r({"fact": "loss", "value": 1.0 / (i + 1)})
    return store


def mlflow_runs(root: Path):
    import mlflow
    from mlflow.entities import Metric, Param

    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    client = mlflow.tracking.MlflowClient()
    eid = client.create_experiment("bench")
    for k in range(RUNS):
        run = client.create_run(eid, run_name=f"run-{k:05d}")
        metrics = [Metric("loss", 1.0 / (i + 1), 0, i) for i in range(100)]
        client.log_batch(run.info.run_id, metrics=metrics, params=[Param("lr", str(10.0 ** -(k % 4)))])
        client.set_terminated(run.info.run_id)
    return eid


def main():
    import mlflow

    from somatize._server._browse import Browser
    from somatize._server._discover import store_id
    from somatize.record import runs

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="bench-mlflow-") as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        store = somatize_runs(tmp)
        made_ours = time.perf_counter() - t
        t = time.perf_counter()
        eid = mlflow_runs(tmp)
        made_theirs = time.perf_counter() - t
        print(f"({RUNS:,} runs written: somatize {made_ours:.1f} s, MLflow {made_theirs:.1f} s)")

        sid = store_id("store")
        browser = Browser(tmp)
        browser.stores()
        assert len(browser.runs(sid)["runs"]) == RUNS
        assert len(mlflow.search_runs([eid], max_results=RUNS)) == RUNS
        assert len(runs(store)) == RUNS
        # the same question both ways. MLflow keeps params as strings (no "lr <= 0.01"), takes IN only for
        # run ids and has no OR (mlflow #6075): one search per value of lr, the answers concatenated
        ours = "config.lr <= 0.01 and loss.last < 0.02"
        theirs = [f"params.lr = '{lr}' and metrics.loss < 0.02" for lr in ("0.01", "0.001")]

        def search():
            import pandas as pd

            return pd.concat([mlflow.search_runs([eid], filter_string=f, max_results=RUNS) for f in theirs])

        asked = len(runs(store, where=ours))
        assert asked == len(search()) == RUNS // 2
        assert browser.runs(sid, where=ours)["total"] == asked
        rows = [
            ("run browser listing (what the sidebar asks), first time",
             median_ms(lambda: Browser(tmp).runs(sid))),
            ("run browser listing, again", median_ms(lambda: browser.runs(sid))),
            ("somatize.record.runs(store), a DataFrame", median_ms(lambda: runs(store))),
            (f"mlflow.search_runs(max_results={RUNS}), a DataFrame",
             median_ms(lambda: mlflow.search_runs([eid], max_results=RUNS))),
            (f"runs(store, where={ours!r})", median_ms(lambda: runs(store, where=ours))),
            ("run browser listing with that where=, again", median_ms(lambda: browser.runs(sid, where=ours))),
            ("mlflow.search_runs(filter_string=...) x2, the same runs", median_ms(search)),
        ]
    print(f"{RUNS:,} runs; {machine()}")
    print(f"{'':58}{'ms':>10}")
    for name, ms in rows:
        print(f"{name:58}{ms:10.1f}")
    reported("somatize.record.runs(store) / mlflow.search_runs", rows[2][1] / rows[3][1])
    target(f"the run browser's first listing of {RUNS:,} runs / mlflow.search_runs", rows[0][1] / rows[3][1], 1.0)
    target("runs(where=) / mlflow.search_runs(filter_string), the same runs", rows[4][1] / rows[6][1], 1.0)


if __name__ == "__main__":
    main()
