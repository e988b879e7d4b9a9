"""Checking a run's record: every file a completed flush wrote must read back.

The rule kept here: damage is what a completed flush wrote and no longer
reads: a block whose checksum fails, a log, index or series shorter than the
summary says or whose xxh3 does not match it, an index that does not tile the
log, a summary whose counts are not the log's, a summary that does not parse
or has a field of the wrong type, a file that is a symlink or a FIFO. The
torn remains of a flush that a kill interrupted lie past what
``summary.json`` counts; they are a note, not damage: no reader trusts them.
So is a deleted run's folder that a delete left in ``tmp/``.
The check reports; it never raises and never writes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._base import files
from .._base.errors import DamagedError
from .._store.names import run_names
from . import _files, _log
from ._runs import (
    INDEX,
    LOCK,
    LOG,
    SERIES,
    SUMMARY,
    folder_problem,
    load_summary,
    runs_dir,
)
from ._summary import Broken

_RESUME = "Recorder(store, run={run!r}, resume=True) rebuilds it from the log"


def check_run(folder: Path) -> tuple[list[str], list[str]]:
    """(problems, notes) for one run folder."""
    run = folder.name
    problem = folder_problem(folder)
    if problem is not None:
        return [f"run {run!r}: {problem}; move it away"], []
    problems: list[str] = []
    notes: list[str] = []
    fs, parts = _files.located(folder)
    try:  # the run's folder is opened without following a link, like every file in it
        kinds = dict(fs.list(parts))
    except FileNotFoundError:
        kinds = {}
    except files.Refused as e:  # made a link since the lstat above
        return [f"run {run!r}: {_files.not_a_file(folder, e)}; move it away"], []
    for name in (SUMMARY, LOG, INDEX, LOCK, SERIES):
        if name not in kinds:
            continue
        want_dir = name == SERIES
        if kinds[name] != ("dir" if want_dir else "file"):
            kind = "folder" if want_dir else "file"
            problems.append(f"run {run!r}: {folder / name} is not a regular {kind} (a symlink, a FIFO…); "
                            "nothing reads it: move it away")
    if problems:
        return problems, notes
    try:
        summary = load_summary(folder)
    except Broken as e:
        return [f"run {run!r}: {folder / SUMMARY} {e}; the run no longer lists its summary and cannot be continued; "
                "its facts still read with facts(store, run)"], notes
    log = folder / LOG
    if summary is None:
        if _files.file_size(log):
            problems.append(f"run {run!r}: facts but no {SUMMARY}; its facts still read with facts(store, run)")
        return problems, notes
    committed = summary["log_bytes"]
    raw = _files.read_bytes(log, _files.file_size(log)) or b""
    tail = _log.Tail(raw, 0)
    blocks = [b for b in tail.blocks if b[3] + b[4] <= committed]
    if tail.torn is not None and tail.torn < committed:
        bad = [tail.torn] + _damaged_after(raw, folder / INDEX, tail.torn, committed)
        where = ", ".join(f"byte {b}" for b in bad[:10]) + (" …" if len(bad) > 10 else "")
        problems.append(
            f"run {run!r}: {LOG} damaged: {len(bad)} block(s) no longer read ({where}; the "
            f"first: {tail.why}); a completed flush wrote {committed} bytes, the file holds "
            f"{len(raw)}. Every other block still reads with facts(store, run, forward=N): "
            f"keep what you need and record on into a new run"
        )
    else:
        if tail.torn is not None:
            notes.append(
                f"run {run!r}: {LOG} has the torn tail of an interrupted flush at byte "
                f"{tail.torn} ({len(raw) - tail.torn} bytes, never read; "
                f"Recorder(..., resume=True) cuts it)"
            )
        ends = {0} | {b[3] + b[4] for b in tail.blocks}
        if committed not in ends:
            problems.append(f"run {run!r}: {SUMMARY} says a completed flush ended at byte {committed} of {LOG}, "
                            "where no block ends")
        facts = sum(b[2] for b in blocks)
        if facts != summary["facts"]:
            problems.append(f"run {run!r}: {SUMMARY} counts {summary['facts']} facts, {LOG} holds {facts}")
        forwards = max((b[1] + 1 for b in blocks), default=0)
        if forwards != summary["forwards"]:
            problems.append(f"run {run!r}: {SUMMARY} counts {summary['forwards']} forwards, {LOG} holds {forwards}")
        problems += _check_index(run, folder, summary, blocks)
    for name, (size, want) in summary["series"].items():
        path = _log.series_file(folder / SERIES, name)
        data = _files.read_bytes(path, size) or b""
        if len(data) < size:
            problems.append(f"run {run!r}: series {name!r} cut at byte {len(data)}; a completed flush wrote {size}; "
                            + _RESUME.format(run=run))
        elif want is not None and _log.checksum(data) != want:
            problems.append(f"run {run!r}: series {name!r} ({path}) does not match its checksum in {SUMMARY}; "
                            + _RESUME.format(run=run))
        elif not in_order(_log.points_of(data)["forward"], summary["forwards"]):
            problems.append(f"run {run!r}: series {name!r} ({path}) holds forwards out of order "
                            f"or past the run's {summary['forwards']}; " + _RESUME.format(run=run))
    return problems, notes


def in_order(forwards, count) -> bool:
    """Series points come in forward order, each within the run."""
    return not len(forwards) or (forwards[0] >= 0 and forwards[-1] < count
                                 and bool(np.all(forwards[1:] >= forwards[:-1])))


def _check_index(run, folder, summary, blocks):
    size, want = summary["index"]
    path = folder / INDEX
    if size is None:
        size = _files.file_size(path) // _log.INDEX.itemsize * _log.INDEX.itemsize
    data = _files.read_bytes(path, size) or b""
    if len(data) < size:
        return [f"run {run!r}: {INDEX} holds {len(data)} bytes, a completed flush wrote {size}; "
                + _RESUME.format(run=run)]
    if want is not None and _log.checksum(data) != want:
        return [f"run {run!r}: {INDEX} does not match its checksum in {SUMMARY}; " + _RESUME.format(run=run)]
    index = np.frombuffer(data, _log.INDEX, len(data) // _log.INDEX.itemsize)
    if summary["index"][0] is None:
        index = index[: len(blocks)]
    got = [tuple(int(x) for x in e) for e in index]
    if got != [(b[0], b[1], b[3], b[4]) for b in blocks]:
        return [f"run {run!r}: {INDEX} does not name the blocks {LOG} holds; " + _RESUME.format(run=run)]
    return []


def _damaged_after(raw, index_path, after, committed):
    """Offsets of the indexed blocks past ``after`` (within what completed
    flushes wrote) that do not read: the scan stops at the first damage, the
    index lets the check look at every block beyond it."""
    bad = []
    try:
        data = _files.read_bytes(index_path, 1 << 30) or b""
    except _files.NotAFile:
        return bad
    for entry in np.frombuffer(data, _log.INDEX, len(data) // _log.INDEX.itemsize):
        offset, length = int(entry["offset"]), int(entry["length"])
        if offset <= after or offset + length > committed or length < 0:
            continue
        try:
            _log.read_block(raw, offset, True)
        except _log.Torn:
            bad.append(offset)
    return bad


def check_runs(root: Path) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    notes = [f"{Path(root) / 'tmp' / name}: a deleted run not yet removed (its delete stopped partway); "
             "nothing reads it, and opening the store to write (Store(path)) removes it"
             for name in files.trash(root)]
    try:
        runs_dir(root)  # a runs/ that is a link or a file: one line, and nothing read through it
        names = run_names(root, links_too=True)
    except DamagedError as e:
        return [str(e)], notes
    for name in names:
        folder = root / "runs" / name
        try:
            p, n = check_run(folder)
        except (OSError, _files.NotAFile, files.Refused, ValueError) as e:  # a file changed under the check, say
            p = [f"run {name!r}: could not be checked ({e}); run the check again, "
                 f"and if it says the same, move {folder} away"]
            n = []
        problems += p
        notes += n
    return problems, notes
