"""Continuing a run (``Recorder(..., resume=True)``): cut it back to its last
completed flush, rebuild what does not verify, and hand back what to write again.

The rule kept here: the log is the truth. Bytes past what the summary counts
are a flush a kill interrupted: its whole blocks are written again, its torn
remains cut. The index and the series are verified against the checksums the
summary holds; when one does not match (or the summary is of format 1 and
holds none) both are rebuilt from the log, which proves itself block by block.
A rebuilt series lacks the points the log can only hold as null (a NaN, an
infinity) or as text (an int past 64 bits).
"""

from __future__ import annotations

import os
import stat

import xxhash

from .._base.errors import DamagedError
from .._base.files import replace, sync_dir, write_temp
from . import _files, _log
from ._runs import INDEX, LOG, SERIES
from ._summary import summarise

_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def recover(folder, summary: dict, run: str):
    """Returns (replay, hashers): the groups of the whole blocks past the last
    completed flush, and a running xxh3 of the index and of each series over
    what the summary counts. ``summary`` is updated when files are rebuilt."""
    committed = summary["log_bytes"]
    log = folder / LOG
    if _files.file_size(log) < committed:
        raise DamagedError(
            f"run {run!r} is damaged: {log} holds {_files.file_size(log)} bytes, its summary "
            f"counts {committed}; run `somatize check` on the store and record into a new run"
        )
    tail = _log.read_tail(log, committed)
    replay = tail.groups()
    truncate(log, committed)
    hashers = _verified(folder, summary)
    if hashers is None:
        hashers = rebuild(folder, summary, run)
    return replay, hashers


def _verified(folder, summary):
    """Running checksums of the index and the series, each cut back to what
    the summary counts; None when one of them does not match."""
    hashers = {}
    index_size, index_sum = summary["index"]
    if index_sum is None:
        return None
    for path, size, want, key in [(folder / INDEX, index_size, index_sum, INDEX)] + [
        (_log.series_file(folder / SERIES, n), s, w, n) for n, (s, w) in summary["series"].items()
    ]:
        try:
            data = _files.read_bytes(path, size) or b""
        except _files.NotAFile:
            return None
        if len(data) != size or want is None or _log.checksum(data) != want:
            return None
        hashers[key] = xxhash.xxh3_64(data)
    truncate(folder / INDEX, summary["index"][0])
    for name in _log.series_names(folder / SERIES):
        truncate(_log.series_file(folder / SERIES, name), summary["series"].get(name, (0, 0))[0])
    return hashers


def rebuild(folder, summary: dict, run: str):
    """Write the index and every series again from the committed log."""
    tail = _whole_log(folder, summary, run)
    scratch = {"nodes": {}, "summarising": {}}
    points: dict = {}
    summarise(tail.groups(), scratch, points)
    return _write_derived(folder, summary, points, tail.entries().tobytes())


def cut(folder, summary: dict, run: str, forwards: int):
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
    tail = _whole_log(folder, summary, run)
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
    hashers = _write_derived(folder, summary, points, tail.entries().tobytes())
    summary.update(log_bytes=cut_at, facts=count, forwards=groups[-1][0] + 1 if groups else 0,
                   nodes=scratch["nodes"], summarising=scratch["summarising"])
    return head, hashers


def _whole_log(folder, summary, run):
    committed = summary["log_bytes"]
    tail = _log.read_tail(folder / LOG, 0, committed)
    if tail.torn is not None or tail.end != committed:
        raise DamagedError(
            f"run {run!r}: {folder / LOG} does not read back to byte {committed}, where its last "
            f"completed flush ended ({tail.why if tail.torn is not None else 'short'}); run "
            f"`somatize check` on the store and record into a new run"
        )
    return tail


def _write_derived(folder, summary, points, index):
    """Replace every series and the index; their sizes and checksums go into
    ``summary``; returns their running checksums."""
    series_dir = folder / SERIES
    for name in _log.series_names(series_dir):
        if name not in points:
            truncate(_log.series_file(series_dir, name), 0)
    hashers = {}
    summary["series"] = {}
    for name, (forwards, values) in points.items():
        data = _log.points_bytes(forwards, values)
        _write(series_dir, _log.series_file(series_dir, name), data)
        summary["series"][name] = [len(data), _log.checksum(data)]
        hashers[name] = xxhash.xxh3_64(data)
    _write(folder, folder / INDEX, index)
    summary["index"] = [len(index), _log.checksum(index)]
    hashers[INDEX] = xxhash.xxh3_64(index)
    sync_dir(series_dir)
    sync_dir(folder)
    return hashers


def _write(folder, path, data):
    if os.path.islink(path):
        os.unlink(path)  # never write through a symlink
    replace(write_temp(folder, [data]), path)


def truncate(path, size):
    try:
        fd = os.open(path, os.O_WRONLY | _OPEN)
    except FileNotFoundError:
        return
    except OSError as e:
        raise DamagedError(f"{path} is not a regular file ({e.strerror}); move it away and resume again") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DamagedError(f"{path} is not a regular file; move it away and resume again")
        if os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)
            os.fsync(fd)
    finally:
        os.close(fd)
