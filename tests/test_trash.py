"""A run deleted by the run browser is renamed into the store's tmp/ and
removed there; a delete stopped between the two (a killed server, a file
that would not go) leaves its folder in tmp/. `somatize check` says so, and
the next opening of the store to write removes it."""

import os

from somatize import Recorder, Store
from somatize._base import files
from somatize.cli import check_report
from somatize.record import runs


def record(store, run):
    with Recorder(store, run=run, summarising=["loss"]) as r:
        for i in range(20):
            r.forward_began()
            r({"fact": "loss", "value": 1.0 / (i + 1)})


def left_by_a_stopped_delete(path, run):
    """What a delete killed after its rename leaves: the run's folder in tmp/."""
    gone = files.trash_name(run)
    os.rename(path / "runs" / run, path / "tmp" / gone)
    return path / "tmp" / gone


def test_check_notes_a_deleted_run_left_in_tmp_and_the_next_open_removes_it(tmp_path):
    path = tmp_path / "store"
    record(Store(path), "kept")
    record(Store(path), "deleted")
    left = left_by_a_stopped_delete(path, "deleted")
    temp = path / "tmp" / "a-write-in-progress"
    temp.write_bytes(b"x")  # a fresh temp file: another process's write, not left over

    report, clean = check_report(path)
    assert clean, report  # not damage: nothing reads it
    assert f"note: {left}: a deleted run not yet removed" in report

    Store(path, readonly=True)  # reading writes nothing, removes nothing
    assert left.is_dir()

    Store(path)  # a new opening to write (not the one somatize.record's as_store keeps)
    assert not left.exists() and temp.exists()
    assert list(runs(path)["run"]) == ["kept"]
    report, clean = check_report(path)
    assert clean and "deleted run" not in report, report


def test_a_link_named_like_a_deleted_run_is_never_followed(tmp_path):
    path = tmp_path / "store"
    record(Store(path), "r")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep-me").write_bytes(b"mine")
    os.symlink(outside, path / "tmp" / files.trash_name("r"))
    Store(path)
    assert (outside / "keep-me").read_bytes() == b"mine"
