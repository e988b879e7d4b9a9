"""Store speed: keep and recall of a 64 MiB array, against np.save / np.load.

Each figure is the median of RUNS runs, the runs of every contender
interleaved in one process so they share the machine's mood. keep is durable
(file and folder fsync'd) and writes new content every run (one element
changes), so it never dedupes; recall verifies the object's checksum.
A large keep writes around the page cache (O_DIRECT: on this VM, memory the
guest never touched costs ~150 ms per 64 MiB to back on first touch, for page
cache and fresh arrays alike), so "recall, first" reads the object from disk
and "recall" (the second) finds it cached. "keep serial" is the plain path:
hash first, then a buffered write; "keep buffered" hashes while writing but
through the page cache (Store(direct_io=False)), and "recall buffered,
first" recalls what it wrote. Together they are the measure behind the
default of Store(direct_io=). WARMUP rounds go first, uncounted.

    .venv/bin/python bench/bench_store.py [--quick]

Targets: keep >= 1.4 GB/s, recall (cached) >= 5 GB/s; the anchors np.save
(+ fsync) and np.load beside them.
"""

import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import QUICK, machine, reported, target

import somatize._store.writer as writer_module
from somatize import Store

RUNS = 2 if QUICK else int(os.environ.get("RUNS", 9))
WARMUP = 1 if QUICK else int(os.environ.get("WARMUP", 3))  # rounds run first and not counted
ELEMENTS = (2 if QUICK else 8) * 1024 * 1024  # float64: 16 MiB with --quick, 64 MiB
MB = 1e6
TARGET_KEEP = 1.4  # GB/s, the targets
TARGET_RECALL = 5.0


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main():
    folder = Path(tempfile.mkdtemp(prefix="bench-store-", dir=os.environ.get("BENCH_DIR")))
    store = Store(folder / "store", direct_io=True)
    buffered = Store(folder / "buffered", direct_io=False)
    a = np.random.default_rng(0).random(ELEMENTS)
    size = a.nbytes
    times = {k: [] for k in ("keep", "keep serial", "keep buffered", "recall buffered, first", "np.save+fsync",
                             "recall, first", "recall", "np.load", "sha256", "write+fsync")}
    cpu = []

    # every contender writes a new file each round, as keep writes a new object:
    # on this disk, writing blocks never written (or freed) costs far more
    # than rewriting a file in place
    def np_save():
        with open(folder / f"baseline-{run}.npy", "wb") as f:
            np.save(f, a)
            f.flush()
            os.fsync(f.fileno())

    def raw_write():
        with open(folder / f"raw-{run}", "wb") as f:
            f.write(memoryview(a).cast("B"))
            f.flush()
            os.fsync(f.fileno())

    for run in range(-WARMUP, RUNS):
        if run == 0:
            times = {k: [] for k in times}
            cpu = []
        a[0] = run  # new content: a real write every run
        c = time.process_time()
        times["keep"].append(timed(lambda: store.keep("big", a)))
        cpu.append(time.process_time() - c)
        a[0] = -run - 1  # the same keep, hashing first and writing after (no thread)
        threshold, writer_module._HASH_WHILE_WRITING = writer_module._HASH_WHILE_WRITING, 1 << 62
        times["keep serial"].append(timed(lambda: store.keep("serial", a)))
        writer_module._HASH_WHILE_WRITING = threshold
        a[0] = run + 0.5  # hashing while writing, but buffered: Store(direct_io=False)
        times["keep buffered"].append(timed(lambda: buffered.keep("buffered", a)))
        times["recall buffered, first"].append(timed(lambda: buffered.recall("buffered")))
        a[0] = run
        times["np.save+fsync"].append(timed(np_save))
        # a large keep goes around the page cache (O_DIRECT), so the first
        # recall reads the disk; from the second on, the pages are cached
        times["recall, first"].append(timed(lambda: store.recall("big")))
        times["recall"].append(timed(lambda: store.recall("big")))
        times["np.load"].append(timed(lambda run=run: np.load(folder / f"baseline-{run}.npy")))
        times["sha256"].append(timed(lambda: hashlib.sha256(memoryview(a).cast("B")).digest()))
        times["write+fsync"].append(timed(raw_write))
    assert np.array_equal(store.recall("big"), a)

    small = {"x": np.arange(16, dtype=np.float32), "step": 3, "tag": "batch"}
    n = 2000
    digest_small = statistics.median(timed(lambda: [store.digest_of(small) for _ in range(n)]) / n for _ in range(5))

    # many leaves: an export of a 100-layer model, weights 8 KB and biases 320 B each
    rng = np.random.default_rng(1)
    many = []
    for run in range(5):
        export = {f"layer{i}": {"w": rng.random(1000), "b": rng.random(40)} for i in range(100)}
        many.append(timed(lambda run=run, export=export: store.keep(f"export{run}", export)))
    small_keep = [timed(lambda i=i: store.keep("small", {**small, "step": i})) for i in range(RUNS)]

    gbs = {k: size / statistics.median(v) / 1e9 for k, v in times.items()}
    out = sys.stdout
    out.write(f"{size >> 20} MiB float64 array, median of {RUNS} runs, GB/s (1 GB = 1e9 bytes); {machine()}\n")
    for k, v in gbs.items():
        out.write(f"  {k:<22} {v:6.2f}\n")
    floor = min(gbs["sha256"], gbs["write+fsync"])  # keep hashes and writes at once: the slower bounds it
    out.write(f"keep   / its bound min(sha256, write+fsync) {floor:.2f}: {gbs['keep'] / floor:.2f}x\n")
    out.write(f"keep   / keep serial: {gbs['keep'] / gbs['keep serial']:.2f}x; "
              f"CPU seconds per keep {statistics.median(cpu):.3f} vs wall {statistics.median(times['keep']):.3f}\n")
    out.write(f"digest_of a small dict: {digest_small * 1e6:.1f} µs\n")
    out.write(f"keep of a small dict (durable): {statistics.median(small_keep) * 1e3:.2f} ms\n")
    out.write(f"keep of a 100-layer export (200 leaf objects + manifest): {statistics.median(many) * 1e3:.1f} ms\n")
    reported("keep / np.save + fsync (the anchor), GB/s over GB/s", gbs["keep"] / gbs["np.save+fsync"])
    reported("recall / np.load (the anchor, unverified), GB/s over GB/s", gbs["recall"] / gbs["np.load"])
    target(f"keep of a {size >> 20} MiB array, durable", gbs["keep"], TARGET_KEEP, "GB/s", at_least=True)
    target(f"recall of a {size >> 20} MiB array, verified, cached", gbs["recall"], TARGET_RECALL, "GB/s", at_least=True)
    for p in sorted(folder.rglob("*"), reverse=True):
        p.chmod(0o755)
        p.rmdir() if p.is_dir() else p.unlink()
    folder.rmdir()


if __name__ == "__main__":
    main()
