"""Continuing a run (``Recorder(..., resume=True)``): cut it back to its last
completed flush, rebuild what does not verify, and hand back what to write again.

The rule kept here: the log is the truth. Bytes past what the summary counts
are a flush a kill interrupted: its whole blocks are written again, its torn
remains cut. The index and the series are verified against the checksums the
summary holds; when one does not match (or the summary is of format 1 and
holds none) both are rebuilt from the log, which proves itself block by block.
A rebuilt series lacks the points the log can only hold as null (a NaN, an
infinity) or as text (an int past 64 bits). Every byte is read and written
through the store's backend (``fs``; ``parts``: the run's folder in it).
"""

from __future__ import annotations

import xxhash

from .._base.errors import DamagedError
from .._base.files import Refused
from . import _log
from ._runs import INDEX, LOG, SERIES
from ._summary import summarise


def recover(fs, parts, summary: dict, run: str):
    """Returns (replay, hashers): the groups of the whole blocks past the last
    completed flush, and a running xxh3 of the index and of each series over
    what the summary counts. ``summary`` is updated when files are rebuilt."""
    committed = summary["log_bytes"]
    log = (*parts, LOG)
    held = _size(fs, log)
    if held < committed:
        raise DamagedError(
            f"run {run!r} is damaged: {fs.where(log)} holds {held} bytes, its summary "
            f"counts {committed}; run `somatize check` on the store and record into a new run"
        )
    tail = _log.Tail(_read(fs, log, 1 << 31, committed), committed)
    replay = tail.groups()
    truncate(fs, log, committed)
    hashers = _verified(fs, parts, summary)
    if hashers is None:
        hashers = rebuild(fs, parts, summary, run)
    return replay, hashers


def _read(fs, parts, limit, start=0) -> bytes:
    """``fs.read_range``; none there: no bytes."""
    try:
        return fs.read_range(parts, limit, start)
    except FileNotFoundError:
        return b""


def _size(fs, parts) -> int:
    try:
        return fs.size(parts) or 0
    except Refused as e:
        raise DamagedError(f"{e.where} is not a regular file ({e}); move it away and resume again") from None


def _verified(fs, parts, summary):
    """Running checksums of the index and the series, each cut back to what
    the summary counts; None when one of them does not match."""
    hashers = {}
    index_size, index_sum = summary["index"]
    if index_sum is None:
        return None
    for file, size, want, key in [((*parts, INDEX), index_size, index_sum, INDEX)] + [
        ((*parts, SERIES, _log.series_file_name(n)), s, w, n) for n, (s, w) in summary["series"].items()
    ]:
        try:
            data = fs.read_range(file, size)
        except FileNotFoundError:
            data = b""
        except Refused:
            return None
        if len(data) != size or want is None or _log.checksum(data) != want:
            return None
        hashers[key] = xxhash.xxh3_64(data)
    truncate(fs, (*parts, INDEX), summary["index"][0])
    for name in _series(fs, parts):
        truncate(fs, (*parts, SERIES, _log.series_file_name(name)), summary["series"].get(name, (0, 0))[0])
    return hashers


def _series(fs, parts) -> list[str]:
    """The series the run's ``series/`` holds (none where it is no folder)."""
    try:
        return _log.names_in(fs.list((*parts, SERIES)))
    except (OSError, Refused):
        return []


def rebuild(fs, parts, summary: dict, run: str):
    """Write the index and every series again from the committed log."""
    tail = _whole_log(fs, parts, summary, run)
    scratch = {"nodes": {}, "summarising": {}}
    points: dict = {}
    summarise(tail.groups(), scratch, points)
    return _write_derived(fs, parts, summary, points, tail.entries().tobytes())


def cut(fs, parts, summary: dict, run: str, forwards: int):
    """Cut the committed record back to its first ``forwards`` forwards (a
    training resumed from what it kept there does them again). Writes the
    index and the series of what stays and updates ``summary`` (counts,
    nodes, summarised facts, ``log_bytes``: where the log is to be cut) for
    the caller to write, then to truncate the log. Returns (head, hashers):
    ``head``, the groups of forwards before the cut from the block it falls
    in, to be written again after the cut, and the running checksums.

    Each step leaves a record a resume reads: the series and the index are
    replaced first (an old summary no longer verifies them: a resume rebuilds
    them from the log), the summary next (the log's bytes past it are a flush
    a kill interrupted: a resume writes them again, and the training's
    resume cuts again)."""
    tail = _whole_log(fs, parts, summary, run)
    kept, head, cut_at = [], [], summary["log_bytes"]
    for block in tail.blocks:
        if block[1] < forwards:  # its last forward
            kept.append(block)
            continue
        cut_at = block[3]
        head = [tuple(g) for g in _log.decode(block[5]) if g[0] < forwards]
        break
    groups = [tuple(g) for block in kept for g in _log.decode(block[5])]
    fresh = {"count": 0, "first": None, "last": None, "min": None, "max": None}
    scratch = {"nodes": {}, "summarising": {name: dict(fresh) for name in summary["summarising"]}}
    points: dict = {}
    count = summarise(groups, scratch, points)
    tail.blocks = kept
    hashers = _write_derived(fs, parts, summary, points, tail.entries().tobytes())
    summary.update(log_bytes=cut_at, facts=count, forwards=groups[-1][0] + 1 if groups else 0,
                   nodes=scratch["nodes"], summarising=scratch["summarising"])
    return head, hashers


def _whole_log(fs, parts, summary, run):
    committed = summary["log_bytes"]
    log = (*parts, LOG)
    tail = _log.Tail(_read(fs, log, committed), 0)
    if tail.torn is not None or tail.end != committed:
        raise DamagedError(
            f"run {run!r}: {fs.where(log)} does not read back to byte {committed}, where its last "
            f"completed flush ended ({tail.why if tail.torn is not None else 'short'}); run "
            f"`somatize check` on the store and record into a new run"
        )
    return tail


def _write_derived(fs, parts, summary, points, index):
    """Replace every series and the index; their sizes and checksums go into
    ``summary``; returns their running checksums."""
    series = (*parts, SERIES)
    for name in _series(fs, parts):
        if name not in points:
            truncate(fs, (*series, _log.series_file_name(name)), 0)
    hashers = {}
    summary["series"] = {}
    for name, (forwards, values) in points.items():
        data = _log.points_bytes(forwards, values)
        _write(fs, (*series, _log.series_file_name(name)), data)
        summary["series"][name] = [len(data), _log.checksum(data)]
        hashers[name] = xxhash.xxh3_64(data)
    _write(fs, (*parts, INDEX), index)
    summary["index"] = [len(index), _log.checksum(index)]
    hashers[INDEX] = xxhash.xxh3_64(index)
    fs.sync(folders=[series, parts])
    return hashers


def _write(fs, parts, data):
    """Replace the file ``parts`` with ``data``, synced (a link there is
    replaced, never written through)."""
    staged = fs.stage(parts)
    try:
        fs.append(staged, [data])
        fs.sync([staged])
    finally:
        fs.close(staged)
    fs.place(staged)


def truncate(fs, parts, size):
    """Cut the file ``parts`` back to ``size`` bytes where it is longer, durably."""
    try:
        handle, _ = fs.open_append(parts, make=False)
    except FileNotFoundError:
        return
    except Refused as e:
        raise DamagedError(f"{fs.where(parts)} is not a regular file ({e}); move it away and resume again") from None
    except OSError as e:
        raise DamagedError(f"{fs.where(parts)} is not a regular file ({e.strerror}); "
                           "move it away and resume again") from None
    try:
        if fs.truncate(handle, size):
            fs.sync([handle])
    finally:
        fs.close(handle)
