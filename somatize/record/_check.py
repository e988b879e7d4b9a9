"""Checking a run's record: every block a completed flush wrote must read back.

The rule kept here: damage is what a completed flush wrote and no longer
reads (a checksum that fails, a file shorter than its summary says, an index
entry that points at no block). The torn remains of a flush that a kill
interrupted lie past what ``summary.json`` counts; they are reported as a
note, not as damage, because no reader ever trusts them.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import _log
from ._runs import INDEX, LOG, SERIES, SUMMARY, read_summary, run_names


def check_run(folder: Path) -> tuple[list[str], list[str]]:
    """(problems, notes) for one run folder."""
    run = folder.name
    problems: list[str] = []
    notes: list[str] = []
    summary = read_summary(folder)
    log = folder / LOG
    if summary is None:
        if (folder / SUMMARY).exists():
            problems.append(f"run {run!r}: {SUMMARY} does not parse; the run's facts still read with facts(store, run), but it no longer lists its summary")
        elif log.exists() and log.stat().st_size:
            problems.append(f"run {run!r}: facts but no {SUMMARY}; its facts still read with facts(store, run)")
        return problems, notes
    committed = summary.get("log_bytes", 0)
    try:
        raw = log.read_bytes()
    except FileNotFoundError:
        raw = b""
    blocks = []
    facts = 0
    damaged_from = len(raw)
    try:
        for first, last, count, offset, length in _log.scan(raw, 0):
            blocks.append((first, last, offset, length))
            if offset + length <= committed:
                facts += count
    except _log.Torn as torn:
        if torn.offset < committed:
            damaged_from = torn.offset
            bad = [torn.offset] + _damaged_after(raw, folder / INDEX, torn.offset, committed)
            where = ", ".join(f"byte {b}" for b in bad[:10]) + (" …" if len(bad) > 10 else "")
            problems.append(
                f"run {run!r}: {LOG} damaged: {len(bad)} block(s) no longer read ({where}; the "
                f"first: {torn.why}); a completed flush wrote {committed} bytes, the file holds "
                f"{len(raw)}. Every other block still reads with facts(store, run, forward=N): "
                f"keep what you need and record on into a new run"
            )
        else:
            notes.append(
                f"run {run!r}: {LOG} has the torn tail of an interrupted flush at byte "
                f"{torn.offset} ({len(raw) - torn.offset} bytes, never read; "
                f"Recorder(..., resume=True) cuts it)"
            )
    if not problems and facts != summary.get("facts", 0):
        problems.append(f"run {run!r}: {SUMMARY} counts {summary.get('facts')} facts, {LOG} holds {facts}")
    known = {b[2]: b for b in blocks}
    for entry in _log.read_index(folder / INDEX):
        first, last, offset, length = (int(x) for x in entry)
        if offset >= damaged_from or (offset + length > committed and offset not in known):
            continue  # past damage already reported, or an entry of the interrupted flush
        if known.get(offset) != (first, last, offset, length):
            problems.append(f"run {run!r}: {INDEX} names a block at byte {offset} that {LOG} does not hold; delete {INDEX}: facts are found without it")
            break
    for name, size in summary.get("series", {}).items():
        path = _log.series_file(folder / SERIES, name)
        have = path.stat().st_size if path.exists() else 0
        if have < size:
            problems.append(f"run {run!r}: series {name!r} cut at byte {have}; a completed flush wrote {size}")
    return problems, notes


def _damaged_after(raw, index_path, after, committed):
    """Offsets of the indexed blocks past ``after`` (within what completed
    flushes wrote) that do not read: the scan stops at the first damage, the
    index lets the check look at every block beyond it."""
    bad = []
    for entry in _log.read_index(index_path):
        offset, length = int(entry["offset"]), int(entry["length"])
        if offset <= after or offset + length > committed:
            continue
        try:
            _log.read_block(raw, offset, True)
        except _log.Torn:
            bad.append(offset)
    return bad


def check_runs(root: Path) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    notes: list[str] = []
    for name in run_names(root):
        folder = root / "runs" / name
        if not os.path.isdir(folder):
            continue
        p, n = check_run(folder)
        problems += p
        notes += n
    return problems, notes
