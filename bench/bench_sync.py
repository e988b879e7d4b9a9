"""Making a commit's files durable: an fsync each (from 8 threads, or one
after the other) against one syncfs(2) of their file system
(``somatize._store.files.sync_all``).

Each round makes a fresh run-like folder with a ``series`` folder in it,
``--files`` new files of 300 bytes each (a short run's series), and syncs
the files and both folders one way; the ways interleaved round by round, in
one process, a fresh folder each time (nothing left dirty from the way
before). Printed: medians of wall ms (and its 90th and 99th percentiles)
and of the process's CPU ms (every thread: the fsync threads' kernel time too).

    .venv/bin/python bench/bench_sync.py [--files 28] [--rounds 40] [--dir /tmp]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from somatize._store import files  # noqa: E402


def made(base, i, n):
    run = os.path.join(base, f"run{i}")
    os.mkdir(run)
    os.mkdir(os.path.join(run, "series"))
    fds = [os.open(os.path.join(run, "series", f"s{k}.bin"), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
           for k in range(n)]
    for fd in fds:
        os.write(fd, b"x" * 300)
    folders = [os.open(f, os.O_RDONLY | os.O_DIRECTORY) for f in (run, os.path.join(run, "series"))]
    return fds + folders


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=28)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    syncfs = files._find_syncfs()
    if syncfs is None:
        sys.exit("bench_sync: this system has no syncfs that reports errors (Linux >= 5.8): nothing to compare")
    base = tempfile.mkdtemp(dir=args.dir)

    ways = {
        "fsync each, 8 threads": lambda fds: _fsync_each(fds, True),
        "fsync each, one thread": lambda fds: _fsync_each(fds, False),
        "one syncfs": lambda fds: syncfs(fds[0]),
    }
    got = {w: [] for w in ways}
    i = 0
    for _ in range(args.rounds):
        for w, how in ways.items():
            i += 1
            fds = made(base, i, args.files)
            c, t = time.process_time(), time.perf_counter()
            how(fds)
            got[w].append(((time.perf_counter() - t) * 1e3, (time.process_time() - c) * 1e3))
            for fd in fds:
                os.close(fd)
    print(f"{args.files} files of 300 bytes and 2 folders, {args.rounds} rounds, in {base}, "
          f"load average {os.getloadavg()[0]:.1f}, {files.unwritten_bytes() // 1024} kB unwritten now")
    for w, v in got.items():
        walls = sorted(a for a, _ in v)
        wall, cpu = statistics.median(walls), statistics.median(b for _, b in v)
        p90, p99 = walls[int(0.9 * (len(walls) - 1))], walls[int(0.99 * (len(walls) - 1))]
        print(f"{w:<24} wall {wall:6.2f} ms (p90 {p90:6.2f}, p99 {p99:6.2f})   CPU {cpu:6.2f} ms")


def _fsync_each(fds, together):
    """sync_all's fsync path, syncfs kept out."""
    keep = files.SYNCFS_DIRTY_AT
    files.SYNCFS_DIRTY_AT = -1
    try:
        files.sync_all(fds, together)
    finally:
        files.SYNCFS_DIRTY_AT = keep


if __name__ == "__main__":
    main()
