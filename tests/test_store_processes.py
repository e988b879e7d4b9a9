"""Many processes keep into one store at once, record runs into it at once,
and a process killed in the middle of a write leaves nothing half written.

What this leans on (docs/store-and-record.md): objects and refs are written
to tmp/ and renamed into place (rename is atomic on one file system); a run
is written by one process, which holds its fcntl lock."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import numpy as np

from somatize import Recorder, Store
from somatize.cli import check_report
from somatize.record import curve, facts, runs

WRITERS = 16
RECORDERS = 32


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


def own(index):
    """A value only process ``index`` keeps."""
    return {"w": np.random.default_rng(100 + index).random(50_000), "i": index}


def keep_all(root, index, barrier):
    store = Store(root)
    kept = values()
    barrier.wait()  # start writing together, so the writes overlap
    for name, value in kept.items():
        store.keep(f"p{index}/{name}", value)
        store.keep(f"shared/{name}", value)
        store.keep(f"own/{index}", own(index))


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


def test_sixteen_writers_of_the_same_and_different_values_leave_one_object_each(tmp_path):
    # the oracle: the same values kept once, by one process
    alone = tmp_path / "alone"
    single = Store(alone)
    for name, value in values().items():
        single.keep(name, value)
    for i in range(WRITERS):
        single.keep(f"own/{i}", own(i))

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
    assert len(store.names()) == (WRITERS + 1) * len(expected) + WRITERS
    for prefix in [f"p{i}/" for i in range(WRITERS)] + ["shared/"]:
        for name, value in expected.items():
            assert store.lookup(prefix + name) == single.lookup(name)
            assert equal(store.recall(prefix + name), value)
    for i in range(WRITERS):
        assert store.lookup(f"own/{i}") == single.lookup(f"own/{i}")
        assert equal(store.recall(f"own/{i}"), own(i))


def record_run(root, index, barrier, named):
    """Record 300 forwards; a named run or one the Recorder names."""
    barrier.wait()
    with Recorder(Store(root), run=f"named-{index}" if named else None, config={"index": index}) as r:
        for i in range(300):
            r.forward_began()
            r({"fact": "finished", "took_us": i})
            r({"fact": "loss", "value": index + i / 1000})
            r({"fact": "note", "node": "n", "index": index, "i": i})


def test_thirty_two_processes_record_their_runs_at_once_into_one_store(tmp_path):
    """Half name their runs, half let the Recorder name them (names drawn in
    the same second claim their folder: none collides); nothing is lost or
    mixed, no lock refuses anyone, the store checks clean."""
    root = tmp_path / "store"
    Store(root)
    fork = multiprocessing.get_context("fork")  # 32 interpreters started fresh would take a minute on 2 cores
    barrier = fork.Barrier(RECORDERS)
    procs = [fork.Process(target=record_run, args=(root, i, barrier, i % 2 == 0)) for i in range(RECORDERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * RECORDERS
    table = runs(root)
    assert len(table) == RECORDERS and (table["state"] == "finished").all() and (table["forwards"] == 300).all()
    assert sorted(table["config.index"]) == list(range(RECORDERS))
    for run, index in zip(table["run"], table["config.index"]):
        if index % 2 == 0:
            assert run == f"named-{index}"
        assert list(curve(root, run, "loss")) == [index + i / 1000 for i in range(300)]
        notes = [(f["index"], f["i"]) for f in facts(root, run) if f["fact"] == "note"]
        assert notes == [(index, i) for i in range(300)]
    report, clean = check_report(root)
    assert clean, report


HOLDER = """
import sys
from somatize import Recorder, Store

r = Recorder(Store(sys.argv[1]), run="same")
for i in range(50):
    r.forward_began()
    r({"fact": "loss", "value": float(i)})
r.flush()
print("holding", flush=True)
sys.stdin.readline()  # go on when told
for i in range(50, 100):
    r.forward_began()
    r({"fact": "loss", "value": float(i)})
r.close()
"""

SECOND = """
import sys
from somatize import Recorder, SomatizeError, Store

for resume in (False, True):
    try:
        Recorder(Store(sys.argv[1]), run="same", resume=resume)
    except SomatizeError as e:
        print(type(e).__name__, e)
    else:
        print("opened")
"""


def test_a_second_process_opening_a_run_being_recorded_is_refused_and_the_run_is_untouched(tmp_path):
    root = tmp_path / "store"
    Store(root)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        second = subprocess.run([sys.executable, "-c", SECOND, str(root)], capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 0, second.stderr
        lines = second.stdout.strip().splitlines()
        assert len(lines) == 2
        for line in lines:  # as a new run and as a resume: both refused, naming the holder and another name
            assert line.startswith("SomatizeValueError") and "being recorded right now" in line
            assert f"pid {holder.pid}" in line and "run='same-2'" in line
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.wait(timeout=120) == 0
    finally:
        holder.kill()
        holder.wait()
        holder.stdin.close()
        holder.stdout.close()
    assert list(curve(root, "same", "loss")) == [float(i) for i in range(100)]
    assert runs(root).set_index("run").loc["same", "state"] == "finished"
    report, clean = check_report(root)
    assert clean, report


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
