"""Tasks the many-runs tests hand to worker processes (Dask's, a
ProcessPoolExecutor's): module-level functions, so a worker imports them by
name. ``train`` is what a user writes so that a sweep survives a lost worker."""

import os
import signal

import torch

from somatize import Recorder, Store
from somatize.record import curve
from somatize.torch import Trainer, parameters

from torch_models import batches, built

STEPS = 40


def train(path, run, lr, steps=STEPS, checkpoint_every=10, kill_at=None):
    """One run of a sweep, safe to run again: a retry after its process died
    resumes from the last checkpoint (``checkpoint=``, ``checkpoint_every=``); a rerun
    of a task that finished (Dask recomputes results lost with a worker)
    finds its final weights kept and returns what the first run returned.
    ``kill_at``: on the first try, SIGKILL this process after that step
    (the record flushed first)."""
    store = Store(path)
    final = f"{run}/final"
    if store.lookup(final) is None:
        recorder = Recorder(store, run=run, resume=run in store.runs(), config={"lr": lr, "steps": steps})
        g = built(dtype=torch.float64)
        trainer = Trainer(g, torch.nn.functional.mse_loss, torch.optim.Adam(parameters(g), lr=lr),
                          watching=recorder, store=store, checkpoint=f"{run}/checkpoint",
                          checkpoint_every=checkpoint_every)
        first_try = trainer.steps == 0
        data = batches(steps, n=8, dtype=torch.float64, seed=5)
        with recorder:
            for i in range(trainer.steps, steps):
                trainer.step(data[i])
                if first_try and kill_at == i + 1:
                    recorder.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
        store.keep(final, trainer.export())
    return {"run": run, "final": store.lookup(final), "loss": float(curve(store, run, "loss").iloc[-1]),
            "pid": os.getpid()}


def record(path, run, forwards=200):
    """A run of plain facts (no torch needed): forward i says value i."""
    with Recorder(Store(path), run=run, config={"run": run}) as r:
        for i in range(forwards):
            r.forward_began()
            r({"fact": "finished", "took_us": i})
            r({"fact": "loss", "value": float(i)})
            r({"fact": "note", "node": "n", "text": f"{run}:{i}"})
    return r.run
