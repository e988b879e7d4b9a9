"""Engine overhead per node per forward, with no-op nodes.

Side by side in one process, interleaved, medians of several rounds:
  plain     ten no-op methods called in a Python loop (the floor)
  engine    a ten-node chain through Graph.forward, no watchers
  recorder  the same with a Recorder writing the record durably
Target: <= 5 µs per node per forward with the Recorder.

    .venv/bin/python bench/bench_engine.py [--forwards 20000] [--rounds 7] [--quick]
"""

import argparse
import statistics
import tempfile
import time

from common import machine, reported, target

from somatize import Graph, Node, Recorder, Store

NODES = 10
TARGET_US = 5.0


class Noop(Node):
    def forward(self, x, ctx):
        return x


def per_node_us(fn, forwards):
    t = time.perf_counter()
    fn(forwards)
    return (time.perf_counter() - t) / forwards / NODES * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--forwards", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="a few short rounds: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.forwards, args.rounds = 2_000, 3

    expr = Noop()
    for _ in range(NODES - 1):
        expr = expr >> Noop()
    g = Graph.somatize(expr)
    plain_nodes = [Noop() for _ in range(NODES)]
    store = Store(tempfile.mkdtemp())

    def plain(n):
        for _ in range(n):
            x = 1
            for node in plain_nodes:
                x = node.forward(x, None)

    def engine(n):
        for _ in range(n):
            g.forward(1)

    rec_runs = iter(range(1000))

    def recorded(n):
        with Recorder(store, run=f"bench-{next(rec_runs)}") as r:
            for _ in range(n):
                g.forward(1, watching=r)

    results = {"plain": [], "engine": [], "recorder": []}
    contenders = [("plain", plain), ("engine", engine), ("recorder", recorded)]
    for r in range(args.rounds):
        for name, fn in contenders[r % 3:] + contenders[:r % 3]:
            results[name].append(per_node_us(fn, args.forwards))

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"{NODES}-node chain of no-op nodes, {args.forwards:,} forwards x {args.rounds} rounds, medians; "
          f"{machine()}")
    for k in results:
        print(f"  {k:<9} {med[k]:6.2f} µs per node per forward")
    reported("the engine over the plain loop, per node per forward, no watchers", med["engine"] - med["plain"],
             "µs")
    target("the engine with a durable Recorder, per node per forward", med["recorder"], TARGET_US, "µs")


if __name__ == "__main__":
    main()
