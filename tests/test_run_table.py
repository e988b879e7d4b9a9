"""The table of runs kept between listings (record/_table): a second
``runs()`` of an unchanged store serves its rows from memory, and every
change a listing must see is seen at once: a run added, removed, its summary
replaced or written in place, its log cut, its folder swapped for a link, a
run still running in another process, a run killed. Each test trusts the
files' times (``_RECENT`` set to nothing, a tick waited between a listing
and a change), the worst case for the table: by default a file written
less than two seconds ago is read again whatever its times say."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import orjson
import pytest

from somatize import Recorder, Store
from somatize.record import _runs, _table, runs
from somatize.record._columns import QUERY_STATS

TICK = 0.05  # seconds: past the clock's tick that moves a file's times


@pytest.fixture(autouse=True)
def trusting(monkeypatch):
    monkeypatch.setattr(_table, "_RECENT", 0.0)
    read = []
    real = _runs._row
    monkeypatch.setattr(_runs, "_row", lambda name, *a: read.append(name) or real(name, *a))
    return read


def record(store, run, losses, config=None):
    with Recorder(store, run=run, summarising=["loss"], config=config) as r:
        for loss in losses:
            r.forward_began()
            r({"fact": "loss", "value": loss})


def listed(store, where=None):
    time.sleep(TICK)
    return runs(store, where=where).set_index("run")


def test_an_unchanged_store_is_listed_from_memory_and_asked_from_the_same_table(tmp_path, trusting):
    store = Store(tmp_path / "s")
    for i in range(5):
        record(store, f"r{i}", [1.0, 0.1 * i], {"lr": 0.01 * i})
    first = listed(store)
    assert len(trusting) == 5
    del trusting[:]
    table = _table.table(store, QUERY_STATS)
    assert _table.table(store, QUERY_STATS) is table and trusting == []  # nothing read again
    again = listed(store)
    assert again.equals(first) and trusting == []
    assert list(listed(store, "config.lr < 0.025").index) == ["r0", "r1", "r2"] and trusting == []
    again.loc["r0", "state"] = "changed by the caller"  # a copy: the kept frame stays as it was
    assert listed(store).loc["r0", "state"] == "finished"


def test_each_change_a_listing_must_see_is_seen_at_once(tmp_path, trusting):
    store = Store(tmp_path / "s")
    for run in "abcd":
        record(store, run, [2.0, 1.0], {"lr": 0.1})
    assert listed(store)["state"].eq("finished").all()
    folder = store.path / "runs"

    record(store, "e", [0.5], {"lr": 0.2})  # a run added
    assert listed(store, "config.lr > 0.15").index.tolist() == ["e"]

    shutil.rmtree(folder / "d")  # a run removed
    assert "d" not in listed(store).index

    summary = folder / "a" / "summary.json"  # a summary renamed in
    s = orjson.loads(summary.read_bytes())
    s["config"]["lr"] = 0.3
    (folder / "a" / "new.json").write_bytes(orjson.dumps(s))
    os.replace(folder / "a" / "new.json", summary)
    assert listed(store, "config.lr > 0.25").index.tolist() == ["a"]

    raw = summary.read_bytes()  # one written in place, of the same size
    summary.write_bytes(raw.replace(b'"lr":0.3', b'"lr":0.4'))
    assert summary.stat().st_size == len(raw)
    assert listed(store, "config.lr > 0.35").index.tolist() == ["a"]

    log = folder / "b" / "facts.log"  # a log cut in place: damage, listed at once, and mended
    size = log.stat().st_size
    os.truncate(log, size - 3)
    got = listed(store)
    assert got.loc["b", "state"] == "damaged" and "facts.log" in got.loc["b", "problem"]
    with open(log, "r+b") as f:
        f.truncate(size)
    assert listed(store).loc["b", "state"] == "finished"

    moved = tmp_path / "elsewhere"  # a run's folder swapped for a link to the very same files
    shutil.move(folder / "c", moved)
    os.symlink(moved, folder / "c")
    got = listed(store)
    assert got.loc["c", "state"] == "damaged" and "symlink" in got.loc["c", "problem"]

    (folder / "a" / "summary.json").write_bytes(b"{ not json")  # broken in place
    assert listed(store).loc["a", "state"] == "damaged"


CHILD = textwrap.dedent("""
    import sys
    from somatize import Recorder, Store
    r = Recorder(Store(sys.argv[1]), run="live", summarising=["loss"], config={"lr": 0.5})
    for line in sys.stdin:
        r.forward_began()
        r({"fact": "loss", "value": float(line)})
        r.flush()
        print("flushed", flush=True)
""")


def test_a_run_running_in_another_process_is_seen_as_it_goes_and_when_killed(tmp_path, trusting):
    store = Store(tmp_path / "s")
    record(store, "done", [1.0])
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(store.path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        for step, loss in enumerate([0.9, 0.5, 0.25]):
            child.stdin.write(f"{loss}\n")
            child.stdin.flush()
            assert child.stdout.readline() == "flushed\n"
            got = listed(store)
            assert got.loc["live", "state"] == "running" and got.loc["live", "forwards"] == step + 1
            assert got.loc["live", "loss.last"] == loss
            assert listed(store, "loss.last < 0.6 and config.lr == 0.5").index.tolist() == (
                ["live"] if loss < 0.6 else [])
        del trusting[:]
        listed(store)
        assert trusting == ["live"]  # a running run is asked each time; the finished one is not
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdin.close()
        child.stdout.close()
    got = listed(store)
    assert got.loc["live", "state"] == "interrupted" and "killed" in got.loc["live", "cause"]


def test_a_live_recorder_of_this_process_is_asked_each_time(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "done", [1.0])
    with Recorder(store, run="here", summarising=["loss"]) as r:
        for step in range(3):
            r.forward_began()
            r({"fact": "loss", "value": 1.0 / (step + 1)})
            got = listed(store)
            assert got.loc["here", "state"] == "running" and got.loc["here", "forwards"] == step + 1
    assert listed(store).loc["here", "state"] == "finished"


def test_what_is_kept_is_bounded(tmp_path, monkeypatch, trusting):
    store = Store(tmp_path / "s")
    for i in range(4):
        record(store, f"r{i}", [float(i)])
    monkeypatch.setattr(_table, "KEPT_RUNS", 3)
    listed(store)
    del trusting[:]
    assert listed(store)["loss.last"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert len(trusting) == 4  # too many to keep: each listing reads them all
    assert not any(k[0] == str(store.path) for k in _table._TABLES)


def test_a_summary_written_a_moment_ago_is_read_again_whatever_its_times(tmp_path, monkeypatch, trusting):
    store = Store(tmp_path / "s")
    record(store, "r", [1.0])
    monkeypatch.setattr(_table, "_RECENT", 3600.0)  # every file is recent
    runs(store)
    del trusting[:]
    runs(store)
    assert trusting == ["r"]


def test_a_run_read_again_while_recent_is_kept_once_old_enough(tmp_path, monkeypatch, trusting):
    store = Store(tmp_path / "s")
    record(store, "r", [1.0])
    monkeypatch.setattr(_table, "_RECENT", 0.5)
    runs(store)  # just written: read, not kept
    time.sleep(0.6)
    runs(store)  # read again, the same row: now old enough to keep
    del trusting[:]
    assert runs(store).loc[0, "state"] == "finished" and trusting == []


def test_a_folder_that_becomes_a_run_after_a_listing_that_changed_nothing_is_listed(tmp_path, monkeypatch,
                                                                                    trusting):
    store = Store(tmp_path / "s")
    record(store, "a", [1.0])
    listed(store)
    monkeypatch.setattr(_table, "_RECENT", 0.3)
    (store.path / "runs" / "b").mkdir()  # a folder holding nothing recorded yet (a copy under way, say)
    time.sleep(0.4)  # runs/'s times now old enough to trust
    assert listed(store).index.tolist() == ["a"]  # runs/ listed again, the same rows
    record(store, "b", [2.0])  # runs/ itself unchanged: the folder was there
    assert listed(store).index.tolist() == ["a", "b"]


def test_rows_not_yet_kept_count_in_the_bound_too(tmp_path, monkeypatch, trusting):
    store = Store(tmp_path / "s")
    for i in range(4):
        record(store, f"r{i}", [float(i)])
    monkeypatch.setattr(_table, "KEPT_RUNS", 3)
    monkeypatch.setattr(_table, "_RECENT", 3600.0)  # every summary recent: none kept by its times yet
    listed(store)
    monkeypatch.setattr(_table, "_RECENT", 0.0)  # now old enough: read again, the same rows
    listed(store)
    del trusting[:]
    assert listed(store)["loss.last"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert len(trusting) == 4  # more runs than may be kept: each listing reads them all
    assert sum(len(t.rows) for t in _table._TABLES.values()) <= 3


def test_the_tables_kept_are_those_of_the_stores_asked_last(tmp_path, trusting):
    """A store asked again, unchanged, is the last asked: a store asked
    after it does not push its table out (it was pushed out as the oldest
    made, and its runs all read again at the next listing)."""
    stores = {k: Store(tmp_path / k) for k in "abcde"}
    for store in stores.values():
        record(store, "r", [1.0])
    time.sleep(TICK)
    first = _table.table(stores["a"], QUERY_STATS)
    for k in "bcd":
        _table.table(stores[k], QUERY_STATS)
    assert _table.table(stores["a"], QUERY_STATS) is first  # unchanged: the same table, the last asked now
    _table.table(stores["e"], QUERY_STATS)  # a fifth store: the one asked longest ago (b) goes
    del trusting[:]
    assert _table.table(stores["a"], QUERY_STATS) is first and trusting == []
    _table.table(stores["b"], QUERY_STATS)
    assert trusting == ["r"]  # b's table was the one dropped: its run read again


def test_a_list_changed_in_an_answer_changes_no_later_answer(tmp_path, trusting):
    """The rows are kept and shared between listings: a config's list (or
    dict) changed in place in one answer was in every later one, runs(),
    runs(where=) and the explorer's selection alike, until the run changed."""
    from somatize.record import compare

    store = Store(tmp_path / "s")
    record(store, "a", [1.0], {"tags": [1, 2], "optim": {"betas": [0.9, 0.99]}, "lr": 0.1})
    record(store, "b", [0.5], {"tags": ["x"], "lr": 0.2})
    listed(store)  # the table made, its rows kept
    for answer in (lambda: runs(store), lambda: runs(store, where="config.lr < 1"),
                   lambda: compare(store).selected):
        got = answer().set_index("run")
        got.loc["a", "config.tags"].append(99)
        got.loc["a", "config.optim.betas"][0] = 0.0
        again = runs(store).set_index("run")
        assert again.loc["a", "config.tags"] == [1, 2] and again.loc["a", "config.optim.betas"] == [0.9, 0.99]
        assert answer().set_index("run").loc["a", "config.tags"] == [1, 2]
