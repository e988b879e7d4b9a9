"""The Trainer on a real model: the digits CNN (scikit-learn's 8x8 digits, two
convolutions and a classifier cut into two nodes, tests/digits_models.py),
one epoch of shuffled batches of 64 (23 steps), cross-entropy, Adam,
torch.set_num_threads(1). Side by side in one process, the variants
interleaved round by round (the order rotates), medians over rounds:

  raw                 a hand-written loop over the same modules: forward,
                      cross_entropy, backward, step, zero_grad
  raw+item            the same, reading loss.item() each step (a loop that
                      reports its loss)
  trainer             Trainer.fit over the epoch, no watchers
  trainer+recorder    Trainer.fit with a Recorder (the instruments on, the
                      default); the Recorder made before and closed after the
                      epoch, inside the timing, as a user's cell would
  lightning (off)     LightningModule + lightning.Trainer over a DataLoader of
                      the same batches, logger, bar, checkpointing off
  lightning (log)     the same plus self.log("loss", ...) into a CSVLogger

Every variant trains a fresh model (same seed) on the same batches in the
same order. A ratio is the median over rounds of (variant / raw) in the same
round. Lightning is timed from its first batch's start to its last batch's
end (its setup left out, which favours it) and scaled by 23/22 for the first
batch's own time; skipped if not installed (`pip install .[bench]`).

Each Trainer variant trains two epochs: the first holds the instruments'
first ten recorded updates, the second is what every later epoch costs. A
run's fixed cost (making the Recorder and Trainer, closing the Recorder:
its last flush and fsync) is printed apart, in ms: a run pays it once. (For
Lightning the second epoch column is empty: it is timed over one.)

Target (issue 18): trainer+recorder <= 1.03x raw over an epoch.

    .venv/bin/python bench/bench_digits.py [--rounds 21] [--no-lightning]
"""

import argparse
import gc
import logging
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from digits_models import cnn, digits, modules  # noqa: E402

CE = torch.nn.functional.cross_entropy


EPOCHS = 2  # the first epoch holds the instruments' first ten updates; the second is steady


def epoch_batches():
    train, _ = digits()
    loader = torch.utils.data.DataLoader(train, batch_size=64, shuffle=True,
                                         generator=torch.Generator().manual_seed(3))
    return list(loader)


# Each variant trains a fresh model for EPOCHS epochs over the same batches and
# returns (seconds of each epoch, seconds of its fixed cost: making the
# Recorder and the Trainer before the first epoch and closing the Recorder
# after the last, which a run pays once however long it is).


def raw_loop(read_item):
    def run(batches, _):
        g = cnn()
        net = modules(g)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        epochs = []
        for _ in range(EPOCHS):
            t = time.perf_counter()
            for x, y in batches:
                loss = CE(net(x), y)
                if read_item:
                    loss.item()
                loss.backward()
                opt.step()
                opt.zero_grad()
            epochs.append(time.perf_counter() - t)
        return epochs, 0.0

    return run


def trained(batches, store, record, instruments=True):
    g = cnn()
    t = time.perf_counter()
    rec = Recorder(store, run=f"bench-{time.monotonic_ns()}", summarising=["loss"]) if record else None
    tr = Trainer(g, objective=CE, optimizer=torch.optim.Adam(parameters(g), lr=1e-3), watching=rec,
                 instruments=instruments)
    fixed = time.perf_counter() - t
    epochs = []
    for _ in range(EPOCHS):
        t = time.perf_counter()
        tr.fit(batches, progress=False)
        epochs.append(time.perf_counter() - t)
    t = time.perf_counter()
    if rec is not None:
        rec.close()
    return epochs, fixed + time.perf_counter() - t


def trainer(batches, store):
    return trained(batches, store, record=False)


def trainer_recorder(batches, store):
    return trained(batches, store, record=True)


def trainer_recorder_bare(batches, store):
    return trained(batches, store, record=True, instruments=False)


def lightning_variant(log):
    try:
        import lightning as L
    except ImportError:
        return None
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = modules(cnn())

        def training_step(self, batch, i):
            x, y = batch
            loss = CE(self.net(x), y)
            if log:
                self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    class Clock(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, i):
            if i == 0:
                self.began = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, i):
            self.ended = time.perf_counter()

    def run(batches, _):
        clock = Clock()
        folder = tempfile.mkdtemp()
        logger = L.pytorch.loggers.CSVLogger(folder) if log else False
        t = L.Trainer(
            max_epochs=1, accelerator="cpu", devices=1, logger=logger, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, callbacks=[clock],
            default_root_dir=folder, log_every_n_steps=1,
        )
        loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False)
        t.fit(Module(), loader)
        return [(clock.ended - clock.began) * len(batches) / (len(batches) - 1)], 0.0

    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--no-lightning", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    batches = epoch_batches()
    store = Store(os.path.join(tempfile.mkdtemp(), "record"))
    variants = {"raw": raw_loop(False), "raw+item": raw_loop(True),
                "trainer": trainer, "trainer+recorder": trainer_recorder,
                "trainer+recorder, instruments off": trainer_recorder_bare}
    for name, log in () if args.no_lightning else (("lightning (off)", False), ("lightning (log)", True)):
        v = lightning_variant(log)
        if v is not None:
            variants[name] = v
    names = list(variants)
    for fn in variants.values():  # warm up: allocator, lazy imports, first fits
        fn(batches, store)
    took = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        once = {}
        for n in order:
            gc.collect()  # what the variant before left (Lightning leaves much) is not collected inside this one
            once[n] = variants[n](batches, store)
        for n in names:
            took[n].append(once[n])
    print(f"digits CNN, {len(batches)} steps an epoch (batches of 64), {args.rounds} rounds, Adam, "
          f"torch {torch.__version__}, 1 thread; medians of per-round ratios to raw")
    print(f"{'variant':<34} {'epoch 1 ms':>10} {'x raw':>7} {'epoch 2 ms':>10} {'x raw':>7} "
          f"{'x raw+item':>10} {'run fixed ms':>12}")
    for n in names:
        cells = []
        for e in range(EPOCHS if len(took[n][0][0]) == EPOCHS else 1):
            ms = statistics.median(t[0][e] for t in took[n]) * 1e3
            ratio = statistics.median(a[0][e] / b[0][e] for a, b in zip(took[n], took["raw"]))
            cells.append(f"{ms:>10.2f} {ratio:>6.3f}x")
        if len(cells) < EPOCHS:
            cells.append(f"{'':>10} {'':>7}")
        e = len(took[n][0][0]) - 1
        item = statistics.median(a[0][e] / b[0][e] for a, b in zip(took[n], took["raw+item"]))
        fixed = statistics.median(t[1] for t in took[n]) * 1e3
        print(f"{n:<34} {' '.join(cells)} {item:>9.3f}x {fixed:>12.2f}")


if __name__ == "__main__":
    main()
