"""What issue 18's options would save, estimated: each prototyped by
patching somatize in this process (no product path), whole 300-step runs of
the reference model interleaved round by round with the hand-written loop
and today's Trainer + Recorder, medians of per-round ratios.

  (a) FIRST=1                   the instruments record update 0, then one in
                                EVERY (not the first ten): an upper bound of
                                what lighter early updates would save
  (b) node facts on clock steps the engine's per-node facts only on the
                                steps that say their clocks (the first ten,
                                one in twenty): the forward numbering is not
                                kept, so only the cost is meaningful
  (c) close without sync        close() writes but does not sync
  (a)+(b)+(c)                   all three

    .venv/bin/python bench/bench_options.py [rounds]
"""

import gc
import os
import statistics
import sys
import tempfile
import time
import warnings

import torch

import somatize.record._recorder as recorder_module
import somatize.torch  # noqa: F401
from somatize import Recorder, Store
from somatize._base.values import Opaque
from somatize.torch import Trainer, _instruments, _trainer, parameters

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_trainer import MSE, data, graph  # noqa: E402

REAL_FORWARD, REAL_SYNC = _trainer.Trainer._forward, recorder_module.sync_all


def light_forward(self, x):
    """(b): the engine's node facts only on the steps that say their clocks."""
    if self.steps - 1 < 10 or (self.steps - 1) % 20 == 0:
        return REAL_FORWARD(self, x)
    self._emitting.began()
    return self._graph_forward(Opaque(x), self.store, None)


def raw_item(batches, _store):
    g = graph()
    body, head = g.node("body").net, g.node("head").out
    t0 = time.perf_counter()
    opt = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=1e-2)
    losses = []
    for x, y in batches:
        loss = MSE(head(body(x)), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    return time.perf_counter() - t0


def recorded(first=10, light=False, nosync=False):
    def run(batches, store):
        _instruments.FIRST = first
        _trainer.Trainer._forward = light_forward if light else REAL_FORWARD
        try:
            g = graph()
            t0 = time.perf_counter()
            rec = Recorder(store)
            tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=rec)
            for b in batches:
                tr.step(b)
            if nosync:
                recorder_module.sync_all = lambda fds, together=True: None
            rec.close()
            return time.perf_counter() - t0
        finally:
            recorder_module.sync_all = REAL_SYNC
            _instruments.FIRST = 10
            _trainer.Trainer._forward = REAL_FORWARD

    return run


VARIANTS = {
    "raw+item": raw_item,
    "t+r": recorded(),
    "(a) FIRST=1": recorded(first=1),
    "(b) node facts on clock steps": recorded(light=True),
    "(c) close without sync": recorded(nosync=True),
    "(a)+(b)+(c)": recorded(first=1, light=True, nosync=True),
}


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 41
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    batches = data(300)
    store = Store(os.path.join(tempfile.mkdtemp(), "record"))
    names = list(VARIANTS)
    for fn in VARIANTS.values():
        fn(batches[:30], store)
    got = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            gc.collect()
            got[n].append(VARIANTS[n](batches, store))
    print(f"300 steps x {rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    for n in names:
        to_raw = statistics.median(a / b for a, b in zip(got[n], got["raw+item"]))
        to_tr = statistics.median(a / b for a, b in zip(got[n], got["t+r"]))
        print(f"{n:32} {statistics.median(got[n]) * 1e3:7.1f} ms  x raw+item {to_raw:.3f}  x t+r {to_tr:.3f}")


if __name__ == "__main__":
    main()
