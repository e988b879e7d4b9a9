"""What ``somatize.torch.watch`` costs a loop of one's own: the digits CNN's
hand-written loop (tests/digits_models.py, as bench_digits.py trains it,
as one plain module: 12 nodes) logging its loss into a Recorder, with the
module watched at the default sampling against the same loop unwatched,
side by side in one process.

One epoch is 23 shuffled batches of 64, cross-entropy, Adam,
torch.set_num_threads(1). Each variant trains a model of its own (same
seed) into a run of its own, ``--epochs`` epochs a round (4: 92 steps, of
which the watch measures two or three: one update in 40, the first ten
inside the warm-up round), after a warm-up round; the variants are
interleaved round by round, the order rotating, and a ratio is the median
over rounds of (variant / the loop) in the same round, with a 95% bootstrap
interval. A step's time is the round's over its steps (the measured steps
fall inside the rounds as they do for a user: a median over single steps
would leave them out).

  loop              forward, cross-entropy, backward, step, zero_grad,
                    rec.log({"loss": loss}) (a 0-d tensor, read in bulk)
  loop again        the same loop once more, a model and a run of its own:
                    its ratio to the loop is the noise of the measurement
  loop + watch      the loop with watch(net, rec, optimizer=opt)

After each round each run is flushed, outside the timing, so that no fact
of it is left for the background flusher to write in another variant's
round.

Also reported: the same ratios in CPU seconds of the whole process (every
thread's, the background flusher's too: a figure a busy machine moves
less than wall-clock), and the watch's cost from its parts, in CPU
seconds: what its hooks add to a step it does not measure (a tiny model,
8 -> 8 -> 1, whose step is mostly Python: 3,000 steps watched and not,
alternating, the median of 9 pairs' differences), what a measured step
adds (the digits CNN with every step measured against the loop, in
interleaved rounds), and 1 + (hooks + measured / EVERY) / the loop's step:
the ratio the default sampling comes to, less noisy than the target's on a
busy machine.

    .venv/bin/python bench/bench_watch.py [--rounds 31] [--epochs 4] [--quick]

Target: loop + watch <= 1.03x the loop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from collections import OrderedDict

import torch
from common import interleaved, machine, quartiles, ratio, reported, target
from digits_models import cnn, epoch_batches

from somatize import Recorder, Store
from somatize.torch import _instruments, watch

CE = torch.nn.functional.cross_entropy
TARGET = 1.03
clock = time.perf_counter


def net_of(seed=0):
    g = cnn(seed)
    return torch.nn.Sequential(OrderedDict(features=g.node("features").net, classifier=g.node("classifier").net))


class Loop:
    """The hand-written loop on a model of its own logging into a run of
    its own, ``epochs`` epochs a call; watched when ``watched``."""

    def __init__(self, store, epochs, watched=False):
        self.net = net_of()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.rec = Recorder(store)
        self.epochs = epochs
        self.watch = watch(self.net, self.rec, optimizer=self.opt) if watched else None

    def __call__(self, batches):
        net, opt, rec = self.net, self.opt, self.rec
        began, cpu = clock(), time.process_time()
        for _ in range(self.epochs):
            for x, y in batches:
                loss = CE(net(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                rec.log({"loss": loss})
        took, cpu = clock() - began, time.process_time() - cpu
        rec.flush()  # what is left, so the flusher writes nothing of it in another variant's round
        return {"took": took, "cpu": cpu}

    def close(self):
        if self.watch is not None:
            self.watch.remove()
        self.rec.close()


def sampled(loop, updates):
    """``loop``'s watch asked, each step, whether the update numbered
    ``updates`` is measured (``Instruments.begin``): one answer for every step."""
    inst = loop.watch._inst
    begin = inst.begin
    inst.begin = lambda _updates: begin(updates)
    return loop


def measured_cost(store, batches, rounds, epochs):
    """CPU µs a measured step costs over the loop's step, and the loop's
    step: the digits CNN watched with every step measured (its watch asked
    as for update 0) against the loop, medians over interleaved rounds."""
    variants = {"loop": Loop(store, epochs), "all measured": sampled(Loop(store, epochs, watched=True), 0)}
    for fn in variants.values():
        fn(batches)
    got = interleaved(variants, rounds, batches)
    for fn in variants.values():
        fn.close()
    steps = epochs * len(batches)
    cpu = {name: [r["cpu"] for r in runs] for name, runs in got.items()}
    extra = statistics.median((a - b) / steps for a, b in zip(cpu["all measured"], cpu["loop"]))
    return extra * 1e6, statistics.median(cpu["loop"]) / steps * 1e6


def unmeasured_cost(store, runs, steps):
    """CPU µs the watch's hooks add to a step it does not measure (its
    watch asked as for update ``EVERY + 1``): a tiny model (8 -> 8 -> 1),
    whose step is mostly the hooks' Python, ``steps`` steps a run watched
    and unwatched, alternating; the median of the pairs' differences."""
    x, y = torch.randn(8, 8), torch.randn(8, 1)

    def run(watched):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        with Recorder(store) as rec:
            w = watch(net, rec, optimizer=opt) if watched else None
            if w is not None:
                inst = w._inst
                begin = inst.begin
                inst.begin = lambda _updates: begin(_instruments.EVERY + 1)
            began = time.process_time()
            for _ in range(steps):
                loss = torch.nn.functional.mse_loss(net(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                rec.log({"loss": loss})
            return (time.process_time() - began) / steps

    pairs = [(run(True), run(False)) for _ in range(runs)]
    return statistics.median(a - b for a, b in pairs) * 1e6, statistics.median(b for _, b in pairs) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--epochs", type=int, default=4, help="epochs a variant trains in a round")
    ap.add_argument("--quick", action="store_true", help="a few rounds: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.epochs = 2, 1
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    batches = epoch_batches()
    if args.quick:
        batches = batches[:4]
    store = Store(os.path.join(tempfile.mkdtemp(), "record"))
    variants = {"loop": Loop(store, args.epochs), "loop again": Loop(store, args.epochs),
                "loop + watch": Loop(store, args.epochs, watched=True)}
    for fn in variants.values():  # warm up: the allocator, lazy imports, the watch's first ten updates
        fn(batches)
    got = interleaved(variants, args.rounds, batches)
    for fn in variants.values():
        fn.close()
    steps = args.epochs * len(batches)
    cpu = {name: [r["cpu"] for r in runs] for name, runs in got.items()}
    got = {name: [r["took"] for r in runs] for name, runs in got.items()}
    base = got["loop"]
    print(f"digits CNN as one module ({len(variants['loop + watch'].watch.nodes)} nodes), {len(batches)} steps an "
          f"epoch (batches of 64), {args.epochs} epochs a round, {args.rounds} rounds, Adam, torch "
          f"{torch.__version__}, 1 thread; {machine()}")
    print(f"  {'variant':<13} {'step µs':>9}  / the loop")
    for name, took in got.items():
        print(f"  {name:<13} {statistics.median(took) / steps * 1e6:>9.1f}  "
              f"{quartiles([a / b for a, b in zip(took, base)])}")
    watched = got["loop + watch"]
    per_step = statistics.median((a - b) / steps for a, b in zip(watched, base))
    print(f"  loop + watch - loop, a step: {per_step * 1e6:.1f} µs (median over rounds)")
    print(f"  CPU seconds (every thread's), loop + watch / the loop: "
          f"{quartiles([a / b for a, b in zip(cpu['loop + watch'], cpu['loop'])])}; the loop again / the loop: "
          f"{quartiles([a / b for a, b in zip(cpu['loop again'], cpu['loop'])])}")
    reported("the noise: the loop again / the loop (one code)", ratio(got["loop again"], base))
    reported("CPU seconds, loop + watch / the loop", ratio(cpu["loop + watch"], cpu["loop"]))
    reported("CPU seconds, the loop again / the loop", ratio(cpu["loop again"], cpu["loop"]))
    hooks, tiny = unmeasured_cost(store, 3 if args.quick else 9, 200 if args.quick else 3000)
    measured, step = measured_cost(store, batches, max(3, args.rounds // 3), args.epochs)
    every = _instruments.EVERY
    reported(f"a step it does not measure: its hooks, CPU, over a tiny model's step of {tiny:.0f} µs", hooks, unit="µs")
    reported("a measured step of the digits CNN, CPU, over the loop's step", measured, unit="µs")
    reported(f"from its parts: 1 + (hooks + measured / {every}) / the loop's step ({step:.0f} µs CPU)",
             1 + (hooks + measured / every) / step)
    target("steady step of the digits CNN, loop + watch / the loop (both log)", ratio(watched, base), TARGET)


if __name__ == "__main__":
    main()
