"""A real model's epoch: the Trainer and its Recorder on the digits CNN
(scikit-learn's 8x8 digits, two convolutions and a classifier cut into two
nodes, tests/digits_models.py) against the hand-written loop over the same
modules; and an evaluation of the test split, reported.

One epoch of shuffled batches of 64 (23 steps), cross-entropy, Adam,
torch.set_num_threads(1). Each variant trains a fresh model (same seed) on
the same batches in the same order for two epochs: the first holds the
instruments' first ten recorded updates (a run's start), the second is what
every later epoch costs, and the target's. A run's fixed cost (making the
Recorder and the Trainer, closing the Recorder) is timed apart: a run pays
it once (bench_fixed_cost.py). The variants are interleaved round by round,
the order rotating; a ratio is the median over rounds of (variant / the
hand-written loop) in the same round.

  hand-written loop     forward, cross_entropy, backward, step, zero_grad, the
                        loss read each step (``loss.item()``)
  Trainer               Trainer.fit over the epoch, nothing watching
  T+R, no instruments   Trainer.fit watched by a Recorder, instruments=False
  Trainer + Recorder    Trainer.fit watched by a Recorder, as a user gets it
  Lightning (anchor)    LightningModule + lightning.Trainer over the same
                        batches, logger, bar, checkpointing off; timed from its
                        first batch's start to its last batch's end, scaled by
                        23/22 (skipped without ``lightning``: ``pip install .[bench]``)

After its epochs the hand-written loop evaluates the 360 test images by hand
(``eval()``, ``no_grad``, the loss summed over batches of 64, ``train()``
after) and Trainer + Recorder by ``trainer.evaluate`` (the same number; its
facts recorded): reported, not targeted.

    .venv/bin/python bench/bench_digits.py [--rounds 21] [--quick]

Target: Trainer + Recorder's later epoch <= 1.02x the hand-written loop's.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
import warnings

import torch
from common import interleaved, lightning, machine, ratio, reported, target
from digits_models import cnn, digits, modules

from somatize import Recorder, Store
from somatize.torch import Trainer, parameters

CE = torch.nn.functional.cross_entropy
EPOCHS = 2
TARGET = 1.02
clock = time.perf_counter


def loaders():
    train, test = digits()
    shuffled = torch.utils.data.DataLoader(train, batch_size=64, shuffle=True,
                                           generator=torch.Generator().manual_seed(3))
    return list(shuffled), list(torch.utils.data.DataLoader(test, batch_size=64))


# Each variant returns {"epochs": [s, s], "fixed": s, "eval": s or None, "val_loss": float or None}.


def loop(batches, test, _store):
    net = modules(cnn())
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    epochs, losses = [], []
    for _ in range(EPOCHS):
        t = clock()
        for x, y in batches:
            loss = CE(net(x), y)
            losses.append(loss.item())
            loss.backward()
            opt.step()
            opt.zero_grad()
        epochs.append(clock() - t)
    t = clock()
    net.eval()
    total = n = 0
    with torch.no_grad():
        for x, y in test:
            total += CE(net(x), y).item() * len(x)
            n += len(x)
    net.train()
    return {"epochs": epochs, "fixed": 0.0, "eval": clock() - t, "val_loss": total / n}


def trained(record, instruments=True):
    def run(batches, test, store):
        g = cnn()
        t = clock()
        rec = Recorder(store, summarising=["loss"]) if record else None
        tr = Trainer(g, objective=CE, optimizer=torch.optim.Adam(parameters(g), lr=1e-3), watching=rec,
                     instruments=instruments)
        fixed = clock() - t
        epochs = []
        for _ in range(EPOCHS):
            t = clock()
            tr.fit(batches, progress=False)
            epochs.append(clock() - t)
        took = val = None
        if record and instruments:
            t = clock()
            val = tr.evaluate(test)["val_loss"]
            took = clock() - t
        t = clock()
        if rec is not None:
            rec.close()
        return {"epochs": epochs, "fixed": fixed + clock() - t, "eval": took, "val_loss": val}

    return run


def lightning_variant():
    L = lightning()
    if L is None:
        return None

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = modules(cnn())

        def training_step(self, batch, i):
            x, y = batch
            return CE(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    class Clock(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, i):
            if i == 0:
                self.began = clock()

        def on_train_batch_end(self, trainer, module, outputs, batch, i):
            self.ended = clock()

    def run(batches, _test, _store):
        timer = Clock()
        t = L.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, callbacks=[timer],
                      default_root_dir=tempfile.mkdtemp())
        t.fit(Module(), torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False))
        # timed over the last epoch: from its first batch's start to its last batch's end
        return {"epochs": [math.nan, (timer.ended - timer.began) * len(batches) / (len(batches) - 1)],
                "fixed": math.nan, "eval": None, "val_loss": None}

    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--quick", action="store_true", help="a few rounds: checks the script runs")
    ap.add_argument("--no-lightning", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds = 2
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    batches, test = loaders()
    if args.quick:
        batches = batches[:6]
    store = os.path.join(tempfile.mkdtemp(), "record")
    Store(store)
    variants = {"hand-written loop": loop, "Trainer": trained(False),
                "T+R, no instruments": trained(True, instruments=False), "Trainer + Recorder": trained(True)}
    anchor = None if args.no_lightning else lightning_variant()
    if anchor is not None:
        variants["Lightning (anchor)"] = anchor
    for fn in variants.values():  # warm up: the allocator, lazy imports, first fits
        fn(batches, test, store)
    got = interleaved(variants, args.rounds, batches, test, store)
    mine, theirs = got["Trainer + Recorder"], got["hand-written loop"]
    assert math.isclose(mine[0]["val_loss"], theirs[0]["val_loss"], rel_tol=1e-5), "not the same evaluation"

    print(f"digits CNN, {len(batches)} steps an epoch (batches of 64), {args.rounds} rounds, Adam, "
          f"torch {torch.__version__}, 1 thread; {machine()}")
    print(f"  {'variant':<22} {'epoch 1 ms':>11} {'x loop':>8} {'epoch 2 ms':>11} {'x loop':>8} {'fixed ms':>9}")
    later = {}  # each variant's later epoch / the loop's
    for n, v in got.items():
        cells = []
        for e in range(EPOCHS):
            x = ratio([r["epochs"][e] for r in v], [r["epochs"][e] for r in theirs])
            cells.append(f"{statistics.median(r['epochs'][e] for r in v) * 1e3:>11.2f} {x:>7.3f}x")
        later[n] = x
        print(f"  {n:<22} {' '.join(cells)} {statistics.median(r['fixed'] for r in v) * 1e3:>9.2f}")
    evaluation = ratio([r["eval"] for r in mine], [r["eval"] for r in theirs])
    print(f"  evaluation of {sum(len(b[1]) for b in test)} test images: by hand "
          f"{statistics.median(r['eval'] for r in theirs) * 1e3:.2f} ms, trainer.evaluate "
          f"{statistics.median(r['eval'] for r in mine) * 1e3:.2f} ms")
    reported("an evaluation, trainer.evaluate (recorded) / by hand", evaluation)
    if anchor is not None:
        reported("Lightning (the anchor), a later epoch / the loop", later["Lightning (anchor)"])
    target("a later epoch of the digits CNN, Trainer + Recorder / the loop", later["Trainer + Recorder"], TARGET)


if __name__ == "__main__":
    main()
