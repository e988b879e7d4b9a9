"""How long ``somatize.diagnose`` takes on a long run.

A run of two nodes written through a Recorder without training, as the
Trainer records it (16 facts a step with the instruments' numbers), read
from disk, median of 5: recorded on every update (the worst case, 800,000
instrument points over 100,000 steps), and as the Trainer samples it (the
first ten updates, then one in 40), reported. What the instruments cost a
step is a part of the steady step (bench_step.py).

    .venv/bin/python bench/bench_diagnose.py [--steps 100000] [--quick]

Target: diagnose of a 100,000-step run recorded on every update <= 0.5 s.
"""

import argparse
import statistics
import tempfile
import time

import torch
from common import machine, reported, target

import somatize
from somatize import Recorder, Store
from somatize.torch._instruments import due

TARGET_MS = 500


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


def diagnosis(steps, repeats):
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        for run, every in (("every-update", True), ("sampled", False)):
            synthesize(store, run, steps, every)
            took = []
            for _ in range(repeats):
                t = time.perf_counter()
                found = somatize.diagnose(store, run=run)
                took.append(time.perf_counter() - t)
            got[run] = statistics.median(took)
            print(f"  diagnose, {steps:,} steps, {run}: median {got[run] * 1e3:.0f} ms "
                  f"(max {max(took) * 1e3:.0f} ms), {len(found)} findings")
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a run of 10,000 steps: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.repeats = 10_000, 2
    print(f"diagnose, read from disk, median of {args.repeats}; {machine()}")
    got = diagnosis(args.steps, args.repeats)
    reported(f"diagnose of a {args.steps:,}-step run as the Trainer samples it", got["sampled"] * 1e3, "ms")
    target(f"diagnose of a {args.steps:,}-step run recorded on every update", got["every-update"] * 1e3, TARGET_MS,
           "ms")


if __name__ == "__main__":
    main()
