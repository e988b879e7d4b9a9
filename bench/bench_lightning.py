"""What recording costs a Lightning fit: ``somatize.lightning.Logger`` beside
Lightning's own ``CSVLogger`` and ``TensorBoardLogger`` and no logger at all,
side by side in one process.

The digits CNN (tests/digits_models.py) as a LightningModule: its training
step logs ``train_loss`` every step (``log_every_n_steps=1``: the most a
logger is asked), its validation ``val_loss`` once an epoch; shuffled
batches of 64 (23 steps an epoch, the same batches in the same order for
every variant), the 360 test images validated at the epoch's end, Adam,
torch.set_num_threads(1); progress bar, model summary and checkpointing off.
Each variant fits a fresh model (same seed) for two epochs with a fresh
Trainer, the logger made just before:

  no logger          ``logger=False``
  CSVLogger          Lightning's, into a temporary folder
  TensorBoardLogger  Lightning's, into a temporary folder (tensorboard's writer)
  somatize Logger    ``Logger(store)``, a new run of one store each round
  Logger, save=flush the same, its ``save()`` flushing the run durably (what
                     it does not do: Lightning calls ``save()`` after every
                     ``log_metrics``), reported: what that would cost

Three figures a variant: the later epoch's training (its first batch's
start to its last batch's end, what every epoch after the first costs), the
process's CPU time over that epoch (every thread's: the Recorder's flusher,
TensorBoard's writer; on a busy machine the steadier of the two), and the
whole ``fit`` call (the Trainer and the logger set up, both epochs, the
validations, the logger finalized: the run closed durably). The variants
are interleaved round by round, the order rotating; a ratio is the median
over rounds of (variant / no logger) in the same round. MLflow's logger is
not measured: mlflow is not installed here (bench_mlflow.py runs in a venv
of its own, for the listing).

    .venv/bin/python bench/bench_lightning.py [--rounds 15] [--quick]

Target: the somatize Logger's later epoch <= 1.03x no logger's.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings

import torch
from common import interleaved, lightning, machine, ratio, reported, target
from digits_models import cnn, digits, modules

CE = torch.nn.functional.cross_entropy
EPOCHS = 2
TARGET = 1.03
clock = time.perf_counter


def variants(L, batches, test):
    """Each variant: a function of no argument that fits a fresh model and
    returns ``{"epoch": s, "fit": s}``."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from somatize import Store
    from somatize.lightning import Logger

    class Digits(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = modules(cnn())

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, i):
            loss = CE(self(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, i):
            self.log("val_loss", CE(self(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    class Clock(L.Callback):
        def on_train_epoch_start(self, trainer, module):
            self.began = None

        def on_train_batch_start(self, trainer, module, batch, i):
            if self.began is None:
                self.began, self.cpu_began = clock(), time.process_time()

        def on_train_batch_end(self, trainer, module, outputs, batch, i):
            self.ended, self.cpu_ended = clock(), time.process_time()

    class Flushing(Logger):
        def save(self):
            if self.experiment is not None:
                self.experiment.flush()

    train = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False)
    val = torch.utils.data.DataLoader(test, batch_size=None, shuffle=False)
    store = Store(tempfile.mkdtemp())

    def fit(make_logger):
        def run():
            folder = tempfile.mkdtemp()
            timer = Clock()
            t = clock()
            logger = make_logger(folder)
            trainer = L.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=logger,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                num_sanity_val_steps=0, log_every_n_steps=1, callbacks=[timer],
                                default_root_dir=folder)
            trainer.fit(Digits(), train, val)
            fitted = clock() - t
            # the later epoch, its first batch's start to its last's end, scaled to every batch
            scale = len(batches) / (len(batches) - 1)
            return {"epoch": (timer.ended - timer.began) * scale, "cpu": (timer.cpu_ended - timer.cpu_began) * scale,
                    "fit": fitted}

        return run

    return {
        "no logger": fit(lambda folder: False),
        "CSVLogger": fit(lambda folder: CSVLogger(folder)),
        "TensorBoardLogger": fit(lambda folder: TensorBoardLogger(folder)),
        "somatize Logger": fit(lambda folder: Logger(store)),
        "Logger, save=flush": fit(lambda folder: Flushing(store)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="a few rounds of a few steps: checks the script runs")
    args = ap.parse_args()
    L = lightning()
    if L is None:
        raise SystemExit("bench_lightning.py needs lightning: pip install .[lightning]")
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    train, test = digits()
    batches = list(torch.utils.data.DataLoader(train, batch_size=64, shuffle=True,
                                               generator=torch.Generator().manual_seed(3)))
    tests = list(torch.utils.data.DataLoader(test, batch_size=120))
    if args.quick:
        args.rounds, batches, tests = 2, batches[:6], tests[:1]
    fits = variants(L, batches, tests)
    for fn in fits.values():  # warm up: lazy imports, the allocator, each logger's first files
        fn()
    got = interleaved(fits, args.rounds)
    none = got["no logger"]

    print(f"Lightning {L.__version__} on the digits CNN: {len(batches)} steps an epoch (batches of 64), "
          f"{EPOCHS} epochs, train_loss logged every step, val_loss each epoch; {args.rounds} rounds, "
          f"torch {torch.__version__}, 1 thread; {machine()}")
    print(f"  {'variant':<18} {'epoch ms':>9} {'x none':>8} {'its CPU ms':>11} {'x none':>8} {'fit ms':>9} "
          f"{'x none':>8}")
    epoch, cpu, whole = {}, {}, {}
    for name, v in got.items():
        epoch[name] = ratio([r["epoch"] for r in v], [r["epoch"] for r in none])
        cpu[name] = ratio([r["cpu"] for r in v], [r["cpu"] for r in none])
        whole[name] = ratio([r["fit"] for r in v], [r["fit"] for r in none])
        print(f"  {name:<18} {statistics.median(r['epoch'] for r in v) * 1e3:>9.2f} {epoch[name]:>7.3f}x "
              f"{statistics.median(r['cpu'] for r in v) * 1e3:>11.2f} {cpu[name]:>7.3f}x "
              f"{statistics.median(r['fit'] for r in v) * 1e3:>9.2f} {whole[name]:>7.3f}x")
    mine = got["somatize Logger"]
    for other in ("CSVLogger", "TensorBoardLogger"):
        reported(f"a later epoch, somatize Logger / {other}",
                 ratio([r["epoch"] for r in mine], [r["epoch"] for r in got[other]]))
        reported(f"the whole fit, somatize Logger / {other}",
                 ratio([r["fit"] for r in mine], [r["fit"] for r in got[other]]))
    reported("the whole fit, somatize Logger / no logger", whole["somatize Logger"])
    reported("a later epoch's CPU (every thread), somatize Logger / no logger", cpu["somatize Logger"])
    reported("a later epoch, save() flushing durably / somatize Logger",
             ratio([r["epoch"] for r in got["Logger, save=flush"]], [r["epoch"] for r in mine]))
    target("a later epoch of the digits CNN in Lightning, somatize Logger / no logger", epoch["somatize Logger"],
           TARGET)


if __name__ == "__main__":
    main()
