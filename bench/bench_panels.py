"""What ``Live`` costs a training step: the reference model's Trainer with a
displayed ``Live`` among its watchers, beside the same Trainer with a no-op
watcher (a list keeping what it is handed, read in bulk as Live is: the
watched path alone) and with none, timed side by side in one
process (interleaved rounds, medians).

"Displayed" here means the widget view exists and every throttled update is
serialised and handed to a comm, as in a kernel; the comm drops the message
instead of writing it to a socket (the socket write happens on ipykernel's
own IOPub thread, at most ten times a second).

    .venv/bin/python bench/bench_panels.py [--rounds 15] [--steps 400] [--quick]

Target: a step with Live displayed <= 1.03x the step with a no-op watcher.
"""

import argparse
import statistics
import time

import torch
from common import Kept, machine, reference_graph, reported, target

from somatize.record import Live
from somatize.torch import Trainer, parameters

TARGET = 1.03


def trainer(watching):
    g = reference_graph()
    return Trainer(g, objective=torch.nn.functional.mse_loss,
                   optimizer=torch.optim.Adam(parameters(g), lr=1e-3), watching=watching)


def per_step(t, batches):
    began = time.perf_counter()
    for b in batches:
        t.step(b)
    return (time.perf_counter() - began) / len(batches)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--quick", action="store_true", help="a few short rounds: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.steps = 3, 50
    torch.set_num_threads(1)
    batches = [(x, x.sum(1, keepdim=True)) for x in torch.randn(args.steps, 64, 8)]
    live = Live(title="bench")
    live._repr_mimebundle_()  # displayed: throttled updates are sent from now on
    plain, noop, watched = trainer([]), trainer([Kept()]), trainer([live])
    times = {"no watcher": [], "a no-op watcher": [], "Live, displayed": []}
    for r in range(args.rounds):
        pairs = list(zip(times, (plain, noop, watched)))
        for name, t in pairs[r % 3:] + pairs[:r % 3]:
            times[name].append(per_step(t, batches))
    live.end()
    print(f"{args.steps} steps x {args.rounds} rounds, reference model; {machine()}")
    base = statistics.median(times["a no-op watcher"])
    for name, xs in times.items():
        m = statistics.median(xs)
        print(f"  {name:<18} {m * 1e6:8.1f} µs/step   x{m / base:.3f} of a no-op watcher")
    reported("a step with no watcher / with a no-op watcher", statistics.median(times["no watcher"]) / base)
    target("a step with Live displayed / with a no-op watcher", statistics.median(times["Live, displayed"]) / base,
           TARGET)


if __name__ == "__main__":
    main()
