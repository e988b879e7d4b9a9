"""A Recorder's fixed cost on a short run (issue 18): ``Recorder(store)`` and
``rec.close()`` of the reference model's 300-step run with the instruments
on (~2,400 facts, ~22 series), this tree's Recorder against another
revision's, interleaved round by round in one process.

The facts are a real run's: the reference model (bench_trainer's graph and
batches) trained 300 steps by a Trainer watching a Recorder, instruments on,
its facts taken as they were handed over. Each round, each variant makes a
Recorder (timed: ``make``), is handed the same facts in one ``take`` and
closed (timed: ``close``, wall and the calling thread's CPU), the flusher
kept away (``FLUSH_EVERY`` raised) so the close does all the work, as on a
run shorter than the flusher's period. A ratio is the median over rounds of
(this tree / the other) in the same round.

    .venv/bin/python bench/bench_close.py [--against main] [--rounds 41]

``--against REV``: the other Recorder is ``somatize`` at REV (``git
archive`` into a temp folder, imported under another name).

``--whole``: instead, whole 300-step runs as bench_user_loop.py times them
(the Recorder made, the Trainer's steps, ``close()``; the flusher at its
usual period), this tree's Recorder and REV's under this tree's Trainer,
with the hand-written loop (raw+item) and the Trainer alone beside them,
interleaved, the order rotating; ratios are medians of per-round ratios.
"""

import argparse
import gc
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def facts_of_a_run(steps=300):
    """The facts the reference run hands its Recorder, forward markers included."""
    import torch
    from bench_trainer import MSE, data, graph

    import somatize.torch  # noqa: F401
    from somatize import Recorder, Store
    from somatize.record import _flusher
    from somatize.torch import Trainer, parameters

    torch.set_num_threads(1)
    every, _flusher.FLUSH_EVERY = _flusher.FLUSH_EVERY, 1e6
    store = Store(os.path.join(tempfile.mkdtemp(), "record"))
    rec = Recorder(store, summarising=["loss"])
    g = graph()
    tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=rec)
    for b in data(steps):
        tr.step(b)
    rec._holders()  # what the Trainer holds back, handed over
    taken = list(rec._pending)
    rec.close()
    _flusher.FLUSH_EVERY = every
    return taken


def other_somatize(rev):
    """``somatize`` at ``rev`` as the package ``somatize_<rev>``."""
    name = "somatize_" + "".join(c if c.isalnum() else "_" for c in rev)
    where = Path(tempfile.mkdtemp())
    tar = subprocess.run(["git", "archive", rev, "somatize"], cwd=HERE.parent, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=tar, check=True)
    (where / "somatize").rename(where / name)
    sys.path.insert(0, str(where))
    return importlib.import_module(f"{name}.record._recorder"), importlib.import_module(f"{name}.record._flusher")


def timed(recorder_class, root, taken):
    clock, cpu = time.perf_counter, time.thread_time
    c0, t0 = cpu(), clock()
    rec = recorder_class(root, summarising=["loss"])
    c1, t1 = cpu(), clock()
    rec.take(taken)
    c2, t2 = cpu(), clock()
    rec.close()
    return t1 - t0, c1 - c0, clock() - t2, cpu() - c2


def recorded(recorder_class):
    """bench_user_loop's trainer+recorder, with ``recorder_class``."""
    import torch
    from bench_trainer import MSE, graph

    from somatize.torch import Trainer, parameters

    def run(batches, store):
        g = graph()
        c0, t0 = time.process_time(), time.perf_counter()
        rec = recorder_class(store, summarising=["loss"])
        tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=rec)
        for b in batches:
            tr.step(b)
        t2 = time.perf_counter()
        rec.close()
        t3 = time.perf_counter()
        return t3 - t0, t3 - t2, time.process_time() - c0

    return run


def whole(args):
    import bench_user_loop
    import torch
    from bench_trainer import data

    from somatize.record import _recorder

    torch.set_num_threads(1)
    old, _ = other_somatize(args.against)

    def plain(run):  # bench_user_loop's (whole, make, steps, close, CPU) as (whole, close, CPU)
        return lambda batches, store: (lambda x: (x[0], x[3], x[4]))(run(batches, store))

    variants = {"raw+item": plain(bench_user_loop.raw(True)), "trainer": plain(bench_user_loop.trainer),
                "t+r this tree": recorded(_recorder.Recorder), f"t+r {args.against}": recorded(old.Recorder)}
    batches = data(args.steps)
    root = os.path.join(tempfile.mkdtemp(), "record")
    names = list(variants)
    for f in variants.values():
        f(batches[:30], root)
    got = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            gc.collect()
            got[n].append(variants[n](batches, root))
    print(f"{args.steps} steps x {args.rounds} rounds, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'variant':<16} {'ms/run':>7} {'x raw+item':>11} {'x ' + args.against:>10} {'close ms':>9}"
          f" {'CPU x raw+item':>15} {'best x raw+item':>16}")
    for n in names:
        print(f"{n:<16} {statistics.median(x[0] for x in got[n]) * 1e3:>7.1f}"
              f" {statistics.median(a[0] / b[0] for a, b in zip(got[n], got['raw+item'])):>10.3f}x"
              f" {statistics.median(a[0] / b[0] for a, b in zip(got[n], got[f't+r {args.against}'])):>9.3f}x"
              f" {statistics.median(x[1] for x in got[n]) * 1e3:>9.2f}"
              f" {statistics.median(a[2] / b[2] for a, b in zip(got[n], got['raw+item'])):>14.3f}x"
              f" {min(x[0] for x in got[n]) / min(x[0] for x in got['raw+item']):>15.3f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", default="main")
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--whole", action="store_true")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    if args.whole:
        return whole(args)
    from somatize.record import _flusher, _recorder

    taken = facts_of_a_run(args.steps)
    old, old_flusher = other_somatize(args.against)
    _flusher.FLUSH_EVERY = old_flusher.FLUSH_EVERY = 1e6
    variants = {"this tree": _recorder.Recorder, args.against: old.Recorder}
    root = os.path.join(tempfile.mkdtemp(), "record")
    for cls in variants.values():  # warm up: lazy imports, the fsync threads
        for _ in range(3):
            timed(cls, root, taken)
    got = {n: [] for n in variants}
    names = list(variants)
    for r in range(args.rounds):
        for n in names if r % 2 else names[::-1]:
            gc.collect()
            got[n].append(timed(variants[n], root, taken))
    n_facts = sum(f is not None for f in taken)
    print(f"{n_facts} facts in {args.steps} forwards, {args.rounds} rounds, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    heads = ("make", "make CPU", "close", "close CPU")
    print(f"{'variant':<12}" + "".join(f" {h + ' ms':>13}" for h in heads) + "".join(f" {'x ' + h:>12}" for h in heads))
    base = got[args.against]
    for n in names:
        med = [statistics.median(x[i] for x in got[n]) * 1e3 for i in range(4)]
        ratio = [statistics.median(a[i] / b[i] for a, b in zip(got[n], base)) for i in range(4)]
        print(f"{n:<12}" + "".join(f" {m:>13.2f}" for m in med) + "".join(f" {r:>11.3f}x" for r in ratio))


if __name__ == "__main__":
    main()
