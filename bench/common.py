"""What the bench scripts share: how a target and a measured figure are
printed, timing helpers, the reference model's loops, the store of many runs
the listing benches ask, and another commit's ``somatize`` for measuring side
by side. Not a bench itself.

A script prints one line per target it answers, the target and the figure
measured side by side, and the ratio of the two:

    target   steady step, Trainer + Recorder / the hand-written loop   <= 1.03x   measured 1.052x   missed

and a figure that is reported but not targeted as a ``reported`` line.
``tests/test_bench.py`` runs every script with ``--quick`` and reads these
lines; the figures themselves go to bench/RESULTS.md.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))  # the reference model and the digits CNN: one definition, beside the tests

QUICK = "--quick" in sys.argv


# -- printing a target and what was measured ------------------------------


def lightning():
    """The ``lightning`` package with its logging quieted (the anchor the
    Trainer targets name), or None where it is not installed."""
    try:
        import lightning
    except ImportError:
        return None
    import logging

    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    return lightning


def target(what, measured, bound, unit="x", at_least=False):
    """One line: the target, the figure measured beside it, met or missed.
    ``unit`` "x" is a ratio; any other unit (ms, GB/s) also prints the
    figure as a ratio of its bound."""
    sign = ">=" if at_least else "<="
    met = measured >= bound if at_least else measured <= bound
    if unit == "x":
        shown, bound_shown = f"{measured:.3f}x", f"{bound:g}x"
    else:
        shown, bound_shown = f"{measured:.3g} {unit} ({measured / bound:.3f}x the target)", f"{bound:g} {unit}"
    print(f"target   {what:<64} {sign} {bound_shown:<11} measured {shown}   {'met' if met else 'missed'}")
    return met


def reported(what, measured, unit="x"):
    """A figure measured and printed, with no target of its own."""
    shown = f"{measured:.3f}x" if unit == "x" else f"{measured:.3g} {unit}"
    print(f"reported {what:<64} {shown}")


def machine():
    """The load and how busy it is: figures taken on a busy machine are noisy."""
    load = os.getloadavg()[0]
    busy = "busy machine" if load > 1.5 else "quiet machine"
    return f"load average {load:.1f} on {os.cpu_count()} CPUs ({busy})"


# -- timing -----------------------------------------------------------------


def median_ms(fn, repeat=5):
    """The median wall time of ``fn`` in ms."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def cpu_ms(fn, repeat=5):
    """The median CPU time of ``fn`` in ms (this process's, every thread)."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return 1000 * statistics.median(times)


def interleaved(variants, rounds, *args):
    """Each variant called once a round, the order rotating round by round
    (so none always follows the same one), ``gc.collect()`` before each (what
    the one before left is not collected inside the next); returns each
    variant's list of results, one a round."""
    names = list(variants)
    got = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            gc.collect()
            got[n].append(variants[n](*args))
    return got


def ratio(mine, theirs):
    """The median over rounds of mine / theirs measured in the same round:
    a busy machine slows both sides of each ratio alike."""
    return statistics.median(a / b for a, b in zip(mine, theirs))


def quartiles(values):
    """The median of per-pair ratios, how sure it is (a 95% bootstrap interval
    of the median, seeded) and the quartiles of the pairs."""
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    pick = random.Random(0)
    medians = sorted(statistics.median(pick.choices(values, k=len(values))) for _ in range(2000))
    return (f"median {statistics.median(values):.3f}x (95% interval {medians[50]:.3f}-{medians[1949]:.3f}; "
            f"quartiles {q[0]:.3f}-{q[2]:.3f}, {len(values)} pairs)")


# -- the reference model (the Trainer's notebook: Body 8->32->32, Head 32->1) --


def reference_graph():
    from torch_models import built

    return built()


def reference_batches(steps):
    from torch_models import batches

    return batches(steps)


class Kept:
    """A watcher that only keeps what it is handed, as a Recorder's hot path
    does (a list append), and writes nothing: the watched path without the
    Recorder."""

    def __init__(self):
        self.items = []
        self.holders = []

    def __call__(self, fact):
        self.items.append(fact)

    def take(self, items):
        self.items.extend(items)

    def forward_began(self):
        self.items.append(None)

    def held_by(self, hand_over):
        self.holders.append(hand_over)


# -- a store of many runs -----------------------------------------------------

QUERY = 'config.lr < 1e-2 and loss.best < 0.1 and config.opt in ["adam", "rmsprop"] and not config.bn == false'


def sweep(root: Path, count: int):
    """A store of ``count`` runs of 5 config keys (lr, batch, opt, bn, seed: a
    float, an int, a str, a bool, an int) and 2 summarised facts (loss, acc).
    One run is recorded by a Recorder; the others are copies of its folder,
    each with a summary.json of its own config and summaries (what a listing
    reads; the log, index and series stay the recorded run's, and verify)."""
    import orjson

    from somatize import Recorder, Store

    store = Store(root)
    first = Path(root) / "runs" / "run-00000"
    with Recorder(store, run="run-00000", summarising=["loss", "acc"],
                  config={"lr": 0.01, "batch": 32, "opt": "adam", "bn": True, "seed": 0}) as r:
        for i in range(20):
            r.forward_began()
            r({"fact": "finished", "took_us": 25})
            r({"fact": "loss", "value": 1.0 / (i + 1)})
            r({"fact": "acc", "value": 1.0 - 1.0 / (i + 1)})
    base = orjson.loads((first / "summary.json").read_bytes())
    rng = random.Random(0)
    for k in range(1, count):
        folder = Path(root) / "runs" / f"run-{k:05d}"
        shutil.copytree(first, folder)
        s = dict(base, run=folder.name)
        s["config"] = {"lr": 10 ** rng.uniform(-4, 0), "batch": rng.choice([16, 32, 64, 128]),
                       "opt": rng.choice(["adam", "sgd", "rmsprop"]), "bn": rng.random() < 0.5, "seed": k % 10}
        loss = sorted(rng.uniform(0, 2) for _ in range(3))
        acc = sorted(rng.uniform(0, 1) for _ in range(3))
        s["summarising"] = {
            "loss": {"count": 20, "first": loss[2], "last": loss[1], "min": loss[0], "max": loss[2]},
            "acc": {"count": 20, "first": acc[0], "last": acc[1], "min": acc[0], "max": acc[2]},
        }
        (folder / "summary.json").write_bytes(orjson.dumps(s))


# -- another commit's somatize, side by side ----------------------------------


def other_tree(rev: str) -> str:
    """``somatize`` at ``rev`` (``git archive``) in a temporary folder: put it
    first on PYTHONPATH to run a script against that commit's code."""
    where = tempfile.mkdtemp(prefix="somatize-at-")
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "somatize"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", where], input=tar, check=True)
    return where


def run_in(tree: str, script: str, *args) -> str:
    """``script`` run with ``tree``'s somatize first on the path; its stdout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} under {tree} failed:\n{done.stderr[-3000:]}")
    return done.stdout
