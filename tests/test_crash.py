"""kill -9 at random moments: every fact a completed flush wrote is there, in
order, once; the store checks clean; the run reads interrupted. And several
processes recording into one store at once lose and mix nothing."""

import random
import signal
import subprocess
import sys

from somatize import Store
from somatize.record import curve, facts, runs
from somatize.record._check import check_runs

# Each fact carries its place in the whole sequence (seq), so that loss,
# duplication and disorder are all visible in one comparison.
WRITER = """
import sys, time
from somatize import Recorder
store, run, resume = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
recorder = Recorder(store, run=run, resume=resume)
seq = recorder._summary["facts"]  # what the run holds after resuming: one seq each
print("from", seq, flush=True)
while True:
    recorder.forward_began()
    for _ in range(7):
        recorder({"fact": "ran", "node": "n", "seq": seq, "took_us": seq % 97})
        seq += 1
    if seq % 70 == 0:
        recorder.flush()
        print(seq, flush=True)
        time.sleep(0.001)  # the background flusher gets its turns too
"""


def flushed_before(process, reports):
    """Read the writer's first ``reports`` flush reports, then kill -9 at once:
    the kill lands while the writer hands facts over and its background
    flusher runs. Returns the count of facts its last reported flush made durable."""
    first = process.stdout.readline()
    assert first.startswith("from"), first
    flushed = int(first.split()[1])
    for _ in range(reports):
        flushed = int(process.stdout.readline())
    process.send_signal(signal.SIGKILL)
    process.wait()
    return flushed


def test_kill_9_loses_nothing_before_the_last_completed_flush(tmp_path):
    """The window the docs promise: a kill -9 loses at most the facts handed
    over since the last flush that completed; everything before it reads back
    in order, once; the store checks clean; the run reads interrupted."""
    path = tmp_path / "store"
    store = Store(path)
    rng = random.Random(20)
    for attempt in range(22):
        with subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), "r", "1" if attempt else "0"],
            stdout=subprocess.PIPE,
            text=True,
        ) as writer:
            flushed = flushed_before(writer, rng.randrange(0, 40))
        assert writer.returncode == -signal.SIGKILL
        seqs = [f["seq"] for f in facts(store, "r")]
        assert seqs == list(range(len(seqs)))  # in order, no duplicates, no holes
        assert len(seqs) >= flushed  # nothing a completed flush wrote is lost
        assert runs(store).set_index("run").loc["r", "state"] == "interrupted"
        problems, _notes = check_runs(path)
        assert problems == [] and store.check() == []
    done = subprocess.run([sys.executable, "-m", "somatize.cli", "check", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


FOUR = """
import sys, time
from somatize import Recorder
store, run = sys.argv[1], sys.argv[2]
with Recorder(store, run=run, summarising=["loss"]) as recorder:
    print("ready", flush=True)
    sys.stdin.readline()  # all four start writing at once
    for i in range(5000):
        recorder.forward_began()
        recorder({"fact": "step", "run": run, "i": i})
        recorder({"fact": "loss", "value": i / 5000})
        if i % 250 == 249:
            recorder.flush()  # twenty flushes each, interleaved with the others'
            time.sleep(0.002)
"""


def test_four_processes_record_four_runs_into_one_store_at_once(tmp_path):
    path = tmp_path / "store"
    store = Store(path)
    names = [f"run-{k}" for k in range(4)]
    writers = [subprocess.Popen([sys.executable, "-c", FOUR, str(path), name], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for name in names]
    assert [w.stdout.readline() for w in writers] == ["ready\n"] * 4
    for w in writers:
        w.stdin.write("go\n")
        w.stdin.flush()
    assert [w.wait(60) for w in writers] == [0, 0, 0, 0]
    for w in writers:
        w.stdin.close()
        w.stdout.close()
    listed = runs(store).set_index("run")
    for name in names:
        steps = [f for f in facts(store, name) if f["fact"] == "step"]
        assert steps == [{"fact": "step", "run": name, "i": i} for i in range(5000)]
        assert list(curve(store, name, "loss")) == [i / 5000 for i in range(5000)]
        assert listed.loc[name, "state"] == "finished" and listed.loc[name, "forwards"] == 5000
        assert listed.loc[name, "loss.last"] == 4999 / 5000
    assert check_runs(path) == ([], []) and store.check() == []
