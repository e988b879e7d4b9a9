"""The steady step: what a step costs a user once a run is going, the Trainer
and its Recorder against the hand-written loop, and what a recorded step does
that an unwatched one does not, part by part.

The reference model (the Trainer's notebook: Body 8->32->32, Head 32->1, a
tiny model, so the worst case for a fixed cost a step), Adam, batches of 64,
torch.set_num_threads(1). Each variant trains a fresh model (same seed) for
``--warmup`` steps, then ``--steps`` steps timed as a whole: the background
flushes and the instruments' sampled updates (one in 40) fall inside the
timed steps as they do for a user; the Recorder's making and closing (a
run's fixed cost, bench_fixed_cost.py) fall outside. The variants are
interleaved round by round, the order rotating; a ratio is the median over
rounds of (variant / the hand-written loop) in the same round.

  hand-written loop       forward, mse, backward, step, zero_grad, the loss
                          read each step (``loss.item()``, as a loop that
                          reports its loss does)
  Trainer                 Trainer.step, nothing watching
  watched, no instruments Trainer.step watched by a list that keeps the facts
                          (nothing written): the engine's and the Trainer's
                          facts, their clocks, the bulk reads
  watched                 the same with the instruments (the default)
  T+R, flush held off     a Recorder in place of the list, its background
                          flush held off during the run (its close writes all)
  T+R, no instruments     Trainer + Recorder, instruments=False
  Trainer + Recorder      Trainer + Recorder as a user gets it: the target

Each part is the median per-round difference of two variants, per step. The
background flush is counted (a flush that committed renamed a new
summary.json into the run) and timed on the flusher's thread; what it costs
the training loop per flush is (Trainer + Recorder - T+R, flush held off)
over the flushes in the timed steps. With ``lightning`` installed
(``pip install .[bench]``) LightningModule + lightning.Trainer (logger,
progress bar, checkpointing and summary off) runs beside them as the anchor.

    .venv/bin/python bench/bench_step.py [--rounds 15] [--warmup 300] [--steps 1000] [--quick]
    .venv/bin/python bench/bench_step.py --against REV [--processes 4]

``--against REV``: this script run alternately under REV's somatize and this
tree's (``--processes`` processes each, ``--rounds`` rounds in each), each
variant's ratio to the hand-written loop side by side.

Target: Trainer + Recorder <= 1.03x the hand-written loop.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings

import common
import torch
from common import Kept, interleaved, machine, ratio, reference_batches, reference_graph, reported, target

from somatize import Recorder, Store
from somatize.record import _flusher
from somatize.torch import Trainer, parameters

MSE = torch.nn.functional.mse_loss
TARGET = 1.03
clock = time.perf_counter


class Flushes:
    """The background flusher's rounds seen through ``_flusher.flush_all``:
    held off while ``hold`` is set; counted and timed on its thread while
    ``watching`` names a run's folder (a round that committed renamed a new
    summary.json in)."""

    def __init__(self):
        self.real = _flusher.flush_all
        self.hold = False
        self.watching = None
        self.done = []  # (wall s, the flusher thread's CPU s) of each flush that committed
        _flusher.flush_all = self.flush_all

    def flush_all(self, now=None):
        if self.hold:
            return
        folder = self.watching
        if folder is None:
            return self.real(now)
        summary = os.path.join(folder, "summary.json")
        before = _inode(summary)
        c, t = time.thread_time(), clock()
        self.real(now)
        took, cpu = clock() - t, time.thread_time() - c
        if _inode(summary) != before:
            self.done.append((took, cpu))


def _inode(path):
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


FLUSHES = None  # made in main: the flusher is wrapped before any Recorder starts it


def loop(batches, warmup):
    g = reference_graph()
    body, head = g.node("body").net, g.node("head").out
    opt = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=1e-2)
    losses = []

    def steps(part):
        for x, y in part:
            loss = MSE(head(body(x)), y)
            losses.append(loss.item())
            loss.backward()
            opt.step()
            opt.zero_grad()

    steps(batches[:warmup])
    t = clock()
    steps(batches[warmup:])
    return {"s": clock() - t}


def trained(watching=None, instruments=True, hold=False):
    """A Trainer variant: ``watching`` "kept" (a list), "recorder" or None."""

    def run(batches, warmup, store):
        g = reference_graph()
        rec = None
        if watching == "recorder":
            rec = Recorder(store, summarising=["loss"])
            watcher = rec
        else:
            watcher = Kept() if watching == "kept" else None
        tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=watcher,
                     instruments=instruments)
        FLUSHES.hold = hold
        try:
            for b in batches[:warmup]:
                tr.step(b)
            flushed = len(FLUSHES.done)
            FLUSHES.watching = None if rec is None else os.path.join(store, "runs", rec.run)
            t = clock()
            for b in batches[warmup:]:
                tr.step(b)
            tr.deliver()  # the losses read, as the loop's are
            took = clock() - t
            FLUSHES.watching = None
        finally:
            FLUSHES.hold = False
        if rec is not None:
            rec.close()
        return {"s": took, "flushes": len(FLUSHES.done) - flushed}

    return run


def lightning_variant():
    L = common.lightning()
    if L is None:
        return None

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            g = reference_graph()
            self.body, self.head = g.node("body").net, g.node("head").out

        def training_step(self, batch, i):
            x, y = batch
            return MSE(self.head(self.body(x)), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    def run(batches, warmup, _store):
        class Clock(L.Callback):
            def on_train_batch_start(self, trainer, module, batch, i):
                if i == warmup:
                    self.began = clock()

            def on_train_batch_end(self, trainer, module, outputs, batch, i):
                self.ended = clock()

        timer = Clock()
        t = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, callbacks=[timer],
                      default_root_dir=tempfile.mkdtemp())
        t.fit(Module(), torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False))
        return {"s": timer.ended - timer.began}

    return run


VARIANTS = {
    "hand-written loop": lambda batches, warmup, _store: loop(batches, warmup),
    "Trainer": trained(),
    "watched, no instruments": trained("kept", instruments=False),
    "watched": trained("kept"),
    "T+R, flush held off": trained("recorder", hold=True),
    "T+R, no instruments": trained("recorder", instruments=False),
    "Trainer + Recorder": trained("recorder"),
}
PARTS = [  # (what, variant, the variant it adds to)
    ("the Trainer itself", "Trainer", "hand-written loop"),
    ("the watched path: facts, clocks, reads", "watched, no instruments", "Trainer"),
    ("the instruments (1 update in 40 recorded)", "watched", "watched, no instruments"),
    ("the Recorder taking the facts (nothing written)", "T+R, flush held off", "watched"),
    ("the background flush", "Trainer + Recorder", "T+R, flush held off"),
]


def measure(rounds, warmup, steps, lightning=True):
    global FLUSHES
    FLUSHES = FLUSHES or Flushes()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    variants = dict(VARIANTS)
    anchor = lightning_variant() if lightning else None
    if anchor is not None:
        variants["Lightning (anchor)"] = anchor
    batches = reference_batches(warmup + steps)
    store = os.path.join(tempfile.mkdtemp(), "record")
    Store(store)
    for fn in variants.values():  # warm up: the allocator, lazy imports, first fits
        fn(batches[: min(len(batches), 40)], min(warmup, 20), store)
    FLUSHES.done.clear()
    got = interleaved(variants, rounds, batches, warmup, store)
    flushes = [r["flushes"] for r in got["Trainer + Recorder"]]
    return {
        "steps": steps, "warmup": warmup, "rounds": rounds,
        "us": {n: statistics.median(r["s"] for r in v) / steps * 1e6 for n, v in got.items()},
        "x": {n: ratio([r["s"] for r in v], [r["s"] for r in got["hand-written loop"]]) for n, v in got.items()},
        "added_us": {what: statistics.median(a["s"] - b["s"] for a, b in zip(got[n], got[base])) / steps * 1e6
                     for what, n, base in PARTS},
        "flushes": statistics.median(flushes),
        "flush_ms": [1e3 * statistics.median(w for w, _ in FLUSHES.done) if FLUSHES.done else None,
                     1e3 * statistics.median(c for _, c in FLUSHES.done) if FLUSHES.done else None],
        "flush_loop_ms": statistics.median(
            (a["s"] - b["s"]) / a["flushes"] for a, b in zip(got["Trainer + Recorder"], got["T+R, flush held off"])
            if a["flushes"]) * 1e3 if any(flushes) else None,
    }


def show(m):
    print(f"steady step: {m['steps']} steps timed after {m['warmup']} warm-up steps, {m['rounds']} rounds "
          f"interleaved, reference model, Adam, batch 64, torch {torch.__version__}, 1 thread; {machine()}")
    print(f"  {'variant':<26} {'µs/step':>9} {'x loop':>8}")
    for n in m["us"]:
        print(f"  {n:<26} {m['us'][n]:>9.1f} {m['x'][n]:>7.3f}x")
    print("  what a recorded step adds, part by part (median per-round difference, µs a step):")
    for what, us in m["added_us"].items():
        print(f"    {what:<50} {us:>+7.1f}")
    wall, cpu = m["flush_ms"]
    if wall is None:
        print("  the background flush: none in the timed steps (a run this short is written by its close)")
    else:
        loop_ms = "-" if m["flush_loop_ms"] is None else f"{m['flush_loop_ms']:.2f} ms"
        print(f"  the background flush: {m['flushes']:g} in the timed steps, each {wall:.2f} ms wall and "
              f"{cpu:.2f} ms of its thread's CPU; the training loop paid {loop_ms} a flush")
    reported("Trainer alone / the hand-written loop", m["x"]["Trainer"])
    reported("Trainer + Recorder, instruments off / the hand-written loop", m["x"]["T+R, no instruments"])
    if "Lightning (anchor)" in m["x"]:
        reported("Lightning (the anchor) / the hand-written loop", m["x"]["Lightning (anchor)"])
    target("steady step, Trainer + Recorder / the hand-written loop", m["x"]["Trainer + Recorder"], TARGET)


def against(args):
    """This script under REV's somatize and this tree's, processes alternating."""
    other = common.other_tree(args.against)
    here = str(common.ROOT)
    inner = [__file__, "--json", "--rounds", str(args.rounds), "--warmup", str(args.warmup),
             "--steps", str(args.steps), "--no-lightning"]
    got = {args.against: [], "this tree": []}
    for p in range(args.processes):
        trees = [(args.against, other), ("this tree", here)]
        for name, tree in trees if p % 2 == 0 else trees[::-1]:
            got[name].append(json.loads(common.run_in(tree, *inner).splitlines()[-1]))
    print(f"steady step, {args.processes} processes of each tree alternating, {args.rounds} rounds each; "
          f"x the hand-written loop, medians over processes; {machine()}")
    print(f"  {'variant':<26} {args.against:>12} {'this tree':>12} {'this / ' + args.against:>16}")
    for n in got["this tree"][0]["x"]:
        theirs = statistics.median(g["x"][n] for g in got[args.against])
        mine = statistics.median(g["x"][n] for g in got["this tree"])
        print(f"  {n:<26} {theirs:>11.3f}x {mine:>11.3f}x {mine / theirs:>15.3f}x")
    mine = statistics.median(g["x"]["Trainer + Recorder"] for g in got["this tree"])
    target("steady step, Trainer + Recorder / the hand-written loop", mine, TARGET)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="a few short rounds: checks the script runs")
    ap.add_argument("--no-lightning", action="store_true")
    ap.add_argument("--against", metavar="REV")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.warmup, args.steps, args.processes = 2, 30, 100, 1
    if args.against:
        return against(args)
    m = measure(args.rounds, args.warmup, args.steps, lightning=not args.no_lightning)
    if args.json:
        print(json.dumps(m))
    else:
        show(m)


if __name__ == "__main__":
    main()
