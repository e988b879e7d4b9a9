"""What ``Recorder.log`` costs a loop of one's own: the digits CNN's
hand-written loop (tests/digits_models.py, as bench_digits.py trains it)
over steady epochs, logging five values a step, against the same loop
without the ``log`` call; and the cost of one ``log`` call.

One epoch is 23 shuffled batches of 64, cross-entropy, Adam,
torch.set_num_threads(1). Every variant computes the same values each step,
whether it logs them or not: the loss (the 0-d tensor the step made), the
learning rate (a float), the batch's accuracy (a 0-d tensor, under
no_grad), the epoch and the examples seen (ints). Each variant trains a
model of its own (same seed), ``--epochs`` epochs a round (4: about 0.4 s
on a quiet machine), after a warm-up round; the variants are interleaved
round by round, the order rotating, and a ratio is the median over rounds
of (variant / the loop) in the same round, with a 95% bootstrap interval;
wall-clock (the target's) and CPU seconds of the whole process (every
thread's: an upper bound of what the background flush costs the loop, whose
torch kernels let go of the GIL, and a figure a busy machine moves less).

  loop                 the loop, nothing logged
  loop again           the same loop once more: its ratio to the loop is
                       the noise of the measurement (the two are one code)
  loop + log           rec.log({...5 values...}) each step, one Recorder for
                       the whole bench (a steady run)

The background flusher flushes the logging run at its own pace, every
0.25 s, inside that variant's rounds as in any run (its time is in the
round's). After each of its rounds the run is flushed, outside the timing,
so that no fact of it is left for the flusher to write in another variant's
round: what that flush writes (the facts since the last background flush)
a run would write at its next background flush, whose fixed cost the
rounds already count at the flusher's pace; its CPU time is printed.

The per-call cost: ``rec.log`` of five values, 50,000 calls in a tight loop
(a run of its own each time, the background flushes inside counted, its
close not), over the calls, wall-clock and CPU of the calling thread; once
with Python numbers, once with the three numbers and two 0-d tensors of the
loop (held, read in bulk every 32 steps). The median of 5 runs.

And the ratio from its parts, in CPU seconds, which a busy machine moves
far less than the wall-clock ratio: (a log() call's CPU + a flush's CPU
times the flushes a step, one every 0.25 s of the loop's step time) over
the loop's step CPU (its thread's).

    .venv/bin/python bench/bench_log.py [--rounds 31] [--epochs 4] [--quick]

Target: loop + log <= 1.01x the loop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import torch
from common import interleaved, machine, quartiles, ratio, reported, target
from digits_models import cnn, epoch_batches, modules

import somatize.torch  # noqa: F401  (0-d tensors are held and read in bulk)
from somatize import Recorder, Store
from somatize.record._flusher import FLUSH_EVERY

CE = torch.nn.functional.cross_entropy
TARGET = 1.01
CALLS = 50_000
clock = time.perf_counter


class Loop:
    """The hand-written loop on a model of its own, ``epochs`` epochs a
    call; ``rec``: a Recorder it logs five values a step into, or None."""

    def __init__(self, epochs, rec=None):
        self.net = modules(cnn())
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.epochs, self.rec = epochs, rec
        self.epoch = self.seen = 0

    def __call__(self, batches):
        net, opt, rec = self.net, self.opt, self.rec
        seen = self.seen
        began, cpu, own = clock(), time.process_time(), time.thread_time()
        for epoch in range(self.epoch, self.epoch + self.epochs):
            for x, y in batches:
                out = net(x)
                loss = CE(out, y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                with torch.no_grad():
                    acc = (out.argmax(1) == y).float().mean()
                seen += len(y)
                lr = opt.param_groups[0]["lr"]
                if rec is not None:
                    rec.log({"loss": loss, "lr": lr, "accuracy": acc, "epoch": epoch, "seen": seen})
        took, cpu, own = clock() - began, time.process_time() - cpu, time.thread_time() - own
        flush = 0.0
        if rec is not None:  # what is left, so the flusher writes nothing of it in another variant's round
            flush = time.thread_time()
            rec.flush()
            flush = time.thread_time() - flush
        self.epoch, self.seen = self.epoch + self.epochs, seen
        return {"took": took, "cpu": cpu, "own": own, "flush": flush}


def per_call(store, tensors):
    """(wall µs, CPU µs of the calling thread) a ``log`` call of five values,
    in a run of its own (the background flushes inside in the wall time)."""
    loss, acc = torch.tensor(0.5), torch.tensor(0.9)
    with Recorder(store) as rec:
        began, cpu = clock(), time.thread_time()
        if tensors:
            for i in range(CALLS):
                rec.log({"loss": loss, "lr": 1e-3, "accuracy": acc, "epoch": 3, "seen": i})
        else:
            for i in range(CALLS):
                rec.log({"loss": 0.5, "lr": 1e-3, "accuracy": 0.9, "epoch": 3, "seen": i})
        took, cpu = clock() - began, time.thread_time() - cpu
    return took / CALLS * 1e6, cpu / CALLS * 1e6


def main():
    global CALLS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--epochs", type=int, default=4, help="epochs a variant trains in a round")
    ap.add_argument("--quick", action="store_true", help="a few rounds: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.epochs, CALLS = 2, 1, 500
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    batches = epoch_batches()
    if args.quick:
        batches = batches[:4]
    store = Store(os.path.join(tempfile.mkdtemp(), "record"))
    with Recorder(store, run="logged") as rec:
        variants = {"loop": Loop(args.epochs), "loop again": Loop(args.epochs), "loop + log": Loop(args.epochs, rec)}
        for fn in variants.values():  # warm up: the allocator, lazy imports, the first flush
            fn(batches)
        got = interleaved(variants, args.rounds, batches)
    steps = args.epochs * len(batches)
    base = [r["took"] for r in got["loop"]]
    print(f"digits CNN, {len(batches)} steps an epoch (batches of 64), {args.epochs} epochs a round, {args.rounds} "
          f"rounds, Adam, torch {torch.__version__}, 1 thread; {machine()}")
    print(f"  {'variant':<12} {'epoch ms':>9} {'step µs':>9}  / the loop")
    for name, runs in got.items():
        took = [r["took"] for r in runs]
        print(f"  {name:<12} {statistics.median(took) / args.epochs * 1e3:>9.2f} "
              f"{statistics.median(took) / steps * 1e6:>9.1f}  {quartiles([a / b for a, b in zip(took, base)])}")
    logged = [r["took"] for r in got["loop + log"]]
    per_step = statistics.median((a - b) / steps for a, b in zip(logged, base))
    print(f"  loop + log - loop, a step: {per_step * 1e6:.1f} µs (median over rounds); the flush after a round "
          f"(not timed): {statistics.median(r['flush'] for r in got['loop + log']) * 1e3:.2f} ms CPU")
    cpu = {name: [r["cpu"] for r in runs] for name, runs in got.items()}
    print(f"  CPU seconds (every thread's: the background flusher's too), loop + log / the loop: "
          f"{quartiles([a / b for a, b in zip(cpu['loop + log'], cpu['loop'])])}; the loop again / the loop: "
          f"{quartiles([a / b for a, b in zip(cpu['loop again'], cpu['loop'])])}")
    reported("the noise: the loop again / the loop (one code)", ratio([r["took"] for r in got["loop again"]], base))
    reported("CPU seconds, loop + log / the loop", ratio(cpu["loop + log"], cpu["loop"]))
    runs = 3 if args.quick else 5
    calls = {}
    for tensors in (False, True):
        wall, own = (statistics.median(x) for x in zip(*(per_call(store, tensors) for _ in range(runs))))
        what = "3 numbers + 2 0-d tensors" if tensors else "Python numbers"
        print(f"  one log() of 5 values, {what}: {wall:.2f} µs wall (background flushes in), "
              f"{own:.2f} µs CPU of its thread")
        reported(f"one log() of 5 values, {what}", wall, unit="µs")
        calls[tensors] = own
    # The same cost from its parts, in CPU seconds (what a busy machine moves least): a log() call
    # and a flush's share (a flush every FLUSH_EVERY of the loop's time), over the loop's step.
    step = statistics.median(r["own"] for r in got["loop"]) / steps
    flush = statistics.median(r["flush"] for r in got["loop + log"])
    parts = (calls[True] * 1e-6 + flush * step / FLUSH_EVERY) / step
    print(f"  from its parts: the loop's step {step * 1e6:.0f} µs CPU, a log() {calls[True]:.1f} µs, a flush "
          f"{flush * 1e3:.2f} ms every {FLUSH_EVERY} s: {1 + parts:.4f}x")
    reported("loop + log / the loop, from its parts (CPU of log(), of a flush)", 1 + parts)
    target("steady epochs of the digits CNN, loop + log of 5 values / the loop", ratio(logged, base), TARGET)


if __name__ == "__main__":
    main()
