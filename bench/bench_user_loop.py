"""What a user measures: a whole short training run, start to finish, written
by hand and with the Trainer, side by side in one process.

The reference notebook's model (Body 8->32->32, Head 32->1), Adam, batches of
64, 300 steps, torch.set_num_threads(1). Each variant trains a fresh model
(same seed, built before the clock starts, as a user's earlier cell would)
on the same batches, timed from the line that makes the optimizer (and the
Recorder and the Trainer) to the line after the loop (``rec.close()``
included): what a user's cell costs.

  raw                 the hand-written loop: forward, mse, backward, step,
                      zero_grad
  raw+item            the same, keeping each step's loss as a float
                      (``losses.append(loss.item())``): a loop that reports
                      its loss, the issue's "hand-written loop"
  trainer             Trainer.step over the batches, no watchers
  trainer+recorder    Recorder(store) + Trainer(watching=rec), the
                      instruments on (the default), rec.close() after
  t+r no instruments  the same with instruments=False

The variants run interleaved, round by round, the order rotating; a ratio is
the median over rounds of (variant / reference) measured in the same round,
so a busy machine slows both sides of it alike. Then each Recorder run's
parts, in ms (medians): making the Recorder, the steps, close(). The last two
columns are each variant's best round and its ratio to the best round of the
hand-written loop: what a machine busy with other work disturbs least.

    .venv/bin/python bench/bench_user_loop.py [--steps 300] [--rounds 31]

Target (issue 18): trainer+recorder <= 1.05x the hand-written loop.
"""

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

import somatize.torch  # noqa: F401
from somatize import Recorder, Store
from somatize.torch import Trainer, parameters

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trainer import MSE, data, graph  # noqa: E402  (the reference model and its batches, one definition)

clock = time.perf_counter
cpu = time.process_time  # every thread of the process: the Recorder's flusher too


# Each variant returns (whole, make, steps, close, CPU) in seconds: CPU is the
# process's CPU time over the whole, every thread's (the flusher's too).


def raw(read_item):
    def run(batches, _store):
        g = graph()
        body, head = g.node("body").net, g.node("head").out
        c0, t0 = cpu(), clock()
        opt = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=1e-2)
        losses = []
        t1 = clock()
        for x, y in batches:
            loss = MSE(head(body(x)), y)
            if read_item:
                losses.append(loss.item())
            loss.backward()
            opt.step()
            opt.zero_grad()
        t2 = clock()
        return t2 - t0, t1 - t0, t2 - t1, 0.0, cpu() - c0

    return run


def trainer(batches, _store):
    g = graph()
    c0, t0 = cpu(), clock()
    tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2))
    t1 = clock()
    for b in batches:
        tr.step(b)
    deliver = getattr(tr, "deliver", None)  # older Trainers read each loss as its step ended
    if deliver is not None:
        deliver()  # the losses read, as a user asking trainer.loss would
    t2 = clock()
    return t2 - t0, t1 - t0, t2 - t1, 0.0, cpu() - c0


def recorded(instruments):
    def run(batches, store):
        g = graph()
        c0, t0 = cpu(), clock()
        rec = Recorder(store, summarising=["loss"])
        tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=rec,
                     instruments=instruments)
        t1 = clock()
        for b in batches:
            tr.step(b)
        t2 = clock()
        rec.close()
        t3 = clock()
        return t3 - t0, t1 - t0, t2 - t1, t3 - t2, cpu() - c0

    return run


VARIANTS = {
    "raw": raw(False),
    "raw+item": raw(True),
    "trainer": trainer,
    "trainer+recorder": recorded(True),
    "t+r no instruments": recorded(False),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=31)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    batches = data(args.steps)
    store = Store(os.path.join(tempfile.mkdtemp(), "record"))
    names = list(VARIANTS)
    for fn in VARIANTS.values():  # warm up: allocator, lazy imports, first fits
        fn(batches[:30], store)
    got = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            gc.collect()  # what the variant before left is not collected inside this one
            got[n].append(VARIANTS[n](batches, store))

    load = os.getloadavg()
    print(f"{args.steps} steps x {args.rounds} rounds, batch 64, Adam, torch {torch.__version__}, 1 thread, "
          f"load average {load[0]:.1f} {load[1]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'variant':<19} {'ms/run':>8} {'x raw':>7} {'x raw+item':>11} {'x trainer':>10}"
          f" {'make ms':>8} {'steps ms':>9} {'close ms':>9} {'CPU ms':>7} {'CPU x raw+item':>15}"
          f" {'best ms':>8} {'best x raw+item':>16}")
    for n in names:
        whole = [x[0] for x in got[n]]
        ratio = {ref: statistics.median(a[0] / b[0] for a, b in zip(got[n], got[ref]))
                 for ref in ("raw", "raw+item", "trainer")}
        parts = [statistics.median(x[i] for x in got[n]) * 1e3 for i in (1, 2, 3)]
        print(f"{n:<19} {statistics.median(whole) * 1e3:>8.1f} {ratio['raw']:>6.3f}x {ratio['raw+item']:>10.3f}x"
              f" {ratio['trainer']:>9.3f}x {parts[0]:>8.2f} {parts[1]:>9.1f} {parts[2]:>9.2f}"
              f" {statistics.median(x[4] for x in got[n]) * 1e3:>7.1f}"
              f" {statistics.median(a[4] / b[4] for a, b in zip(got[n], got['raw+item'])):>14.3f}x"
              f" {min(whole) * 1e3:>8.1f} {min(whole) / min(x[0] for x in got['raw+item']):>15.3f}x")


if __name__ == "__main__":
    main()
