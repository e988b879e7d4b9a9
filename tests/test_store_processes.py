"""Many processes keep into one store at once, and a process killed in the
middle of a write leaves nothing half written."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import numpy as np

from somatize import Store

WRITERS = 8


def values():
    """The same values in every process: large leaves (hashed while written),
    small ones, a part shared by two structures, and one kept bare."""
    rng = np.random.default_rng(7)
    shared = rng.random(300_000)  # 2.4 MB
    return {
        "big": rng.random(400_000),
        "tree": {"shared": shared, "small": np.arange(10), "n": 3, "t": (1.5, "x")},
        "other-tree": [shared, {"again": shared}, rng.integers(0, 9, 5000)],
        "text": "the same text everywhere",
    }


def keep_all(root, index, barrier):
    store = Store(root)
    kept = values()
    barrier.wait()  # start writing together, so the writes overlap
    for name, value in kept.items():
        store.keep(f"p{index}/{name}", value)
        store.keep(f"shared/{name}", value)


def object_files(root):
    return sorted(p.relative_to(root) for p in (root / "objects").rglob("*") if p.is_file())


def equal(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(equal, a, b))
    return a == b


def test_eight_writers_of_the_same_values_leave_one_object_each(tmp_path):
    # the oracle: the same values kept once, by one process
    alone = tmp_path / "alone"
    single = Store(alone)
    for name, value in values().items():
        single.keep(name, value)

    root = tmp_path / "shared"
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(WRITERS)
    writers = [spawn.Process(target=keep_all, args=(root, i, barrier)) for i in range(WRITERS)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=300)
    assert [w.exitcode for w in writers] == [0] * WRITERS

    store = Store(root)
    assert object_files(root) == object_files(alone)
    assert store.check() == []
    assert os.listdir(root / "tmp") == []
    expected = values()
    assert len(store.names()) == (WRITERS + 1) * len(expected)
    for prefix in [f"p{i}/" for i in range(WRITERS)] + ["shared/"]:
        for name, value in expected.items():
            assert store.lookup(prefix + name) == single.lookup(name)
            assert equal(store.recall(prefix + name), value)


CRASHING_WRITER = """
import sys
import numpy as np
from somatize import Store

store = Store(sys.argv[1])
rng = np.random.default_rng(int(sys.argv[2]))
for i in range(10_000):
    big = rng.random(1_000_000)  # 8 MB: a kill lands inside a write more often than not
    store.keep(f"run{sys.argv[2]}/bare/{i % 3}", big)
    store.keep(f"run{sys.argv[2]}/tree/{i % 3}", {"w": big, "b": rng.random(300), "i": i})
    print(i, flush=True)
"""


def test_a_writer_killed_mid_write_leaves_the_store_sound(tmp_path):
    root = tmp_path / "store"
    Store(root)
    rng = np.random.default_rng(0)
    for attempt in range(5):
        writer = subprocess.Popen([sys.executable, "-c", CRASHING_WRITER, str(root), str(attempt)],
                                  stdout=subprocess.PIPE, text=True)
        writer.stdout.readline()  # it is past its first keep, so writing in its loop
        time.sleep(rng.uniform(0.0, 0.5))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stdout.close()
        assert writer.returncode == -signal.SIGKILL

    store = Store(root)
    assert store.check() == []
    names = store.names()
    assert len(names) >= 5 * 2  # every writer kept at least its first pair
    for name in names:
        value = store.recall(name)
        if "/tree/" in name:
            assert value["w"].shape == (1_000_000,) and isinstance(value["i"], int)
        else:
            assert value.shape == (1_000_000,)
