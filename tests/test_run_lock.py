"""A run has one writer, whatever else its process does: the lock a Recorder
holds is asked about by listings in the same process (a panel polling, the
run browser's thread) and by other processes, and none of them loses it.
Every other process here is a real one."""

import os
import subprocess
import sys
import threading

import pytest

from somatize import Recorder
from somatize._base import locks
from somatize.record import _runs, runs

OTHER = """
import json, os, pathlib, sys
from somatize.record import _runs, runs
store, names = sys.argv[1], json.loads(sys.argv[2])
took = []
for name in names:  # the very step a Recorder takes: would this process get the run's lock?
    fd = _runs.try_lock(pathlib.Path(store, "runs", name))
    if fd is not None:
        took.append(name)
        os.close(fd)
states = dict(zip(runs(store)["run"], runs(store)["state"]))
print(json.dumps({"took": took, "states": [states[n] for n in names]}))
"""


def another_process(store, names):
    """What another process finds of ``names``: the runs whose lock it could
    take (two writers), and each one's state as its listing says."""
    import json

    done = subprocess.run([sys.executable, "-c", OTHER, str(store), json.dumps(names)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("ofd", [True, False], ids=["ofd", "flock"])
def test_a_lock_is_held_by_its_open_file_not_by_its_process(tmp_path, ofd):
    if ofd and not locks.OFD:
        pytest.fail("this Linux's Python has no F_OFD_SETLK: the record's locks would be flock's")
    path = tmp_path / "lock"
    holder = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    assert locks.take(holder, ofd)
    for _ in range(3):  # probing from the holder's own process, and closing the probe, drops nothing
        probe = os.open(path, os.O_RDONLY)
        assert locks.held(probe, ofd)
        os.close(probe)
    second = os.open(path, os.O_RDWR)
    assert not locks.take(second, ofd)  # another open file of this process is refused too
    os.close(second)
    assert locks.held(os.open(path, os.O_RDONLY), ofd)
    os.close(holder)
    probe = os.open(path, os.O_RDONLY)
    assert not locks.held(probe, ofd)  # let go with its open file
    assert locks.take(os.open(path, os.O_RDWR), ofd)


def test_probing_a_run_this_process_records_keeps_its_lock(tmp_path):
    with Recorder(str(tmp_path), run="r") as rec:
        rec({"fact": "loss", "value": 1.0})
        folder = tmp_path / "runs" / "r"
        assert _runs.holder_alive(folder)  # the probe is the answer, for our own run too
        assert _runs.holder_alive(folder)
        seen = another_process(tmp_path, ["r"])
        assert seen == {"took": [], "states": ["running"]}
        resume = subprocess.run(
            [sys.executable, "-c", "import sys; from somatize import Recorder; "
             "Recorder(sys.argv[1], run='r', resume=True)", str(tmp_path)],
            capture_output=True, text=True, timeout=120)
        assert resume.returncode == 1 and "SomatizeValueError: run 'r' is being recorded right now" in resume.stderr
    assert another_process(tmp_path, ["r"]) == {"took": ["r"], "states": ["finished"]}


def test_a_listing_racing_recorders_that_open_never_lets_another_process_in(tmp_path):
    store = str(tmp_path)
    stop = threading.Event()
    listed = []

    def listing():  # a panel, or the run browser's thread, listing the store over and over
        while not stop.is_set():
            listed.append(len(runs(store)))

    Recorder(store, run="first").close()
    runs(store)  # imported and warm: the listings below race the opens
    thread = threading.Thread(target=listing)
    thread.start()
    recorders = []
    try:  # until the listing has run many times over runs opening (counts, not time)
        while len(recorders) < 100 or len({n for n in listed if n}) < 10:
            recorders.append(Recorder(store, run=f"r{len(recorders):04d}"))
            assert len(recorders) < 3000, "the listing thread did not run"
    finally:
        stop.set()
        thread.join()
    names = [r.run for r in recorders]
    seen = another_process(tmp_path, names)
    assert seen["took"] == [] and set(seen["states"]) == {"running"}
    for rec in recorders:
        rec.close()
    assert another_process(tmp_path, names[:3])["states"] == ["finished"] * 3


def test_a_forked_child_does_not_keep_its_parents_run_locked(tmp_path):
    rec = Recorder(str(tmp_path), run="r")
    rec({"fact": "loss", "value": 1.0})
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a DataLoader worker, say, outliving its parent's Recorder
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    try:
        rec.close()
        assert another_process(tmp_path, ["r"]) == {"took": ["r"], "states": ["finished"]}
        with Recorder(str(tmp_path), run="r", resume=True) as again:
            again({"fact": "loss", "value": 0.5})
    finally:
        os.write(write, b"x")
        os.close(write)
        os.waitpid(child, 0)
