"""What `Live` costs a training step: the reference notebook's Trainer, with
and without a displayed `Live` among its watchers, timed side by side in one
process (interleaved rounds, medians). Run: .venv/bin/python bench/bench_panels.py

"Displayed" here means the widget view exists and every throttled update is
serialised and handed to a comm, as in a kernel; the comm drops the message
instead of writing it to a socket (the socket write happens on ipykernel's
own IOPub thread, at most ten times a second).
"""

import statistics
import sys
import time
from pathlib import Path

import torch

import somatize.torch  # noqa: F401
from somatize import Graph
from somatize.record import Live
from somatize.torch import Trainer, parameters

# The reference notebook's model has one definition, beside the tests that check the Trainer against it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from torch_models import Body, Head  # noqa: E402


def trainer(watching):
    torch.manual_seed(0)
    g = Graph.somatize(Body().named("body") >> Head().named("head"))
    return Trainer(g, objective=torch.nn.functional.mse_loss,
                   optimizer=torch.optim.Adam(parameters(g), lr=1e-3), watching=watching)


def per_step(t, batches):
    began = time.perf_counter()
    for b in batches:
        t.step(b)
    return (time.perf_counter() - began) / len(batches)


def main(rounds=15, steps=400):
    torch.set_num_threads(1)
    batches = [(x, x.sum(1, keepdim=True)) for x in torch.randn(steps, 64, 8)]
    live = Live(title="bench")
    live._repr_mimebundle_()  # displayed: throttled updates are sent from now on
    plain, noop, watched = trainer([]), trainer([lambda fact: None]), trainer([live])
    times = {"no watcher": [], "a no-op watcher": [], "Live, displayed": []}
    for _ in range(rounds):
        for name, t in zip(times, (plain, noop, watched)):
            times[name].append(per_step(t, batches))
    base = statistics.median(times["a no-op watcher"])
    for name, xs in times.items():
        m = statistics.median(xs)
        print(f"{name:<18} {m * 1e6:8.1f} µs/step   x{m / base:.3f} of a no-op watcher")
    live.end()


if __name__ == "__main__":
    main()
