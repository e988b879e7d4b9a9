"""The main job: build a small graph, run it many times with a Recorder, and
show what the record says about it.

    python -m somatize.demo --lab [--store notebooks/demo-store]
    python -m somatize.demo --record [--store ./notebooks/demo-store]
    python -m somatize.demo [--store demo-store] [--forwards 20000]

``--lab`` (what ``scripts/demo`` runs) records a few runs into a store under
``notebooks/`` — two finished, one still running for a while (in a child
process), one interrupted (a child killed with SIGKILL), one damaged on
purpose — then starts JupyterLab on ``notebooks/`` with that store in the run
browser's sidebar and prints the URL. ``--record`` records the same runs
but the running one, and exits (Binder's postBuild: a run still going
cannot outlive an image's build). Without either (``scripts/demo --text``)
one run is recorded and what the record says is printed, for a terminal.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

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
        out = np.convolve(x, self.kernel, mode="same")
        ctx.fact("roughness", value=float(np.std(x - out)))  # what the smoothing took off
        return out


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


def signals(count=64, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    return [np.sin(np.linspace(0, 2 * np.pi * (3 + i % 5), 256)) + noise * rng.standard_normal(256)
            for i in range(count)]


def record(store, run, forwards, seed=0, settle=800, pause=0.0, die_after=None):
    """``forwards`` forwards of the demo graph into ``run``. The noise on its
    signals dies away over about ``settle`` forwards, so the roughness the
    smoother takes off falls as a loss does; ``seed`` and ``settle`` are the
    run's recorded config. ``pause``: seconds between two forwards (a run that
    goes on for a while); ``die_after``: the process kills itself with SIGKILL
    after that many forwards (an interrupted run)."""
    g = build()
    waves = signals(seed=seed, noise=0.0)
    rng = np.random.default_rng(seed)
    config = {"seed": seed, "settle": settle}
    with Recorder(store, run=run, summarising=["roughness", "energy"], config=config) as recorder:
        for i in range(forwards):
            noise = 0.08 + 0.6 * np.exp(-i / settle)
            x = waves[i % len(waves)] + noise * rng.standard_normal(len(waves[0]))
            g.forward(x, watching=recorder)
            if die_after is not None and i + 1 == die_after:
                recorder.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            if pause:
                time.sleep(pause)


def _child(store, run, forwards, **kw):
    code = f"from somatize.demo import record; record({str(store)!r}, {run!r}, {forwards}, **{kw!r})"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def demo_runs(store, running_for=600.0):
    """Record the demo runs into ``store``; returns the child process that
    keeps recording the running one (the caller stops it), or None when
    ``running_for`` is None (no running run)."""
    store = Store(store)
    for run in store.runs():
        if run.startswith("demo-"):  # the demo's own runs of a previous time
            shutil.rmtree(Path(store.path) / "runs" / run)
    record(store, "demo-smooth", 3_000, seed=0, settle=300)
    record(store, "demo-noisy", 2_000, seed=1, settle=1_200)
    broken = "demo-damaged"
    record(store, broken, 200, seed=2)
    (Path(store.path) / "runs" / broken / "summary.json").write_bytes(b'{"format": 2, "sta')  # cut short, on purpose
    _child(store.path, "demo-interrupted", 100_000, seed=3, die_after=500).wait(120)
    if running_for is None:
        return None
    return _child(store.path, "demo-running", int(running_for / 0.05), seed=4, settle=3_000, pause=0.05)


def lab(store, root):
    """Record the demo runs, then JupyterLab on ``root`` until Ctrl-C."""
    print(f"recording the demo runs into {store} …", flush=True)
    running = demo_runs(store)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}", f"--port={port}",
               "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", "--no-browser"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"\nJupyterLab on {root}: http://127.0.0.1:{port}/lab?token={token}\n"
          f"open the run browser (the curves icon on the left) to see {os.path.relpath(store, root)}: "
          f"two finished runs, one still running for ten minutes, one interrupted, one damaged.\n"
          f"Ctrl-C stops the server and the running run.", flush=True)
    # stopped like Ctrl-C: the server and the running run go too
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        for p in (server, running):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", action="store_true", help="record demo runs and open JupyterLab on notebooks/")
    ap.add_argument("--record", action="store_true",
                    help="record the demo runs (none left running) into ./notebooks/demo-store and exit")
    ap.add_argument("--store", default=None)
    ap.add_argument("--forwards", type=int, default=20_000)
    args = ap.parse_args(argv)
    if args.lab:
        root = Path(__file__).resolve().parents[1] / "notebooks"
        lab(Path(args.store or root / "demo-store").resolve(), root)
        return
    if args.record:
        # under the working folder: an installed package has no notebooks/ beside it
        store = Path(args.store or "notebooks/demo-store").resolve()
        demo_runs(store, running_for=None)
        print(f"recorded the demo runs into {store}: two finished, one interrupted, one damaged")
        return
    args.store = args.store or "demo-store"

    g = build()
    store = Store(args.store)
    run = time.strftime("demo-%Y%m%d-%H%M%S")
    xs = signals()

    began = time.perf_counter()
    with Recorder(store, run=run, summarising=["energy"]) as recorder:
        for i in range(args.forwards):
            g.forward(xs[i % len(xs)], watching=recorder)
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
