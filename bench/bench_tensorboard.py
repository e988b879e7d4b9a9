"""Asking 10,000 runs a question: TensorBoard's HParams beside somatize's
``runs(store, where=...)`` (issue 21), side by side in one process.

    python -m venv /tmp/tbvenv && /tmp/tbvenv/bin/pip install tensorboard pandas orjson xxhash
    PYTHONPATH=. /tmp/tbvenv/bin/python bench/bench_tensorboard.py [--quick]

TensorBoard is kept out of somatize's own environments (it brings grpcio,
protobuf and its own data server), so this bench runs in a venv of its own
with somatize on PYTHONPATH, as bench_mlflow does for MLflow. No TensorFlow:
the event files are written with TensorBoard's own writer and protos.

The runs: ``common.sweep``'s store (10,000 runs; config lr, batch, opt, bn, seed;
loss and acc summarised), and the same runs as TensorBoard event files, one
folder a run (its hparams, and its loss.best and acc.best as the scalars
``loss_best`` and ``acc_best``, the last value of a tag being what HParams
shows), with the experiment's hparams config at the root. TensorBoard is
asked as its HParams dashboard asks it, over HTTP, by its own server
(``tensorboard --logdir``, its default loader): ``session_groups``, a
session group a run. Figures:

1. the time from starting ``tensorboard`` until HParams lists all 10,000
   runs (it reads the event files in the background), beside somatize's
   first ``runs(store)`` in a fresh process's first listing;
2. warm: ``common.QUERY`` in HParams' filters (``lr`` below 1e-2,
   ``loss_best`` below 0.1, ``opt`` one of adam and rmsprop, ``bn`` true;
   TensorBoard's intervals are closed: each ends at the float below the bound)
   and all 10,000 runs unfiltered, beside ``runs(store, where=...)``; both
   must find the same runs.

The anchor of the listing's targets (bench_browser.py): ``runs(where=)`` at
least as fast as HParams asking the same (<= 1x its time).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson
from common import QUERY, QUICK, machine, median_ms, reported, sweep, target

RUNS = 2_000 if QUICK else 10_000
REPEAT = 5 if QUICK else 9


def write_events(store: Path, logdir: Path) -> int:
    """Each run of ``store`` as TensorBoard event files under ``logdir``: its
    hparams and its loss.best and acc.best as scalars; the hparams config at
    the root. Returns how many runs were written."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.hparams import summary_v2 as hp
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    config = EventFileWriter(str(logdir))
    config.add_event(event_pb2.Event(wall_time=time.time(), summary=hp.hparams_config_pb(
        hparams=[hp.HParam("lr", hp.RealInterval(1e-4, 1.0)), hp.HParam("batch", hp.Discrete([16, 32, 64, 128])),
                 hp.HParam("opt", hp.Discrete(["adam", "sgd", "rmsprop"])), hp.HParam("bn", hp.Discrete([False, True])),
                 hp.HParam("seed", hp.IntInterval(0, 9))],
        metrics=[hp.Metric("loss_best"), hp.Metric("acc_best")])))
    config.close()
    count = 0
    for folder in sorted((store / "runs").iterdir()):
        s = orjson.loads((folder / "summary.json").read_bytes())
        writer = EventFileWriter(str(logdir / folder.name))
        writer.add_event(event_pb2.Event(wall_time=s["started"], summary=hp.hparams_pb(s["config"],
                                                                                       trial_id=folder.name)))
        values = [summary_pb2.Summary.Value(tag="loss_best", simple_value=s["summarising"]["loss"]["min"]),
                  summary_pb2.Summary.Value(tag="acc_best", simple_value=s["summarising"]["acc"]["max"])]
        writer.add_event(event_pb2.Event(wall_time=s["updated"], step=0, summary=summary_pb2.Summary(value=values)))
        writer.close()
        count += 1
    return count


STATUSES = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]
ALL = {"experimentName": "", "allowedStatuses": STATUSES, "startIndex": 0, "sliceSize": 100_000,
       "colParams": [{"hparam": h} for h in ("lr", "batch", "opt", "bn", "seed")]
       + [{"metric": {"tag": m, "group": ""}} for m in ("loss_best", "acc_best")]}
FILTERED = dict(ALL, colParams=[
    {"hparam": "lr", "filterInterval": {"minValue": 0.0, "maxValue": math.nextafter(1e-2, 0)}},  # < 1e-2
    {"hparam": "batch"},
    {"hparam": "opt", "filterDiscrete": ["adam", "rmsprop"]},
    {"hparam": "bn", "filterDiscrete": [True]},
    {"hparam": "seed"},
    {"metric": {"tag": "loss_best", "group": ""}, "filterInterval": {"minValue": -1e9,
                                                                      "maxValue": math.nextafter(0.1, 0)}},
    {"metric": {"tag": "acc_best", "group": ""}}])


def ask(port, body) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/data/plugin/hparams/session_groups", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-XSRF-Protected": "1"}, method="POST")
    with urllib.request.urlopen(request, timeout=300) as r:
        return json.load(r)


def runs_of(answer) -> set:
    return {s["name"].strip("/").split("/")[-1] for g in answer.get("sessionGroups", []) for s in g["sessions"]}


def main():
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        tmp = Path(tmp)
        store, logdir = tmp / "store", tmp / "logs"
        t = time.perf_counter()
        sweep(store, RUNS)
        wrote = write_events(store, logdir)
        print(f"({RUNS:,} runs made, in a store and as {wrote:,} TensorBoard runs, in "
              f"{time.perf_counter() - t:.0f} s)")

        code = ("import sys, time; t = time.perf_counter(); from somatize.record import runs; "
                "n = len(runs(sys.argv[1])); print(n, 1000 * (time.perf_counter() - t))")
        out = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        listed, first_somatize = out.stdout.split()
        assert int(listed) == RUNS

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        t = time.perf_counter()
        board = subprocess.Popen([str(Path(sys.executable).parent / "tensorboard"), "--logdir", str(logdir),
                                  "--host", "127.0.0.1", "--port", str(port)],
                                 stdout=subprocess.DEVNULL, stderr=open(tmp / "tb.log", "w"))
        try:
            seen = 0
            while time.perf_counter() - t < 1200:
                try:
                    seen = len(runs_of(ask(port, ALL)))
                except OSError:
                    seen = 0
                if seen >= RUNS:
                    break
                time.sleep(0.5)
            first_tb = 1000 * (time.perf_counter() - t)
            assert seen == RUNS, f"HParams listed {seen} runs after 20 minutes: {(tmp / 'tb.log').read_text()[-2000:]}"

            from somatize.record import runs

            ours = set(runs(store, where=QUERY)["run"])
            theirs = runs_of(ask(port, FILTERED))
            assert theirs == ours and ours, (len(theirs), len(ours))
            time.sleep(2.1)  # the kept table trusts no file's times within 2 s of its write
            runs(store, where=QUERY)
            where = median_ms(lambda: runs(store, where=QUERY), repeat=REPEAT)
            plain = median_ms(lambda: runs(store), repeat=REPEAT)
            tb_filtered = median_ms(lambda: ask(port, FILTERED), repeat=REPEAT)
            tb_all = median_ms(lambda: ask(port, ALL), repeat=REPEAT)
        finally:
            board.terminate()
            board.wait(30)
        import tensorboard

        print(f"(TensorBoard {tensorboard.__version__}; the question: {QUERY!r}; both find {len(ours):,} runs; "
              f"{machine()} at the end)")
        rows = [
            (f"first listing of {RUNS:,} runs, from a cold start", float(first_somatize), first_tb),
            (f"the question asked of {RUNS:,} runs, warm", where, tb_filtered),
            (f"all {RUNS:,} runs, warm", plain, tb_all),
        ]
        print(f"{'':48} {'somatize ms':>12} {'TensorBoard HParams ms':>23}")
        for label, a, b in rows:
            print(f"{label:48} {a:12.1f} {b:23.1f}")
        reported(f"the first listing of {RUNS:,} runs from a cold start / HParams'", rows[0][1] / rows[0][2])
        target(f"runs(where=) of {RUNS:,} runs, warm / HParams asking the same", rows[1][1] / rows[1][2], 1.0)


if __name__ == "__main__":
    main()
