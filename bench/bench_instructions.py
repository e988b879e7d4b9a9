"""bench_user_loop's variants counted in instructions, not timed: what a
whole 300-step run executes, under valgrind's callgrind, free of the
+-10% a run's wall time moves by on this VM (bench/RESULTS.md, stop 27).

    .venv/bin/python bench/bench_instructions.py [--steps 300] [--variants raw+item,trainer,...]

Runs itself under ``valgrind --tool=callgrind`` (Debian's valgrind; about a
minute a variant on this machine kind) in one process: every variant warmed
up first, then each measured in turn, ``os.getppid()`` and ``os.getpgrp()``
bracketing the measured run (callgrind zeroes its counts on entering
``getppid`` and dumps them on entering ``getpgrp``; nothing else in a run
calls either). Prints each variant's instructions (every thread's, the
Recorder's flusher and sync threads included) and its ratio to the
hand-written loop with ``.item()`` measured in the same process.

What it does not count: time in the kernel (a sync's wait, a syscall's
own work), cache misses, waiting for the GIL. It says how much more work a
variant does; bench_user_loop says what a user waits for.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = "raw+item,trainer,trainer+recorder,t+r no instruments,raw+item"


def inner(steps, names):
    sys.path.insert(0, str(HERE))
    import bench_user_loop as b
    import torch

    from somatize import Store

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    batches = b.data(steps)
    store = Store(os.path.join(tempfile.mkdtemp(), "record"))
    for n in dict.fromkeys(names):
        b.VARIANTS[n](batches[:30], store)  # warm up: allocator, lazy imports, first fits
    for n in names:
        gc.collect()
        os.getppid()  # callgrind zeroes here
        b.VARIANTS[n](batches, store)
        os.getpgrp()  # and dumps here


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--variants", default=DEFAULT)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = args.variants.split(",")
    if args.inner:
        return inner(args.steps, names)
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        sys.exit("bench_instructions: valgrind is not installed (apt-get install -y valgrind)")
    out = Path(tempfile.mkdtemp())
    done = subprocess.run([valgrind, "--tool=callgrind", "--zero-before=getppid", "--dump-before=getpgrp",
                           "--dump-instr=no", f"--callgrind-out-file={out}/cg.out",
                           sys.executable, __file__, "--inner", "--steps", str(args.steps),
                           "--variants", args.variants],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_instructions: the run under callgrind failed:\n{done.stderr[-2000:]}")
    counts = []
    for k in range(1, len(names) + 1):  # one dump a measured run, in order: cg.out.1, cg.out.2, ...
        text = (out / f"cg.out.{k}").read_text()
        counts.append(int(re.search(r"^summary: (\d+)", text, re.M).group(1)))
    ref = min(c for n, c in zip(names, counts) if n == "raw+item") if "raw+item" in names else None
    print(f"{args.steps} steps, instructions of one whole run each (callgrind), torch 1 thread")
    print(f"{'variant':<20} {'M instructions':>15} {'x raw+item':>11}")
    for n, c in zip(names, counts):
        print(f"{n:<20} {c / 1e6:>15.1f} {c / ref:>10.3f}x" if ref else f"{n:<20} {c / 1e6:>15.1f}")
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
