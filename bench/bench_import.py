"""Importing TensorBoard's event files (``somatize import tensorboard``,
issue 32 item 5), beside TensorBoard reading the same files itself, side by
side in one process.

    .venv/bin/python bench/bench_import.py [--rounds 3] [--quick]

The logdir: RUNS runs (one folder each, two levels deep: ``sweep<i>/run<j>``),
each 10,000 scalars (``train/loss`` and ``train/lr`` on 5,000 steps, a step
every 0.1 s of event time) and its hparams, written with TensorBoard's own
writer (``EventFileWriter``, ``event_pb2``; no TensorFlow, no torch).

1. The import: ``somatize.import_tensorboard(logdir, store)`` into a new
   store, every run written durably and closed; beside TensorBoard's own
   loading of the same runs into memory (``EventAccumulator`` with a size
   guidance of 0, keeping every scalar and tensor: what its server does
   before it draws one). Both read each record with TensorBoard's
   pure-Python record reader (crc32c computed a byte at a time in Python),
   which is most of both. Target: import <= 1.5x TensorBoard's loading
   (reading and writing durably, beside reading alone); the ratio is the
   median of per-round ratios, the two interleaved.
2. The store's runs beside the event files, in bytes (and on disk, whole
   blocks, reported): target <= 2x. The record keeps each point twice, by
   design: its fact in the log (the truth: orjson text, a float32 value
   widened to the float64 it is, ~50 bytes) and its series (16 bytes, what
   a curve reads), plus ``wall_s`` on the steps a live ``log()`` says it;
   an event keeps a point once (~48 bytes with its wall time and step).
3. Importing again, every run skipped (its summary read, its event files'
   names and sizes compared): reported, with its share of the import.

``--quick``: 10 runs of 1,000 scalars, 2 rounds: checks the script runs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import QUICK, machine, reported, target

import somatize

RUNS = 10 if QUICK else 100
STEPS = 500 if QUICK else 5_000  # two scalars a step: 10,000 a run
T0 = 1_700_000_000.0


def write_logdir(logdir: Path) -> tuple[int, int]:
    """RUNS runs of 2 x STEPS scalars and hparams, with TensorBoard's own
    writer; the event files' bytes (``size_of``)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.hparams import summary_v2 as hp
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    for i in range(RUNS):
        folder = logdir / f"sweep{i // 10}" / f"run{i % 10}"
        writer = EventFileWriter(str(folder), max_queue_size=1_000)
        lr = 10 ** (-1 - i % 4)
        writer.add_event(event_pb2.Event(wall_time=T0, summary=hp.hparams_pb(
            {"lr": lr, "batch": 32 * (1 + i % 3), "opt": ("adam", "sgd")[i % 2]}, trial_id=f"run{i}")))
        for step in range(STEPS):
            values = [summary_pb2.Summary.Value(tag="train/loss", simple_value=1.0 / (1 + step) + i / 1000),
                      summary_pb2.Summary.Value(tag="train/lr", simple_value=lr * (1 - step / STEPS))]
            for value in values:  # one event a scalar, as add_scalar writes them
                writer.add_event(event_pb2.Event(wall_time=T0 + 0.1 * step, step=step,
                                                 summary=summary_pb2.Summary(value=[value])))
        writer.close()
    return size_of(logdir)


def size_of(folder: Path) -> tuple[int, int]:
    """Bytes of every regular file below ``folder``: their sizes, and as
    allocated on disk (whole blocks)."""
    size = disk = 0
    for path in folder.rglob("*"):
        st = path.lstat()
        if path.is_file() and not path.is_symlink():
            size += st.st_size
            disk += st.st_blocks * 512
    return size, disk


def import_once(logdir: Path, where: Path) -> float:
    """Seconds to import ``logdir`` into a new store at ``where`` (a new
    path each time: a path's Store is opened once a process)."""
    for old in where.parent.glob("store*"):
        shutil.rmtree(old)
    t = time.perf_counter()
    got = somatize.import_tensorboard(logdir, where)
    took = time.perf_counter() - t
    assert [o.outcome for o in got] == ["imported"] * RUNS, got[:3]
    assert sum(o.points for o in got) == RUNS * 2 * STEPS
    return took


def tensorboard_once(logdir: Path) -> float:
    """Seconds for TensorBoard's ``EventAccumulator`` to load every run."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    guidance = {ea.SCALARS: 0, ea.TENSORS: 0, ea.HISTOGRAMS: 0, ea.IMAGES: 0, ea.AUDIO: 0}
    folders = sorted({p.parent for p in logdir.rglob("*tfevents*")})
    t = time.perf_counter()
    points = 0
    for folder in folders:
        acc = ea.EventAccumulator(str(folder), size_guidance=guidance)
        acc.Reload()
        points += sum(len(acc.Scalars(tag)) for tag in acc.Tags()[ea.SCALARS])
    took = time.perf_counter() - t
    assert points == RUNS * 2 * STEPS, points
    return took


def main():
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--rounds", type=int, default=2 if QUICK else 3)
    args.add_argument("--quick", action="store_true")
    rounds = args.parse_args().rounds
    import logging

    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        logdir = tmp / "logs"
        t = time.perf_counter()
        events = write_logdir(logdir)
        print(f"{RUNS} runs x {2 * STEPS:,} scalars written by TensorBoard's writer in "
              f"{time.perf_counter() - t:.1f} s: {events[0] / 1e6:.1f} MB of event files; {machine()}")
        ours, theirs = [], []
        for r in range(rounds):  # interleaved, the order turned each round
            for name in (("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")):
                if name == "ours":
                    ours.append(import_once(logdir, tmp / f"store{r}"))
                else:
                    theirs.append(tensorboard_once(logdir))
        last = tmp / f"store{rounds - 1}"
        store = size_of(last / "runs")
        again = []
        for _ in range(rounds):
            t = time.perf_counter()
            got = somatize.import_tensorboard(logdir, last)
            again.append(time.perf_counter() - t)
            assert [o.outcome for o in got] == ["skipped"] * RUNS
    points = RUNS * 2 * STEPS
    mine, tb = statistics.median(ours), statistics.median(theirs)
    print(f"import {mine:.2f} s ({points / mine / 1e3:.0f}k points/s); TensorBoard's loading {tb:.2f} s "
          f"({points / tb / 1e3:.0f}k points/s); rounds: {[round(x, 2) for x in ours]} / "
          f"{[round(x, 2) for x in theirs]}")
    target(f"import of {RUNS} runs x {2 * STEPS:,} scalars / TensorBoard loading them",
           statistics.median(a / b for a, b in zip(ours, theirs)), 1.5)
    print(f"the store's runs: {store[0] / 1e6:.2f} MB ({store[1] / 1e6:.2f} MB on disk); the event files: "
          f"{events[0] / 1e6:.2f} MB ({events[1] / 1e6:.2f} MB on disk)")
    target("the store's runs / their event files, bytes", store[0] / events[0], 2.0)
    reported("the same, bytes on disk (whole blocks)", store[1] / events[1])
    reported("importing again, every run skipped / the import", statistics.median(again) / mine)
    reported("importing again, every run skipped", 1000 * statistics.median(again), unit="ms")


if __name__ == "__main__":
    main()
