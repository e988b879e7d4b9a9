"""What one step costs under a Recorder, step by step, this code against an
earlier commit's, in one process (issue 18: the step path).

The reference model (bench_trainer's graph: Body 8->32->32, Head 32->1),
Adam, batches of 64, torch.set_num_threads(1). Each round makes, for each
variant, a fresh graph, optimizer, (Recorder,) and Trainer, then runs the
``--steps`` steps interleaved step by step: step i of every variant back to
back (in an order drawn anew for every step: in a fixed cycle each variant
would always follow the same one, and a step run after an instrumented one
finds the caches colder), each timed alone, then closes the Recorders.

  trainer             Trainer.step, no watchers
  t+r                 Recorder + Trainer(watching=rec), the instruments on
  t+r no instruments  the same with instruments=False

With ``--base REF`` each variant is run twice, by this worktree's somatize
and by ``git archive REF somatize`` imported as ``somatize_base`` (its own
Node classes, Recorder and registry: two copies side by side in one
process), so before and after are measured in the same rounds.

Printed per variant: the median µs of its steady steps (index >= 10, neither
a recorded step of the instruments nor one saying its clocks), of its clock
steps, of step 0 and of the instruments' recorded steps 1-9 and >= 10
(``due``), and beside each the median of the per-step difference to the
plain trainer of the same code in the same round and step.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_steps.py [--rounds 15] [--steps 300] [--base main]
"""

import argparse
import importlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from torch_models import batches as reference_batches  # noqa: E402


def base_package(ref):
    """``git archive ref somatize`` as the package ``somatize_base``, importable."""
    where = Path(tempfile.mkdtemp(prefix="somatize-base-"))
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "somatize"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=tar, check=True)
    shutil.move(where / "somatize", where / "somatize_base")
    sys.path.insert(0, str(where))
    return "somatize_base"


class Code:
    """One copy of somatize: its graph, Trainer and Recorder."""

    def __init__(self, package):
        self.name = package
        top = importlib.import_module(package)
        st = importlib.import_module(package + ".torch")
        self.Graph, self.Recorder, self.Store = top.Graph, top.Recorder, top.Store
        self.Trainer, self.parameters = st.Trainer, st.parameters
        self.due = importlib.import_module(package + ".torch._instruments").due
        Node, Opaque = top.Node, top.Opaque

        class Body(Node):
            def __init__(self, width=32):
                self.net = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(),
                                               torch.nn.Linear(width, width))

            def forward(self, x, ctx):
                return Opaque(self.net(x))

            def parameters(self):
                return list(self.net.parameters())

        class Head(Node):
            def __init__(self, width=32):
                self.out = torch.nn.Linear(width, 1)

            def forward(self, x, ctx):
                return Opaque(self.out(x))

            def parameters(self):
                return list(self.out.parameters())

        self.Body, self.Head = Body, Head

    def graph(self):
        torch.manual_seed(0)
        return self.Graph.somatize(self.Body().named("body") >> self.Head().named("head"))

    def made(self, kind, store):
        """(step, close) of a fresh variant."""
        g = self.graph()
        opt = torch.optim.Adam(self.parameters(g), lr=1e-2)
        if kind == "trainer":
            tr = self.Trainer(g, objective=torch.nn.functional.mse_loss, optimizer=opt)
            return tr.step, tr.deliver
        rec = self.Recorder(store, summarising=["loss"])
        tr = self.Trainer(g, objective=torch.nn.functional.mse_loss, optimizer=opt, watching=rec,
                          instruments=kind == "t+r")
        return tr.step, rec.close


KINDS = ("trainer", "t+r", "t+r no instruments")
CLOCKS_FIRST, CLOCKS_EVERY, READ_EVERY = 10, 20, 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--base", default=None, metavar="REF")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    codes = [Code("somatize")]
    if args.base:
        codes.insert(0, Code(base_package(args.base)))
    kinds = args.kinds.split(",")
    variants = [(c, k) for c in codes for k in kinds]
    batches = reference_batches(args.steps)
    tmp = tempfile.mkdtemp()
    stores = {c.name: c.Store(os.path.join(tmp, c.name)) for c in codes}
    clock = time.perf_counter_ns
    times = {v: [] for v in variants}  # per round: the list of step ns
    rng = random.Random(0)

    for r in range(args.rounds + 1):  # round 0 warms up
        made = [c.made(k, stores[c.name]) for c, k in variants]
        got = [[] for _ in variants]
        n = len(variants)
        for b in batches:
            order = list(range(n))
            rng.shuffle(order)
            for j in order:
                t = clock()
                made[j][0](b)
                got[j].append(clock() - t)
        for _, close in made:
            close()
        if r:
            for v, g in zip(variants, got):
                times[v].append(g)

    due = codes[-1].due

    def kind_of(i):
        if i == 0:
            return "step 0"
        if due(i):
            return "recorded 1-9" if i < 10 else "recorded >=10"
        if (i + 1) % READ_EVERY == 0:
            return "read"
        if i < CLOCKS_FIRST or i % CLOCKS_EVERY == 0:
            return "clocks"
        return "steady"

    groups = ("steady", "clocks", "read", "step 0", "recorded 1-9", "recorded >=10")
    print(f"{args.steps} steps x {args.rounds} rounds, interleaved step by step; µs, medians "
          f"(in brackets: minus the plain trainer of the same code, same round and step)")
    print(f"{'code':<14} {'variant':<19}" + "".join(f"{g:>20}" for g in groups))
    for c, k in variants:
        plain = times[(c, "trainer")] if "trainer" in kinds else None
        cells = []
        for grp in groups:
            mine = [t for rnd in times[(c, k)] for i, t in enumerate(rnd) if kind_of(i) == grp]
            if not mine:  # a short run has no such step
                cells.append("-")
                continue
            cell = f"{statistics.median(mine) / 1000:.1f}"
            if plain is not None and k != "trainer":
                diff = [a - b for ra, rb in zip(times[(c, k)], plain) for i, (a, b) in enumerate(zip(ra, rb))
                        if kind_of(i) == grp]
                cell += f" (+{statistics.median(diff) / 1000:.1f})"
            cells.append(cell)
        print(f"{c.name:<14} {k:<19}" + "".join(f"{x:>20}" for x in cells))
    whole = {v: [sum(rnd) for rnd in times[v]] for v in variants}
    print("the run's steps, x the plain trainer of the same code (median of rounds), and the sum over the run"
          " of each step's median difference to it (robust to a slow step):")
    for c, k in variants:
        if k != "trainer" and "trainer" in kinds:
            ratio = statistics.median(a / b for a, b in zip(whole[(c, k)], whole[(c, "trainer")]))
            added = sum(statistics.median(ra[i] - rb[i] for ra, rb in zip(times[(c, k)], times[(c, "trainer")]))
                        for i in range(args.steps))
            print(f"  {c.name:<14} {k:<19} {ratio:.3f}x  +{added / 1e6:.2f} ms")


if __name__ == "__main__":
    main()
