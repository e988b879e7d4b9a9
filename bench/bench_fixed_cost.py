"""A run's fixed cost: a Recorder made and closed durably, what a run pays
once however long it is; and the whole 300-step toy run, reported.

1. The fixed cost. Each round makes a Recorder (``Recorder(store)``: the run's
   folder, its lock, its files), hands it the facts of a Trainer's first step
   on the reference model (instruments on: that step is recorded, so every
   series a run of it writes is there) in one ``take``, and closes it
   (``close()``: the commit, the summary marked finished, synced). Timed:
   making, closing, and the closing thread's CPU; medians of rounds. Beside
   it, the close of a whole 300-step run's facts handed over at once (a run
   shorter than the flusher's first flush is written by its close alone).

2. The whole 300-step toy run, as a user's cell times it: the model made
   before the clock starts, then the optimizer (the Recorder and the
   Trainer), the steps, ``rec.close()``; the hand-written loop (``loss.item()``
   each step), the Trainer alone and Trainer + Recorder interleaved round by
   round, ratios the medians of per-round ratios. Reported, not targeted: the
   run is ~150 ms, so a few ms of fixed cost weigh several percent in it.

    .venv/bin/python bench/bench_fixed_cost.py [--rounds 41] [--runs 21] [--quick]

Target: make + close <= 10 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import torch
from common import Kept, interleaved, machine, ratio, reference_batches, reference_graph, reported, target

from somatize import Recorder, Store
from somatize.torch import Trainer, parameters

MSE = torch.nn.functional.mse_loss
TARGET_MS = 10.0
clock, cpu = time.perf_counter, time.thread_time


def facts_of(steps):
    """What a Trainer watching a Recorder hands it over ``steps`` steps of
    the reference model (``None`` where a forward began)."""
    kept = Kept()
    g = reference_graph()
    tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=kept)
    for b in reference_batches(steps):
        tr.step(b)
    tr.deliver()
    return kept.items


def made_and_closed(store, facts):
    c0, t0 = cpu(), clock()
    rec = Recorder(store, summarising=["loss"])
    c1, t1 = cpu(), clock()
    rec.take(facts)
    c2, t2 = cpu(), clock()
    rec.close()
    return {"make": t1 - t0, "make CPU": c1 - c0, "close": clock() - t2, "close CPU": cpu() - c2}


def fixed_cost(store, rounds):
    one, whole = facts_of(1), facts_of(300)
    for _ in range(3):  # warm up: lazy imports, the first files
        made_and_closed(store, one)
        made_and_closed(store, whole)
    got = interleaved({"one step": lambda: made_and_closed(store, one),
                       "300 steps": lambda: made_and_closed(store, whole)}, rounds)
    return {kind: {part: statistics.median(r[part] for r in rs) * 1e3 for part in rs[0]} for kind, rs in got.items()}


# -- the whole toy run: each returns its seconds, made to closed


def loop(batches, _store):
    g = reference_graph()
    body, head = g.node("body").net, g.node("head").out
    t = clock()
    opt = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=1e-2)
    losses = []
    for x, y in batches:
        loss = MSE(head(body(x)), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    return clock() - t


def trainer(batches, _store):
    g = reference_graph()
    t = clock()
    tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2))
    for b in batches:
        tr.step(b)
    tr.deliver()
    return clock() - t


def recorded(batches, store):
    g = reference_graph()
    t = clock()
    rec = Recorder(store, summarising=["loss"])
    tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=rec)
    for b in batches:
        tr.step(b)
    rec.close()
    return clock() - t


def toy_run(store, rounds):
    batches = reference_batches(300)
    variants = {"hand-written loop": loop, "Trainer": trainer, "Trainer + Recorder": recorded}
    for fn in variants.values():
        fn(batches[:30], store)
    got = interleaved(variants, rounds, batches, store)
    return {n: (statistics.median(v) * 1e3, ratio(v, got["hand-written loop"])) for n, v in got.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=41, help="rounds of the fixed cost")
    ap.add_argument("--runs", type=int, default=21, help="rounds of the whole toy run")
    ap.add_argument("--quick", action="store_true", help="a few rounds: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.runs = 3, 2
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    store = os.path.join(tempfile.mkdtemp(), "record")
    Store(store)
    fixed = fixed_cost(store, args.rounds)
    toy = toy_run(store, args.runs)
    print(f"a run's fixed cost, {args.rounds} rounds; the whole toy run, {args.runs} rounds; {machine()}")
    print(f"  {'handed over, then closed':<26}" + "".join(f"{p + ' ms':>14}" for p in fixed["one step"]))
    for kind, parts in fixed.items():
        print(f"  {'a run of ' + kind:<26}" + "".join(f"{ms:>14.2f}" for ms in parts.values()))
    print(f"  {'the whole 300-step run':<26} {'ms':>8} {'x loop':>8}")
    for n, (ms, x) in toy.items():
        print(f"  {n:<26} {ms:>8.1f} {x:>7.3f}x")
    one = fixed["one step"]
    reported("close of a 300-step run's facts, written by its close alone", fixed["300 steps"]["close"], "ms")
    reported("the whole 300-step run, Trainer + Recorder / the loop", toy["Trainer + Recorder"][1])
    target("a run's fixed cost: a Recorder made and closed durably", one["make"] + one["close"], TARGET_MS, "ms")


if __name__ == "__main__":
    main()
