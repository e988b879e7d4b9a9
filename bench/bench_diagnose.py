"""What the instruments cost a Trainer step, and how long a diagnosis takes.

1. The instruments' cost, on the reference notebook's model (Body 8->32->32,
   Head 32->1), Adam, batches of 64, torch.set_num_threads(1): two Trainers,
   one with instruments on and one off, each watched by its own Recorder,
   side by side in one process (the order alternates):

   - the first FIRST updates (all recorded): step by step, fresh Trainers each
     round, the median step of each;
   - later (one update in EVERY recorded): blocks of EVERY steps, so each
     block of the instrumented Trainer holds exactly one recorded update; the
     median block of each.

   Then what a whole run of S steps pays: FIRST steps at the first figure and
   the rest at the later one, over S steps of the Trainer without them.

   The same for the backward clock alone (each node's ``backward_us``, from
   hooks on the nodes' outputs, on the same sampled steps): two Trainers
   with instruments on, one with its clock switched off; target <= 1.02.

2. ``somatize.diagnose`` on a 100,000-step run of two nodes recorded on every
   update (the worst case: 16 facts a step, 800,000 instrument points), and
   on the same run recorded as the Trainer samples it; read from disk, median
   of 5.

    .venv/bin/python bench/bench_diagnose.py [--rounds 15] [--blocks 200] [--clock-only]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import somatize
from somatize import Recorder, Store
from somatize.torch import Trainer, parameters
from somatize.torch._instruments import EVERY, FIRST, due

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trainer import MSE, data, graph  # noqa: E402


def pair(store, tag):
    def one(on):
        g = graph()
        rec = Recorder(store, run=f"{tag}-{'on' if on else 'off'}", summarising=["loss"])
        return Trainer(g, MSE, torch.optim.Adam(parameters(g), lr=1e-2), watching=rec, instruments=on), rec

    return one(True), one(False)


class NoClock:
    """A backward clock that does nothing: the Trainer with it is the one
    without per-node backward times."""

    armed = False

    def reset(self):
        pass

    def output(self, name, t):
        pass

    def hand_over(self):
        pass


def clock_pair(store, tag):
    def one(on):
        g = graph()
        rec = Recorder(store, run=f"{tag}-{'clock' if on else 'noclock'}", summarising=["loss"])
        tr = Trainer(g, MSE, torch.optim.Adam(parameters(g), lr=1e-2), watching=rec)
        if not on:
            tr._instruments.clock = tr._clock = NoClock()
        return tr, rec

    return one(True), one(False)


def timed(trainer, batches):
    t = time.perf_counter_ns()
    for b in batches:
        trainer.step(b)
    return time.perf_counter_ns() - t


def cost(rounds, blocks, pair=pair, what="instruments' cost"):
    torch.set_num_threads(1)
    batches = data(EVERY)
    first = {True: [], False: []}
    later = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        for r in range(rounds):
            (on, rec_on), (off, rec_off) = pair(store, f"first{r}")
            for i in range(FIRST):
                order = ((on, True), (off, False)) if (i + r) % 2 else ((off, False), (on, True))
                for tr, key in order:
                    first[key].append(timed(tr, batches[i % EVERY:i % EVERY + 1]))
            rec_on.close()
            rec_off.close()
        (on, rec_on), (off, rec_off) = pair(store, "later")
        for tr in (on, off):
            timed(tr, data(FIRST))  # past the first updates
        for i in range(blocks):
            order = ((on, True), (off, False)) if i % 2 else ((off, False), (on, True))
            for tr, key in order:
                later[key].append(timed(tr, batches))
        rec_on.close()
        rec_off.close()
    f_on, f_off = statistics.median(first[True]) / 1e3, statistics.median(first[False]) / 1e3
    l_on, l_off = statistics.median(later[True]) / 1e3 / EVERY, statistics.median(later[False]) / 1e3 / EVERY
    # a busy machine slows both of a pair alike: the ratio is the median of each pair's
    f_ratio = statistics.median(a / b for a, b in zip(first[True], first[False]))
    l_ratio = statistics.median(a / b for a, b in zip(later[True], later[False]))
    print(f"{what}, reference model, Adam, batches of 64 (FIRST={FIRST}, EVERY={EVERY}):")
    print(f"  first {FIRST} updates, every one recorded: {f_on:.1f} vs {f_off:.1f} µs a step, x{f_ratio:.3f}")
    print(f"  later, one update in {EVERY} recorded:     {l_on:.1f} vs {l_off:.1f} µs a step, x{l_ratio:.3f}")
    for steps in (300, 1000, 10_000, 100_000):
        paid = (FIRST * f_ratio + (steps - FIRST) * l_ratio) / steps
        print(f"  a run of {steps:>7,} steps pays x{paid:.3f}")


def synthesize(store, run, steps, every_update):
    """A run as the Trainer records it (two nodes), without training: facts
    handed to a Recorder directly."""
    rng = torch.Generator().manual_seed(0)
    noise = torch.rand(steps, 8, generator=rng).tolist()
    with Recorder(store, run=run, summarising=["loss"]) as rec:
        for s in range(steps):
            rec.forward_began()
            sampled = every_update or due(s)
            for node in ("body", "head"):
                rec({"fact": "ran", "node": node, "began_us": 1, "took_us": 40})
                if sampled:
                    rec({"fact": "out_zeros", "node": node, "value": 0.1 * noise[s][0]})
            rec({"fact": "finished", "took_us": 90})
            if sampled:
                for k, node in enumerate(("body", "head")):
                    r = noise[s][1 + 3 * k:4 + 3 * k]
                    rec({"fact": "grad_norm", "node": node, "value": 1.0 + r[0]})
                    rec({"fact": "weight_norm", "node": node, "value": 5.0})
                    rec({"fact": "update_norm", "node": node, "value": 0.01 * (1 + r[1])})
                    rec({"fact": "grad_zeros", "node": node, "value": 0.0})
            rec({"fact": "updated"})
            rec({"fact": "loss", "value": 4.0 / (1 + s / 100) + 0.1 * noise[s][7]})
            rec({"fact": "trainer_us", "value": 300})


def diagnosis(steps=100_000, repeats=5):
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        for run, every in (("every-update", True), ("sampled", False)):
            synthesize(store, run, steps, every)
            took = []
            for _ in range(repeats):
                t = time.perf_counter()
                found = somatize.diagnose(store, run=run)
                took.append(time.perf_counter() - t)
            print(
                f"diagnose, {steps:,} steps, {run}: median {statistics.median(took) * 1e3:.0f} ms "
                f"(max {max(took) * 1e3:.0f} ms), {len(found)} findings"
            )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--blocks", type=int, default=200)
    ap.add_argument("--clock-only", action="store_true", help="only the backward clock's cost")
    args = ap.parse_args()
    if not args.clock_only:
        cost(args.rounds, args.blocks)
    cost(args.rounds, args.blocks, clock_pair, "the backward clock's cost (instruments on in both)")
    if not args.clock_only:
        diagnosis()


if __name__ == "__main__":
    main()
