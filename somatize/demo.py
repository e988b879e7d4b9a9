"""The main job: build a small graph, run it many times with a Recorder into a
store in the working folder, and print what the record says about it.

    python -m somatize.demo [--store demo-store] [--forwards 20000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from somatize import Graph, Node, Recorder, Store
from somatize.record import curve, facts, forwards, nodes


class Standardize(Node):
    def forward(self, x, ctx):
        return (x - x.mean()) / (x.std() + 1e-9)


class Smooth(Node):
    def __init__(self, width):
        self.kernel = np.ones(width) / width

    def forward(self, x, ctx):
        return np.convolve(x, self.kernel, mode="same")


class Spectrum(Node):
    def forward(self, x, ctx):
        return np.abs(np.fft.rfft(x))


class Peak(Node):
    def forward(self, both, ctx):
        smooth, spectrum = both
        ctx.fact("energy", value=float(spectrum[1:].sum()))
        return {"peak_at": int(np.argmax(smooth)), "dominant": int(np.argmax(spectrum[1:]) + 1)}


def build():
    return Graph.somatize(
        Standardize().named("standardize")
        >> [Smooth(9).named("smooth"), Spectrum().named("spectrum")]
        >> Peak().named("peak")
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="demo-store")
    ap.add_argument("--forwards", type=int, default=20_000)
    args = ap.parse_args(argv)

    g = build()
    store = Store(args.store)
    run = time.strftime("demo-%Y%m%d-%H%M%S")
    rng = np.random.default_rng(0)
    signals = [np.sin(np.linspace(0, 2 * np.pi * (3 + i % 5), 256)) + 0.3 * rng.standard_normal(256) for i in range(64)]

    began = time.perf_counter()
    with Recorder(store, run=run, summarising=["energy"]) as recorder:
        for i in range(args.forwards):
            g.forward(signals[i % len(signals)], watching=recorder)
    took = time.perf_counter() - began

    print(f"graph  : {g}")
    print(f"edges  : {', '.join(f'{a} -> {b}' for a, b in g.edges)}")
    print(f"store  : {store.path}   run: {run}")
    print(f"ran {args.forwards:,} forwards in {took:.2f} s ({args.forwards / took:,.0f} forwards/s, recorded)\n")

    table = forwards(store, run=run)
    print(f"the record holds {len(table):,} forwards; time per forward (µs):")
    print(table["took_us"].describe(percentiles=[0.5, 0.99]).round(1).to_string(), "\n")

    print("where the time went, node by node:")
    table = nodes(store, run=run)
    table["share"] = (100 * table["share"]).round(1).astype(str) + " %"
    print(table.round({"mean_us": 1}).to_string(index=False), "\n")

    energy = curve(store, run=run, name="energy")
    print(f"'energy' (a fact the peak node adds itself): {len(energy):,} points, last {energy.iloc[-1]:.2f}\n")

    print("the facts of forward 10:")
    for fact in facts(store, run=run, forward=10):
        print("  ", fact)
    print(f"\nlist every run with: somatize runs {args.store}    check the store with: somatize check {args.store}")


if __name__ == "__main__":
    main()
