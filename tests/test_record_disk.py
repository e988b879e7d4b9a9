"""The record on disk: damage is found and named, a torn tail is not damage,
and resuming cuts back to the last completed flush without losing a whole block."""

import os
import threading
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
from forked import ended

from somatize import Recorder, Store
from somatize._base.errors import DamagedError, SomatizeKeyError
from somatize.record import _log, curve, facts, forwards, runs
from somatize.record._check import check_run
from somatize.record._runs import INDEX, LOG, SERIES


def read_index(path):
    return np.frombuffer(path.read_bytes(), _log.INDEX)


def fill(store, run, n, start=0, resume=False):
    with Recorder(store, run=run, resume=resume) as recorder:
        for i in range(start, start + n):
            recorder.forward_began()
            recorder({"fact": "finished", "took_us": i})
            recorder({"fact": "loss", "value": i / 10})
            if i % 50 == 49:
                recorder.flush()  # several flushes, several index appends
    return store.path / "runs" / run


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def test_a_clean_run_checks_clean(store):
    folder = fill(store, "r", 2000)
    assert check_run(folder) == ([], [])


def test_chopped_log_still_lists_reads_before_the_damage_and_is_reported(store):
    folder = fill(store, "r", 2000)
    log = folder / "facts.log"
    size = log.stat().st_size
    with open(log, "r+b") as f:
        f.truncate(size - 100)
    listed = runs(store).set_index("run").loc["r"]
    assert listed["forwards"] == 2000  # what the summary says still lists ...
    assert listed["state"] == "damaged" and "facts.log" in listed["problem"]  # ... marked damaged (issue 10)
    index = read_index(folder / "index.bin")
    last_block = index[-1]
    assert facts(store, "r", forward=int(last_block["first"]) - 1) != []
    with pytest.raises(DamagedError, match=f"byte {last_block['offset']}"):
        facts(store, "r", forward=1999)
    problems, _ = check_run(folder)
    assert len(problems) == 1 and f"byte {last_block['offset']}" in problems[0] and "'r'" in problems[0]


def test_a_flipped_byte_is_damage_at_its_block(store):
    folder = fill(store, "r", 2000)
    index = read_index(folder / "index.bin")
    victim = index[1]
    with open(folder / "facts.log", "r+b") as f:
        f.seek(int(victim["offset"]) + 40)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    problems, _ = check_run(folder)
    assert len(problems) == 1 and f"byte {victim['offset']}" in problems[0]
    assert len(facts(store, "r", forward=int(victim["first"]) - 1)) == 2
    with pytest.raises(DamagedError):
        facts(store, "r", forward=int(victim["first"]) + 1)
    with pytest.raises(DamagedError):
        facts(store, "r")


def test_every_damaged_block_is_reported_and_the_others_still_read(store):
    folder = fill(store, "r", 2000)
    index = read_index(folder / "index.bin")
    victims = [index[1], index[len(index) // 2]]
    with open(folder / "facts.log", "r+b") as f:
        for victim in victims:
            f.seek(int(victim["offset"]) + 40)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
    problems, _ = check_run(folder)
    assert len(problems) == 1 and "2 block(s)" in problems[0]
    assert all(f"byte {v['offset']}" in problems[0] for v in victims)
    after = int(index[-1]["last"])  # past both damaged blocks
    assert [f["fact"] for f in facts(store, "r", forward=after)] == ["finished", "loss"]


def torn_tail(folder, forward, cut):
    """What a kill leaves mid-flush: a block past the last completed flush."""
    data, _ = _log.encode_blocks([(forward, [{"fact": "finished", "took_us": -1}])])
    with open(folder / "facts.log", "ab") as f:
        f.write(data[: cut or len(data)])
    return data


def test_a_torn_tail_is_a_note_not_damage(store):
    folder = fill(store, "r", 300)
    torn_tail(folder, 300, cut=20)
    problems, notes = check_run(folder)
    assert problems == [] and len(notes) == 1 and "torn" in notes[0]
    assert len(facts(store, "r")) == 600


def test_resume_cuts_a_torn_tail_and_goes_on(store):
    folder = fill(store, "r", 300)
    torn_tail(folder, 300, cut=20)
    fill(store, "r", 10, start=300, resume=True)
    assert check_run(folder) == ([], [])
    assert [f["took_us"] for f in facts(store, "r") if f["fact"] == "finished"] == list(range(310))


def test_resume_keeps_a_whole_block_written_by_an_unfinished_flush(store):
    folder = fill(store, "r", 300)
    torn_tail(folder, 300, cut=None)  # whole, but the summary never counted it
    assert facts(store, "r", forward=300) == [{"fact": "finished", "took_us": -1}]
    fill(store, "r", 5, start=301, resume=True)
    assert check_run(folder) == ([], [])
    took = forwards(store, "r")["took_us"]
    assert list(took[299:303]) == [299, -1, 301, 302]


def test_resume_keeps_the_whole_block_before_a_torn_one(store):
    folder = fill(store, "r", 300)
    torn_tail(folder, 300, cut=None)  # a whole block of the interrupted flush
    torn_tail(folder, 301, cut=20)  # and the next, torn by the kill
    fill(store, "r", 2, start=302, resume=True)
    assert check_run(folder) == ([], [])
    assert list(forwards(store, "r")["took_us"][299:304]) == [299, -1, 302, 303]


def test_resume_cuts_series_back_to_the_last_completed_flush(store):
    folder = fill(store, "r", 100)
    with open(_log.series_file(folder / "series", "loss"), "ab") as f:
        f.write(_log.points_bytes([100], [99.0]) + b"\x01\x02\x03")  # a flush cut after the log
    assert len(curve(store, "r", "loss")) == 100  # only what a completed flush wrote is read
    fill(store, "r", 1, start=100, resume=True)
    assert list(curve(store, "r", "loss").iloc[-2:]) == [9.9, 10.0]


def test_a_summary_that_does_not_parse_is_damage(store):
    folder = fill(store, "r", 10)
    (folder / "summary.json").write_bytes(b"{not json")
    problems, _ = check_run(folder)
    assert problems and "summary.json" in problems[0]


def test_a_cut_series_is_damage(store):
    folder = fill(store, "r", 100)
    path = _log.series_file(folder / "series", "loss")
    with open(path, "r+b") as f:
        f.truncate(16 * 50)
    problems, _ = check_run(folder)
    assert problems and "series 'loss'" in problems[0]


def test_the_index_is_not_needed_to_read(store):
    folder = fill(store, "r", 1000)
    (folder / "index.bin").unlink()
    assert facts(store, "r", forward=777) == [{"fact": "finished", "took_us": 777}, {"fact": "loss", "value": 77.7}]


def test_a_block_holds_at_most_its_share_and_a_forward_may_span_two(store):
    big = [{"fact": "x", "i": i} for i in range(_log.BLOCK_FACTS + 10)]
    with Recorder(store, run="big") as recorder:
        recorder.forward_began()
        recorder({"fact": "small"})
        recorder.forward_began()
        for fact in big:
            recorder(fact)
    index = read_index(store.path / "runs" / "big" / "index.bin")
    assert len(index) == 2 and list(index["last"]) == [1, 1]
    assert facts(store, "big", forward=1) == big
    summary = orjson.loads((store.path / "runs" / "big" / "summary.json").read_bytes())
    assert summary["facts"] == len(big) + 1 and np.all(index["length"] > 0)


def summary_of(folder):
    return orjson.loads((folder / "summary.json").read_bytes())


def rewrite_summary(folder, **fields):
    s = summary_of(folder)
    s.update(fields)
    (folder / "summary.json").write_bytes(orjson.dumps(s))


def flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))


def test_a_flipped_byte_in_a_series_is_damage_never_a_curve(store):
    folder = fill(store, "r", 300)
    path = _log.series_file(folder / "series", "loss")
    flip(path, 16 * 7 + 9)  # a value's byte: still a float, just another one
    with pytest.raises(DamagedError, match=r"loss\.bin.*somatize check"):
        curve(store, "r", "loss")
    with pytest.raises(DamagedError, match=r"loss\.bin"):
        forwards(store, "r")
    problems, _ = check_run(folder)
    assert len(problems) == 1 and "series 'loss'" in problems[0] and "resume=True" in problems[0]


def test_a_cut_series_is_damage_never_a_short_curve(store):
    folder = fill(store, "r", 300)
    path = _log.series_file(folder / "series", "loss")
    with open(path, "r+b") as f:
        f.truncate(16 * 200)
    with pytest.raises(DamagedError, match=r"loss\.bin"):
        curve(store, "r", "loss")


def test_resume_rebuilds_a_damaged_series_and_index_from_the_log(store):
    folder = fill(store, "r", 300)
    flip(_log.series_file(folder / "series", "loss"), 16 * 7 + 9)
    flip(folder / "index.bin", 8)
    fill(store, "r", 2, start=300, resume=True)
    assert check_run(folder) == ([], [])
    assert list(curve(store, "r", "loss")) == [i / 10 for i in range(302)]


def test_an_index_entry_shifted_still_finds_every_forward_and_is_reported(store):
    folder = fill(store, "r", 2000)
    raw = bytearray((folder / "index.bin").read_bytes())
    index = np.frombuffer(raw, _log.INDEX)
    index[2]["first"] += 40  # the block's forwards, as a wrong index would name them
    index[2]["last"] += 40
    (folder / "index.bin").write_bytes(bytes(raw))
    first = int(read_index(folder / "index.bin")[2]["first"]) - 40
    for n in range(first, first + 45):
        assert facts(store, "r", forward=n) == [{"fact": "finished", "took_us": n}, {"fact": "loss", "value": n / 10}]
    problems, _ = check_run(folder)
    assert len(problems) == 1 and "index.bin" in problems[0]


@pytest.mark.parametrize("field, value", [("log_bytes", -40), ("facts", -1), ("forwards", -1)])
def test_a_summary_whose_counts_are_not_the_logs_is_damage(store, field, value):
    """Counts off by a little, of the right type, are caught by comparing them
    with the log (kills the mutant that drops the facts-count check)."""
    folder = fill(store, "r", 300)
    rewrite_summary(folder, **{field: summary_of(folder)[field] + value})
    problems, _ = check_run(folder)
    assert problems and all("'r'" in p for p in problems)
    said = {"log_bytes": "ended at byte", "facts": "facts", "forwards": "forwards"}[field]
    assert any("summary.json" in p and said in p for p in problems)


@pytest.mark.parametrize("field, value", [("facts", "300"), ("forwards", 2.5), ("log_bytes", None),
                                          ("state", "sleeping"), ("series", []), ("nodes", {"a": {"ran": "x"}}),
                                          ("summarising", 5)])
def test_a_summary_field_of_the_wrong_type_is_damage_everywhere(store, field, value):
    folder = fill(store, "r", 30)
    fill(store, "other", 5)
    rewrite_summary(folder, **{field: value})
    problems, _ = check_run(folder)
    assert len(problems) == 1 and repr(field) in problems[0] and "summary.json" in problems[0]
    listed = runs(store).set_index("run")
    assert listed.loc["r", "state"] == "damaged" and repr(field) in listed.loc["r", "problem"]
    assert listed.loc["other", "state"] == "finished" and listed.loc["other", "forwards"] == 5
    for query in (lambda: curve(store, "r", "loss"), lambda: forwards(store, "r"),
                  lambda: facts(store, "r", forward=0)):
        with pytest.raises(DamagedError, match="summary.json"):
            query()


@pytest.mark.parametrize("body", [b"[1, 2]", b'{"summarising": 5}', b"7", b"{not json", b'"a string"'])
def test_a_summary_that_is_not_one_lists_damaged_and_the_other_runs_list(store, body):
    from somatize.record import nodes

    folder = fill(store, "r", 30)
    fill(store, "other", 5)
    (folder / "summary.json").write_bytes(body)
    listed = runs(store).set_index("run")
    assert listed.loc["r", "state"] == "damaged"
    assert listed.loc["other", "forwards"] == 5
    for query in (lambda: nodes(store, "r"), lambda: forwards(store, "r"), lambda: facts(store, "r")):
        with pytest.raises(DamagedError, match="summary.json"):
            query()
    problems, _ = check_run(folder)
    assert len(problems) == 1 and "summary.json" in problems[0]


def test_forwards_of_a_summary_claiming_a_trillion_is_bounded_by_the_log(store):
    folder = fill(store, "r", 30)
    rewrite_summary(folder, forwards=10**12, facts=10**12, log_bytes=10**12)
    with pytest.raises(DamagedError, match="facts.log"):
        forwards(store, "r")
    with pytest.raises(DamagedError):
        facts(store, "r")
    other = fill(store, "other", 30)
    rewrite_summary(other, forwards=10**12)  # more forwards than facts: not a summary we wrote
    with pytest.raises(DamagedError, match="1000000000000 forwards and 60 facts"):
        forwards(store, "other")


def test_a_run_of_format_1_reads_and_resume_gives_it_checksums(store):
    """Runs written before checksums (format 1: sizes only) still read; the
    index is checked by its shape, and resume rebuilds index and series."""
    folder = fill(store, "r", 300)
    s = summary_of(folder)
    s.update(format=1, series={name: size for name, (size, _sum) in s["series"].items()})
    del s["index"]
    (folder / "summary.json").write_bytes(orjson.dumps(s))
    assert facts(store, "r", forward=123) == [{"fact": "finished", "took_us": 123}, {"fact": "loss", "value": 12.3}]
    assert len(curve(store, "r", "loss")) == 300
    assert check_run(folder) == ([], [])
    fill(store, "r", 1, start=300, resume=True)
    assert summary_of(folder)["format"] == 2 and summary_of(folder)["index"][1] is not None
    assert check_run(folder) == ([], []) and len(curve(store, "r", "loss")) == 301


def test_a_flush_that_fails_at_exit_is_said_on_stderr(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\nfrom somatize import Recorder\n"
        "r = Recorder(sys.argv[1], run='r')\nr.forward_began(); r({'fact': 'loss', 'value': 1.0}); r.flush()\n"
        "import pathlib; (pathlib.Path(sys.argv[1]) / 'runs/r/series/energy.bin').mkdir()\n"
        "r.forward_began(); r({'fact': 'energy', 'value': 2.0})\n"  # no close(): exit flushes
    )
    Store(tmp_path / "store")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert "somatize:" in done.stderr and "energy.bin" in done.stderr and "resume=True" in done.stderr


@pytest.mark.parametrize("junk", ["fifo", "symlink"])
def test_junk_at_the_summarys_temp_name_is_cleared_not_written_through(store, tmp_path, junk):
    import os

    folder = fill(store, "r", 3)
    tmp = folder / f".summary.json.{os.getpid()}.tmp"
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    os.mkfifo(tmp) if junk == "fifo" else tmp.symlink_to(outside)
    fill(store, "r", 2, start=3, resume=True)
    assert outside.read_text() == "keep me" and not os.path.lexists(tmp)
    assert len(forwards(store, "r")) == 5


@pytest.mark.parametrize("how", ["truncated", "emptied", "removed", "a folder"])
def test_a_log_cut_after_its_summary_lists_damaged_and_the_other_runs_list(store, how):
    """Issue 10: a truncated log is damage the listing shows (it listed as finished)."""
    import shutil

    from somatize.cli import runs_table

    folder = fill(store, "r", 30)
    fill(store, "other", 5)
    log = folder / "facts.log"
    size = log.stat().st_size
    if how == "truncated":
        os.truncate(log, size // 2)
    elif how == "emptied":
        os.truncate(log, 0)
    elif how == "removed":
        log.unlink()
    else:
        log.unlink()
        log.mkdir()
    listed = runs(store).set_index("run")
    assert listed.loc["r", "state"] == "damaged", listed.loc["r"]
    problem = listed.loc["r", "problem"]
    assert "facts.log" in problem and "somatize check" in problem
    if how in ("truncated", "emptied"):
        assert f"fewer than the {size}" in problem
    assert listed.loc["other", "state"] == "finished" and listed.loc["other", "forwards"] == 5
    assert "damaged" in runs_table(store.path)
    if how == "a folder":
        shutil.rmtree(log)


def test_a_running_run_whose_log_is_ahead_of_its_summary_is_not_damage(store):
    """The log is written before the summary that counts it: more bytes than counted is a flush in flight."""
    folder = fill(store, "r", 30)
    with open(folder / "facts.log", "ab") as f:
        f.write(b"\0" * 100)  # bytes past the summary's count: a flush a kill interrupted
    assert runs(store).set_index("run").loc["r", "state"] == "finished"


@pytest.mark.parametrize("how", ["syncfs", "fsync"])
def test_every_file_a_summary_counts_was_synced_before_it_and_a_close_writes_the_summary_once(store, monkeypatch, how):
    """Durability, seen from the system calls: when a summary is renamed into
    place, every file it counts (the log, the index, each series) was synced
    at least as long as it says, and the folder of each file made since was
    synced after the file was made. A close with facts pending writes the
    summary once, with the run's state in it. Synced by one syncfs (every
    file and folder of the file system, as they are at that call) where the
    kernel holds little unwritten, else by an fsync each; only a new run's
    first summary, which counts nothing, is renamed in unsynced."""
    from somatize._base import files

    real_open, real_fsync, real_replace, real_mkdir = os.open, os.fsync, os.replace, os.mkdir
    folders = {}  # folder -> the call's number when it was made (the run's own, by Recorder())
    synced = {}  # path -> size at its last sync (files) or the call's number (folders)
    made = {}  # path -> the call's number when it was made
    renames = []
    calls = [0]
    kinds = []  # "syncfs" / "fsync", each call

    def traced_open(path, flags, *a, dir_fd=None, **k):
        full = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path) if dir_fd is not None else path
        new = bool(flags & os.O_CREAT) and not os.path.lexists(full)
        fd = real_open(path, flags, *a, dir_fd=dir_fd, **k)
        if new:
            calls[0] += 1
            made[os.path.realpath(full)] = calls[0]
        return fd

    def traced_mkdir(path, *a, dir_fd=None, **k):
        real_mkdir(path, *a, dir_fd=dir_fd, **k)
        calls[0] += 1
        where = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else "."
        folders[os.path.realpath(os.path.join(where, path))] = calls[0]

    inodes = {}  # (device, inode) -> size at its last sync: what a name points at, renamed or not

    def traced_fsync(fd):
        real_fsync(fd)
        calls[0] += 1
        kinds.append("fsync")
        path = os.readlink(f"/proc/self/fd/{fd}")
        st = os.fstat(fd)
        synced[path] = calls[0] if os.path.isdir(path) else st.st_size
        inodes[(st.st_dev, st.st_ino)] = st.st_size

    real_syncfs = files._find_syncfs()

    def traced_syncfs(fd):
        kinds.append("syncfs")
        got = real_syncfs(fd)
        if got != 0:  # a write-back error elsewhere on the file system: the files' own fsyncs follow
            return got
        calls[0] += 1
        root = os.path.realpath(store.path)
        synced[os.path.dirname(root)] = calls[0]
        for here, _dirs, names in os.walk(root):  # the whole file system, as it is now: the store's part of it
            synced[here] = calls[0]
            for name in names:
                st = os.lstat(os.path.join(here, name))
                synced[os.path.join(here, name)] = inodes[(st.st_dev, st.st_ino)] = st.st_size
        return 0

    def traced_replace(src, dst, *a, **k):
        if str(dst).endswith("summary.json"):
            summary = orjson.loads(Path(src).read_bytes())
            first = not summary["log_bytes"] and not summary["series"] and not os.path.lexists(dst)
            if not first:  # a new run's first summary counts nothing: written, not synced (Recorder._open)
                assert synced.get(os.path.realpath(src), -1) == len(Path(src).read_bytes()), "summary renamed unsynced"
                # the summary this one replaces survives whole if a power cut loses the rename
                old = os.stat(dst)
                assert inodes.get((old.st_dev, old.st_ino), -1) == old.st_size, "the summary replaced was never synced"
            folder = os.path.realpath(os.path.dirname(dst))
            counted = {LOG: summary["log_bytes"], INDEX: summary["index"][0]}
            counted.update({str(_log.series_file(Path(SERIES), n)): s for n, (s, _) in summary["series"].items()})
            for name, size in counted.items():
                path = os.path.join(folder, name)
                if size:
                    assert synced.get(path, -1) >= size, (name, size, synced.get(path))
                    if path in made:  # its name survives too: its folder synced after it was made
                        assert synced.get(os.path.dirname(path), 0) > made[path], name
            if summary["log_bytes"]:  # facts counted: the run's own folders' names survive too
                assert folders, "Recorder() made no folder?"
                for made_folder, when in folders.items():
                    assert synced.get(os.path.dirname(made_folder), 0) > when, made_folder
            renames.append(summary["state"])
        return real_replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "open", traced_open)
    monkeypatch.setattr(os, "fsync", traced_fsync)
    monkeypatch.setattr(os, "replace", traced_replace)
    monkeypatch.setattr(os, "mkdir", traced_mkdir)
    monkeypatch.setattr(files, "_syncfs", traced_syncfs if real_syncfs is not None else None)
    if how == "fsync":  # as with much unwritten on the machine
        monkeypatch.setattr(files, "SYNCFS_DIRTY_AT", -1)
    else:
        monkeypatch.setattr(files, "SYNCFS_DIRTY_AT", 1 << 62)
    rec = Recorder(store, run="r", summarising=["loss"])
    rec._born = time.monotonic() + 3600  # the real flusher thread leaves it alone: every commit is the test's
    for i in range(120):
        rec.forward_began()
        rec({"fact": "ran", "node": "a", "began_us": 0, "took_us": i})
        rec({"fact": "finished", "took_us": i})
        rec({"fact": "loss", "value": 1 / (i + 1)})
        rec({"fact": "grad_norm", "node": "a", "value": float(i)})
        if i == 60:
            rec.flush()
            rec({"fact": "lr", "value": 0.1})  # a series that appears in a later flush
    at_close = len(renames)
    rec.close()
    assert renames[0] == "running" and renames[at_close:] == ["finished"]  # one summary written by the close
    assert len(curve(store, run="r", name="loss")) == 120 and len(curve(store, run="r", name="lr")) == 1
    # Linux >= 5.17 on ext4 (this project's machines): the commits were synced by syncfs, unless told not to
    assert "syncfs" in kinds if how == "syncfs" and syncfs_here(store.path) else "syncfs" not in kinds, kinds


def test_a_new_runs_first_summary_left_empty_by_a_power_cut_lists_no_run(store):
    """Recorder() does not fsync a new run's first summary (it counts
    nothing): a power cut before the first commit may leave it empty. Such
    a folder holds no run yet: nothing lists it and a Recorder makes it anew,
    the files a cut-short first commit left beside it unlinked first (they
    were appended to, so the new run's series read as damaged); an empty
    summary beside facts is damage, and says so."""
    Recorder(store, run="new").close()
    (store.path / "runs" / "new" / "summary.json").write_bytes(b"")
    (store.path / "runs" / "new" / "series" / "loss.bin").write_bytes(b"\x07" * 40)  # a cut-short commit's
    (store.path / "runs" / "new" / "index.bin").write_bytes(b"\x09" * 24)
    os.link(store.path / "runs" / "new" / "index.bin", store.path / "snapshot-index.bin")  # a hard-link snapshot
    assert "new" not in list(runs(store).get("run", []))
    with pytest.raises(SomatizeKeyError, match="no run 'new'"):  # not found by name either
        curve(store, run="new", name="loss")
    with Recorder(store, run="new") as rec:
        rec.forward_began()
        rec({"fact": "loss", "value": 2.0})
    assert curve(store, run="new", name="loss").tolist() == [2.0]
    assert check_run(store.path / "runs" / "new")[0] == []
    assert (store.path / "snapshot-index.bin").read_bytes() == b"\x09" * 24  # unlinked, not emptied in place
    (store.path / "runs" / "new" / "summary.json").write_bytes(b"")
    damaged = runs(store).set_index("run").loc["new"]
    assert damaged["state"] == "damaged" and "summary.json" in damaged["problem"]


@pytest.mark.parametrize("how", ["syncfs", "fsync"])
def test_the_background_flush_syncs_on_its_own_thread_and_a_close_together(store, monkeypatch, how):
    """The flusher runs beside a training loop: it syncs on its own thread,
    by one syncfs where the kernel holds little unwritten, else by fsyncs one
    after the other, never handed to the fsync threads (they would take the
    GIL back from the loop, and nobody waits for a background flush). A
    close, which its caller waits for, makes one syncfs, or fsyncs its files
    together from those threads."""
    from somatize._base import files
    from somatize.record import _flusher

    real_fsync, real_syncfs, calls = os.fsync, files._find_syncfs(), []

    def traced_fsync(fd):
        calls.append(("fsync", threading.current_thread().name))
        real_fsync(fd)

    def traced_syncfs(fd):
        calls.append(("syncfs", threading.current_thread().name))
        return real_syncfs(fd)

    monkeypatch.setattr(os, "fsync", traced_fsync)
    monkeypatch.setattr(files, "_syncfs", traced_syncfs if real_syncfs is not None else None)
    monkeypatch.setattr(files, "SYNCFS_DIRTY_AT", 1 << 62 if how == "syncfs" else -1)
    syncfs = how == "syncfs" and syncfs_here(store.path)  # Linux >= 5.17 on ext4: this project's machines
    rec = Recorder(store, run="r", summarising=["loss"])
    rec._born = time.monotonic() + 3600  # the real flusher thread leaves it alone: every commit is the test's

    def facts_of_many_series(n):
        for i in range(n):
            rec.forward_began()
            rec({"fact": "loss", "value": 1 / (i + 1)})
            for node in "abcdef":  # a series each: more files than SYNC_TOGETHER_AT and SYNCFS_AT
                rec({"fact": "grad_norm", "node": node, "value": float(i)})

    facts_of_many_series(20)
    calls.clear()  # Recorder()'s own summary
    flusher = threading.Thread(target=_flusher.flush_all, kwargs={"now": float("inf")}, name="as-the-flusher")
    flusher.start()
    flusher.join()
    if syncfs:
        assert calls == [("syncfs", "as-the-flusher")], calls
    else:
        assert len(calls) >= files.SYNC_TOGETHER_AT and set(calls) == {("fsync", "as-the-flusher")}, calls
    calls.clear()
    facts_of_many_series(5)
    rec.close()
    if syncfs:
        assert calls == [("syncfs", threading.current_thread().name)], calls
    else:
        assert len(calls) >= files.SYNC_TOGETHER_AT and any(t.startswith("somatize-fsync") for _, t in calls), calls
    assert len(curve(store, run="r", name="loss")) == 25


def test_a_forked_child_closing_its_copy_of_a_recorder_leaves_the_parents_run_alone(tmp_path):
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as r:
        r.forward_began()
        r({"fact": "loss", "value": 1.0})
        r.flush()
        summary = store.path / "runs" / "r" / "summary.json"
        before = summary.read_bytes()
        pid = os.fork()
        if pid == 0:  # the child leaves the with block too (a fork() in user code): it must not write
            try:
                r.close()
            finally:
                os._exit(0)
        assert ended(pid) == 0
        assert summary.read_bytes() == before
        assert orjson.loads(summary.read_bytes())["state"] == "running"
    assert orjson.loads(summary.read_bytes())["state"] == "finished"


def test_a_child_forked_while_another_thread_holds_the_recorders_locks_does_not_hang(tmp_path):
    """fork() keeps a lock another thread holds (the flusher, four times a
    second) held forever in the child. A child forked right then (a
    DataLoader worker, a launched rank) closes its copy of the Recorder,
    reads it, and records a run of its own."""
    from somatize.record._runs import LIVE_LOCK
    from somatize.record._table import _LOCK as TABLE_LOCK

    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as r:
        r.forward_began()
        r({"fact": "loss", "value": 1.0})
        held, release = threading.Event(), threading.Event()

        def hold():
            with LIVE_LOCK, TABLE_LOCK, r._flush_lock:
                held.set()
                release.wait(60)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(60)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                assert r.forwards == 1
                r.close()
                with Recorder(store, run="child") as mine:
                    mine.forward_began()
                    mine({"fact": "loss", "value": 2.0})
                assert set(runs(store)["run"]) == {"child", "r"}
                code = 0
            finally:
                os._exit(code)
        release.set()
        holder.join()
        assert ended(pid) == 0
    assert curve(store, run="child", name="loss").tolist() == [2.0]
    assert orjson.loads((store.path / "runs" / "r" / "summary.json").read_bytes())["state"] == "finished"


def test_blocks_are_full_but_the_last_and_read_back_every_fact_in_order():
    """encode_blocks over forwards of every size (none, one, a block's
    worth, more than a block, ones that fill a block exactly): each block
    but the last holds BLOCK_FACTS facts, its header names the forwards it
    holds, the blocks lie end to end, and decoded they give back every fact
    in order, each with its forward, odd values (not finite, bools, big
    ints, nesting, non-dicts) as they were handed over."""
    import random

    rng = random.Random(7)
    odd = [float("nan"), float("inf"), -float("inf"), True, False, None, 2**63 - 1, -(2**63), [1, [2.5, "x"]],
           {"k": {"n": None}}, "", "é/\\\"", 0.1]
    sizes = [0, 1, _log.BLOCK_FACTS, _log.BLOCK_FACTS - 1, 1, _log.BLOCK_FACTS + 1, 0, 3 * _log.BLOCK_FACTS + 5]
    sizes += [rng.randrange(0, 40) for _ in range(300)] + [_log.BLOCK_FACTS - 7, 7, 2]
    groups, want = [], []
    for forward, size in enumerate(sizes):
        facts_ = []
        for i in range(size):
            kind = rng.randrange(6)
            fact = ({"fact": "loss", "value": rng.choice(odd)} if kind == 0 else
                    {"fact": "ran", "node": f"n{i}", "took_us": rng.randrange(10**6)} if kind == 1 else
                    "not a dict" if kind == 2 else [forward, i] if kind == 3 else
                    {"fact": "x", "i": i, "f": forward, "odd": rng.choice(odd)})
            facts_.append(fact)
            want.append((forward, fact))
        groups.append((forward, facts_))
    data, rows = _log.encode_blocks(groups)
    got, at, counts = [], 0, []
    for first, last, offset, length in rows:
        assert offset == at  # end to end
        f, l_, count, size, payload = _log.read_block(data, offset)
        assert (f, l_, size) == (first, last, length)
        decoded = _log.decode(payload)
        assert decoded[0][0] == first and decoded[-1][0] == last and all(g[1] for g in decoded)  # no empty group
        counts.append(count)
        assert count == sum(len(g[1]) for g in decoded)
        got += [(g[0], fact) for g in decoded for fact in g[1]]
        at += length
    assert at == len(data)
    assert counts[:-1] == [_log.BLOCK_FACTS] * (len(counts) - 1) and 0 < counts[-1] <= _log.BLOCK_FACTS
    assert sum(counts) == len(want)
    assert len(got) == len(want)
    for (fw, fact), (want_fw, want_fact) in zip(got, want):
        assert fw == want_fw and repr(fact) == repr(want_fact), (fw, fact, want_fact)


def test_a_syncfs_that_fails_leaves_each_file_to_its_own_fsync(tmp_path, monkeypatch):
    """syncfs reports a write-back error from anywhere on the file system
    (another program's file): then each file is fsynced, and its own fsync
    says whether it is the one that failed."""
    from somatize._base import files

    fsynced = []
    real_fsync = os.fsync
    tried = []
    monkeypatch.setattr(files, "_syncfs", lambda fd: tried.append(fd) or -1)
    monkeypatch.setattr(files, "_covered", lambda dev, fd: True)  # whatever file system the test runs on
    monkeypatch.setattr(files, "SYNCFS_DIRTY_AT", 1 << 62)
    monkeypatch.setattr(os, "fsync", lambda fd: (fsynced.append(fd), real_fsync(fd)))
    fds = [os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT) for i in range(files.SYNCFS_AT + 1)]
    try:
        files.sync_all(fds)
        assert len(tried) == 1 and sorted(fsynced) == sorted(fds)
    finally:
        for fd in fds:
            os.close(fd)


def syncfs_here(path) -> bool:
    """Whether a commit in ``path`` is synced by syncfs when little is unwritten:
    Linux >= 5.17 and a local file system (ext4, xfs, btrfs)."""
    from somatize._base import files

    fd = os.open(path, os.O_RDONLY)
    try:
        return files._find_syncfs() is not None and files._covered(os.fstat(fd).st_dev, fd)
    finally:
        os.close(fd)


def test_files_on_a_file_system_syncfs_may_not_make_durable_are_each_fsynced(monkeypatch):
    """syncfs is trusted on ext4, xfs and btrfs only: elsewhere (a FUSE mount,
    CIFS, NFS) it may answer without the server having kept anything. A
    tmpfs (/dev/shm) is not one of them: each file there is fsynced, however
    little the kernel holds unwritten."""
    import tempfile

    from somatize._base import files

    assert os.path.isdir("/dev/shm"), "a Linux machine has /dev/shm"
    tried, fsynced, real_fsync = [], [], os.fsync
    monkeypatch.setattr(files, "_syncfs", lambda fd: tried.append(fd) or 0)
    monkeypatch.setattr(files, "SYNCFS_DIRTY_AT", 1 << 62)
    monkeypatch.setattr(os, "fsync", lambda fd: (fsynced.append(fd), real_fsync(fd)))
    with tempfile.TemporaryDirectory(dir="/dev/shm") as here:
        fds = [os.open(os.path.join(here, f"f{i}"), os.O_WRONLY | os.O_CREAT) for i in range(files.SYNCFS_AT + 1)]
        try:
            files.sync_all(fds)
        finally:
            for fd in fds:
                os.close(fd)
    assert tried == [] and sorted(fsynced) == sorted(fds)


def test_a_link_or_a_fifo_left_in_a_new_runs_folder_is_refused_and_nothing_outside_is_touched(store, tmp_path):
    """The leftovers a new run unlinks are regular files only: a link there
    out of the store is left, and neither followed nor written through; a
    FIFO is refused without waiting on it; the error names the file."""
    Recorder(store, run="new").close()
    run = store.path / "runs" / "new"
    (run / "summary.json").write_bytes(b"")
    for p in (run / "index.bin", run / "series" / "loss.bin"):
        p.unlink(missing_ok=True)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"keep me")
    os.symlink(outside, run / "index.bin")
    os.mkfifo(run / "series" / "loss.bin")
    with pytest.raises(DamagedError, match=r"series/loss\.bin is not a regular file .*move it away"):
        with Recorder(store, run="new") as rec:
            rec.forward_began()
            rec({"fact": "loss", "value": 1.0})
    assert outside.read_bytes() == b"keep me" and os.path.islink(run / "index.bin")
