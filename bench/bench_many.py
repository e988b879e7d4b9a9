"""Many runs: 8 short runs of the reference model on 2 Dask worker processes,
against the same 8 in a sequential ``for``, side by side.

The reference notebook's model (Body 8->32->32, Head 32->1), Adam, batches of
64, ``--steps`` steps a run, each run recorded by a Recorder into one store
(a fresh store per round). torch.set_num_threads(1) here; Dask's workers run
one thread each (Dask sets OMP_NUM_THREADS=1 for them), so a run is the same
work on either side. Rounds alternate the two (the order rotates); medians
over rounds.

  for        the 8 runs one after another, in this process
  dask       client.map over a warm LocalCluster(n_workers=2,
             threads_per_worker=1, processes=True): from map to gather

The ratio is dask / for, per round. Where the rest goes beyond the ideal
0.5x is measured apart: starting the cluster (not in the ratio), a worker's
first import of torch and somatize (a warm-up task, not in the ratio), a
task's round trip with nothing to do (dispatch and serialisation), and each
run's own seconds as measured inside the task.

Then the recording cost per run: each run trained with and without its
Recorder, its seconds taken inside the run; alone (one at a time in this
process) and under concurrency (two at once on the two workers, each with
its flush thread).

    .venv/bin/python bench/bench_many.py [--steps 1500] [--rounds 3] [--quick]

Target: dask / for <= 0.6.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import machine, reported, target

from somatize import Graph, Recorder, Store
from somatize.torch import Trainer, parameters

# The reference notebook's model has one definition, beside the tests that check the Trainer against it;
# the workers import this module by its name, so the tests' folder is put on their path too (one_run).
TESTS = str(Path(__file__).resolve().parents[1] / "tests")

RUNS = 8


def one_run(path, run, steps, record=True):
    """Train one run; its seconds, taken inside the run (data made first)."""
    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)
    from torch_models import Body, Head
    from torch_models import batches as reference_batches

    torch.set_num_threads(1)
    batches = reference_batches(steps)
    torch.manual_seed(0)
    g = Graph.somatize(Body().named("body") >> Head().named("head"))
    recorder = Recorder(Store(path), run=run, config={"steps": steps}) if record else None
    trainer = Trainer(g, torch.nn.functional.mse_loss, torch.optim.Adam(parameters(g), lr=1e-2),
                      watching=recorder)
    t = time.perf_counter()
    for b in batches:
        trainer.step(b)
    if recorder is not None:
        recorder.close()
    return time.perf_counter() - t


def nothing(x):
    return x


def warm(_):
    """Unpickling this task imports torch and somatize on the worker (it names Trainer)."""
    return Trainer.__name__, os.getpid()


def sequential(steps, record=True):
    path = tempfile.mkdtemp()
    t = time.perf_counter()
    inside = [one_run(path, f"r{i}", steps, record) for i in range(RUNS)]
    return time.perf_counter() - t, inside


def mapped(client, steps, record=True):
    path = tempfile.mkdtemp()
    Store(path)
    t = time.perf_counter()
    futures = client.map(one_run, [path] * RUNS, [f"r{i}" for i in range(RUNS)], [steps] * RUNS, [record] * RUNS,
                         pure=False)
    inside = client.gather(futures)
    return time.perf_counter() - t, inside


def med(xs):
    return statistics.median(xs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="short runs, one round: checks the script runs")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds = 30, 1
    torch.set_num_threads(1)
    from distributed import Client, LocalCluster

    print(f"before: {machine()}")
    t = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        started = time.perf_counter() - t
        t = time.perf_counter()
        client.gather(client.map(warm, range(2), pure=False))
        imports = time.perf_counter() - t
        trips = []
        for _ in range(20):
            t = time.perf_counter()
            client.submit(nothing, 1, pure=False).result()
            trips.append(time.perf_counter() - t)
        one_run(tempfile.mkdtemp(), "warm", 50)  # this process warm too
        client.gather(client.map(one_run, [tempfile.mkdtemp()] * 2, ["w0", "w1"], [50, 50], pure=False))

        seq, dsk, seq_in, dsk_in, ratios = [], [], [], [], []
        for r in range(args.rounds):
            order = [("for", None), ("dask", client)] if r % 2 == 0 else [("dask", client), ("for", None)]
            got = {}
            for name, c in order:
                got[name] = sequential(args.steps) if c is None else mapped(c, args.steps)
            seq.append(got["for"][0])
            dsk.append(got["dask"][0])
            seq_in += got["for"][1]
            dsk_in += got["dask"][1]
            ratios.append(got["dask"][0] / got["for"][0])
            print(f"round {r}: for {got['for'][0]:.2f} s, dask {got['dask'][0]:.2f} s, "
                  f"ratio {ratios[-1]:.3f}")

        # recording cost per run: with and without a Recorder, alone and two at once
        alone_rec, alone_bare, conc_rec, conc_bare = [], [], [], []
        for _ in range(args.rounds):
            path = tempfile.mkdtemp()
            for i in range(2):
                alone_rec.append(one_run(path, f"a{i}", args.steps, True))
                alone_bare.append(one_run(path, f"b{i}", args.steps, False))
            conc_rec += mapped(client, args.steps, True)[1]
            conc_bare += mapped(client, args.steps, False)[1]
        print(f"after: {machine()}")

    print()
    print(f"{RUNS} runs of {args.steps} steps, recorded; medians over {args.rounds} rounds")
    print(f"  for (sequential)      {med(seq):7.2f} s   (a run inside: {med(seq_in):.3f} s)")
    print(f"  dask (2 workers)      {med(dsk):7.2f} s   (a run inside: {med(dsk_in):.3f} s)")
    print(f"  ratio dask / for      {med(ratios):7.3f}   (rounds: {', '.join(f'{x:.3f}' for x in ratios)})")
    ideal = RUNS * med(dsk_in) / 2
    print(f"  dask if only the runs ran: {ideal:.2f} s; the rest {med(dsk) - ideal:.2f} s is dispatch, "
          f"serialisation, scheduling and the two workers' uneven finish")
    print(f"  a run is {med(dsk_in) / med(seq_in):.3f}x as long on a worker as alone "
          f"(two runs share the two cores with the scheduler, this process and the flush threads)")
    print(f"  not in the ratio: cluster start {started:.2f} s, first import of torch+somatize on the workers "
          f"{imports:.2f} s, a task round trip {1e3 * med(trips):.1f} ms")
    print()
    print("recording cost per run (with Recorder - without, seconds inside the run)")
    a = med(alone_rec) - med(alone_bare)
    c = med(conc_rec) - med(conc_bare)
    print(f"  alone            {a * 1e3:7.1f} ms of {med(alone_bare):.3f} s ({100 * a / med(alone_bare):.1f}%)")
    print(f"  two at once      {c * 1e3:7.1f} ms of {med(conc_bare):.3f} s ({100 * c / med(conc_bare):.1f}%)")
    reported("a run on a worker / the same run alone", med(dsk_in) / med(seq_in))
    target(f"{RUNS} recorded runs on 2 Dask workers / in a for", med(ratios), 0.6)


if __name__ == "__main__":
    main()
