"""What an evaluation costs against a hand-written eval loop, and what the
modes check adds to a step.

The reference notebook's model (Body 8->32->32, Head 32->1), mse, 20
validation batches of 64, torch.set_num_threads(1). Side by side in one
process, the variants interleaved round by round (the order rotates),
medians over rounds:

  raw                 model.eval(); under no_grad: forward, mse, loss.item() * n
                      summed; model.train() after (what a loop that reports a
                      validation loss writes)
  evaluate            trainer.evaluate(batches), no watchers
  evaluate+recorder   trainer.evaluate(batches) watched by a Recorder (its facts
                      written; its forwards are not watched)

A ratio is the median over rounds of (variant / raw) in the same round.

Then the modes check alone (``_modes.Modes.train``, run before each step):
its median cost in µs on the reference graph.

    .venv/bin/python bench/bench_evaluate.py [--rounds 30]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import somatize.torch  # noqa: F401
from somatize import Recorder, Store
from somatize.torch import Trainer, parameters
from somatize.torch._modes import Modes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from torch_models import batches, built  # noqa: E402


def raw(net, val):
    net.eval()
    total = n = 0
    with torch.no_grad():
        for x, y in val:
            total += torch.nn.functional.mse_loss(net(x), y).item() * len(x)
            n += len(x)
    net.train()
    return total / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    val = batches(20, seed=3)
    g = built()
    net = torch.nn.Sequential(g.node("body").net, g.node("head").out)
    plain = Trainer(g, objective=torch.nn.functional.mse_loss, optimizer=torch.optim.SGD(parameters(g), lr=1e-2))
    with tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(Store(tmp), run="bench")
        watched = Trainer(g, objective=torch.nn.functional.mse_loss,
                          optimizer=torch.optim.SGD(parameters(g), lr=1e-2), watching=rec)
        variants = {"raw": lambda: raw(net, val), "evaluate": lambda: plain.evaluate(val),
                    "evaluate+recorder": lambda: watched.evaluate(val)}
        assert plain.evaluate(val)["val_loss"] == raw(net, val)  # the same number, or the figures mean nothing
        for f in variants.values():  # warm-up
            f()
        times = {k: [] for k in variants}
        names = list(variants)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for k in order:
                t = time.perf_counter_ns()
                variants[k]()
                times[k].append(time.perf_counter_ns() - t)
        rec.close()
    print(f"{'variant':<20} {'median ms':>10} {'x raw':>7}")
    for k in names:
        ratio = statistics.median(a / b for a, b in zip(times[k], times["raw"]))
        print(f"{k:<20} {statistics.median(times[k]) / 1e6:>10.3f} {ratio:>7.3f}")
    modes = Modes(g)
    per = []
    for _ in range(args.rounds):
        t = time.perf_counter_ns()
        for _ in range(10_000):
            modes.train()
        per.append((time.perf_counter_ns() - t) / 10_000 / 1000)
    print(f"modes check before a step: {statistics.median(per):.3f} µs "
          f"({sum(1 for _ in modes._flat)} modules checked)")


if __name__ == "__main__":
    main()
