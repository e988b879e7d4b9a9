"""The Trainer's cost per step against a hand-written torch loop, and what a
Store keeps of ten checkpoints.

The reference notebook's model (Body 8->32->32, Head 32->1), Adam, batches of
64, 300 steps, torch.set_num_threads(1). Side by side in one process, the
variants interleaved round by round (the order rotates), medians over rounds:

  raw                 the plain loop: forward, mse, backward, step, zero_grad
  raw+item            the same, reading loss.item() each step as any loop that
                      reports its loss does: the reference the Trainer's
                      targets are measured against (the Trainer reads its
                      losses off the device in bulk, every read_every=32
                      steps, and returns a 0-d tensor)
  trainer             Trainer.step, no watchers
  trainer+recorder    Trainer.step with a Recorder writing the record durably
                      (every fact of the Trainer's, trainer_us included)
  lightning (off)     LightningModule + lightning.Trainer, logger, progress bar,
                      checkpointing and summary off
  lightning (log)     the same plus self.log("loss", ...) into a CSVLogger

A ratio is the median over rounds of (variant / raw) measured in the same
round, so a busy machine slows both sides of each ratio alike. Lightning is
timed from its first batch's start to its last batch's end (its setup is left
out, which favours it); it is skipped if not installed (`pip install .[bench]`).

Targets (issue 7): trainer <= 1.03x raw+item, trainer+recorder <= 1.05x
raw+item (issue 3's, against raw: 1.05 and 1.10).

Then the cost of the `trainer_us` fact alone: a step's facts handed to a
Recorder and written (flushed) with and without it, interleaved, so the
difference is what that one fact adds to a step of trainer+recorder (the four
perf_counter_ns calls that time a step are measured beside it).

    .venv/bin/python bench/bench_trainer.py [--steps 300] [--rounds 15] [--trainer-only]

``--trainer-only`` leaves out Lightning, the fact's cost and the checkpoints.

``--per-step N``: raw+item, trainer and trainer+recorder interleaved step by
step (the order rotates), N steps each, and the median of each one's step
times: robust on a busy machine, where whole rounds are not. The Recorder's
flush thread then slows whichever variant is running, so this figure holds
the Recorder's cost on the caller's thread only. Then the split: where a
step's time goes, segment by segment, the Trainer's fast path (its private
methods, in the order ``Trainer.step`` calls them) beside the raw loop's.
"""

import argparse
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
from somatize import Graph, Recorder, Store
from somatize.torch import Trainer, freeze, parameters

# The reference notebook's model has one definition, beside the tests that check the Trainer against it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from torch_models import Body, Head  # noqa: E402
from torch_models import batches as reference_batches  # noqa: E402

MSE = torch.nn.functional.mse_loss


def data(steps):
    """The reference regression's batches of 64 (the tests' own, ``torch_models.batches``)."""
    return reference_batches(steps)


def graph(width=32, frozen_body=False):
    torch.manual_seed(0)
    body = Body(width).named("body")
    return Graph.somatize((body.frozen() if frozen_body else body) >> Head(width).named("head"))


# -- the variants: each trains a fresh model on the batches, returns seconds


def raw_loop(read_item):
    def run(batches, _):
        g = graph()
        body, head = g.node("body").net, g.node("head").out
        opt = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=1e-2)
        t = time.perf_counter()
        for x, y in batches:
            loss = MSE(head(body(x)), y)
            if read_item:
                loss.item()
            loss.backward()
            opt.step()
            opt.zero_grad()
        return time.perf_counter() - t

    return run


def trainer(batches, _):
    g = graph()
    tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2))
    t = time.perf_counter()
    for b in batches:
        tr.step(b)
    return time.perf_counter() - t


def trainer_recorder(batches, store):
    g = graph()
    rec = Recorder(store, run=f"bench-{time.monotonic_ns()}", summarising=["loss"])
    tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=rec)
    t = time.perf_counter()
    for b in batches:
        tr.step(b)
    took = time.perf_counter() - t
    rec.close()
    return took


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
            g = graph()
            self.body, self.head = g.node("body").net, g.node("head").out

        def training_step(self, batch, i):
            x, y = batch
            loss = MSE(self.head(self.body(x)), y)
            if log:
                self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-2)

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
        # the first batch's own time is missing from began..ended: scale to all
        return (clock.ended - clock.began) * len(batches) / (len(batches) - 1)

    return run


def fact_cost(store, steps, rounds):
    """µs per step that the trainer_us fact adds to a Recorder (hand-over and
    write), and µs per step of timing a step (four perf_counter_ns calls)."""
    engine = [{"fact": "ran", "node": "body", "began_us": 1, "took_us": 40},
              {"fact": "ran", "node": "head", "began_us": 43, "took_us": 9},
              {"fact": "finished", "took_us": 55}, {"fact": "updated"}]

    def hand(with_fact):
        rec = Recorder(store, run=f"facts-{time.monotonic_ns()}", summarising=["loss"])
        t = time.perf_counter_ns()
        for i in range(steps):
            rec.forward_began()
            for f in engine:
                rec(f)
            rec({"fact": "loss", "value": 1.0 / (i + 1)})
            if with_fact:
                rec({"fact": "trainer_us", "value": (time.perf_counter_ns() - t) // 1000 % 997})
        rec.flush()
        took = time.perf_counter_ns() - t
        rec.close()
        return took / steps / 1000

    def clocks():
        t = time.perf_counter_ns()
        for _ in range(steps):
            a = time.perf_counter_ns()
            b = time.perf_counter_ns()
            c = time.perf_counter_ns()
            (time.perf_counter_ns() - a - (c - b)) // 1000
        return (time.perf_counter_ns() - t) / steps / 1000

    added, timing = [], []
    for _ in range(rounds):
        without, with_ = hand(False), hand(True)
        added.append(with_ - without)
        timing.append(clocks())
    return statistics.median(added), statistics.median(timing)


def checkpoints(width, tmp):
    """Bytes on disk for 10 checkpoints of a graph whose body is frozen."""
    g = freeze(graph(width, frozen_body=True))
    tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2))
    store = Store(os.path.join(tmp, f"ckpt-{width}"))
    batches = iter(data(100))
    for i in range(10):
        for _ in range(10):
            tr.step(next(batches))
        store.keep(f"run/checkpoint-{i}", tr.export())
    exported = tr.export()
    raw_bytes = {n: sum(t.numel() * t.element_size() for t in v.values()) for n, v in exported.items()}
    on_disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(store.path / "objects") for f in fs)
    return raw_bytes, on_disk


def interleaved(steps):
    """Per-step medians, variants interleaved step by step; then the split."""
    clock = time.perf_counter_ns
    batches = data(300)
    store = Store(tempfile.mkdtemp())
    rec = Recorder(store, run="per-step", summarising=["loss"])

    def raw_split():
        g = graph()
        body, head = g.node("body").net, g.node("head").out
        opt = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=1e-2)

        def step(b):
            t0 = clock()
            x, y = b
            t1 = clock()
            out = head(body(x))
            t2 = clock()
            loss = MSE(out, y)
            t3 = clock()
            loss.item()
            t4 = clock()
            loss.backward()
            t5 = clock()
            opt.step()
            opt.zero_grad()
            t6 = clock()
            return (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, clock() - t6)

        return step

    def trainer_split(watching=None):
        g = graph()
        tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=watching)

        def step(b):  # Trainer.step's fast path (every=1, micro=1), timed between its parts
            t0 = began = clock()
            if b.__class__ is tuple and len(b) == 2 and b[0].__class__ is torch.Tensor and tr.keys is None:
                x, y = b
            if tr.device is not None:
                raise AssertionError("the fast path moves nothing")
            index = tr.steps
            tr.steps = index + 1
            tr._in_graph = 0
            t1 = clock()
            out = tr._forward(x)
            t2 = clock()
            loss = tr.objective(out, y)
            t3 = clock()
            value = tr._value(loss, index)  # the loss held, not read: no host sync
            t4 = clock()
            loss.backward()
            t5 = clock()
            tr._update()
            t6 = clock()
            tr._losses.append(value)
            if tr._watched:
                tr._facts(value, True, began, False)  # most steps say no clocks (CLOCKS_*)
            elif len(tr._losses) >= tr.read_every or began >= tr._read_due:
                tr._read()
            return (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, clock() - t6)

        return step, tr.step

    raw_s = raw_split()
    tr_s, tr_step = trainer_split()
    rec_s, rec_step = trainer_split(rec)
    whole = {"raw+item": lambda b: sum(raw_s(b)), "trainer": tr_step, "trainer+recorder": rec_step}
    split = {"raw+item": raw_s, "trainer": tr_s, "trainer+recorder": rec_s}
    for table in (whole, split):
        names = list(table)
        got = {n: [] for n in names}
        for i in range(steps + 200):  # the first 200 warm up
            b = batches[i % len(batches)]
            k = i % len(names)
            for n in names[k:] + names[:k]:
                t = clock()
                r = table[n](b)
                got[n].append(clock() - t if table is whole else r)
        if table is whole:
            base = statistics.median(got["raw+item"][200:])
            print(f"per step, interleaved step by step, {steps} steps each, medians:")
            for n in names:
                m = statistics.median(got[n][200:])
                print(f"  {n:<17} {m / 1000:7.1f} µs  x{m / base:.3f}  (+{(m - base) / 1000:.1f} µs)")
        else:
            print("where a step's time goes (µs, medians of each segment):")
            print(f"  {'segment':<10}" + "".join(f"{n:>18}" for n in names))
            for j, seg in enumerate(("batch", "forward", "objective", "loss value", "backward", "update", "facts")):
                print(f"  {seg:<10}"
                      + "".join(f"{statistics.median(x[j] for x in got[n][200:]) / 1000:>18.2f}" for n in names))
    rec.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--trainer-only", action="store_true")
    ap.add_argument("--per-step", type=int, default=0, metavar="N")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    if args.per_step:
        return interleaved(args.per_step)
    batches = data(args.steps)
    tmp = tempfile.mkdtemp()
    store = Store(os.path.join(tmp, "record"))

    variants = {"raw": raw_loop(False), "raw+item": raw_loop(True),
                "trainer": trainer, "trainer+recorder": trainer_recorder}
    for name, log in () if args.trainer_only else (("lightning (off)", False), ("lightning (log)", True)):
        v = lightning_variant(log)
        if v is not None:
            variants[name] = v
    names = list(variants)
    for fn in variants.values():  # warm up: allocator, lazy imports, first fits
        fn(batches[:20], store)

    per_step = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        took = {n: variants[n](batches, store) / len(batches) for n in order}
        for n in names:
            per_step[n].append(took[n])

    print(f"{args.steps} steps x {args.rounds} rounds, batch 64, Adam, torch {torch.__version__}, 1 thread")
    print(f"{'variant':<18} {'µs/step (median)':>17} {'x raw':>8} {'x raw+item':>11}  (medians of rounds)")
    for n in names:
        ratio = statistics.median(a / b for a, b in zip(per_step[n], per_step["raw"]))
        item = statistics.median(a / b for a, b in zip(per_step[n], per_step["raw+item"]))
        print(f"{n:<18} {statistics.median(per_step[n]) * 1e6:>17.1f} {ratio:>7.3f}x {item:>10.3f}x")
    if args.trainer_only:
        return

    raw_us = statistics.median(per_step["raw"]) * 1e6
    added, timing = fact_cost(store, args.steps, max(args.rounds, 15))
    print(f"\ntrainer_us fact: +{added:.2f} µs/step through a Recorder ({added / raw_us:.2%} of the raw step); "
          f"timing the step: {timing:.2f} µs/step ({timing / raw_us:.2%})")

    print("\n10 checkpoints of a graph with a frozen body (kept with store.keep(name, trainer.export())):")
    for width in (32, 512):
        raw_bytes, on_disk = checkpoints(width, tmp)
        naive = 10 * sum(raw_bytes.values())
        print(
            f"  width {width:>3}: body {raw_bytes['body']:>9,} B, head {raw_bytes['head']:>5,} B; "
            f"10 full copies {naive:>11,} B; on disk {on_disk:>9,} B ({on_disk / naive:.1%})"
        )


if __name__ == "__main__":
    main()
