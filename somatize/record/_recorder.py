"""The Recorder: a watcher that writes the stream of facts into a run, durably.

The rule kept here: the hot path is one list append. Handing a fact over costs
``list.append``; numbering forwards, encoding, summarising and writing all
happen on a flush, which a background thread runs every ``FLUSH_EVERY``
seconds (and ``flush()``, ``close()``, a query in this process, and exit).

A flush appends whole blocks to ``facts.log`` in one ``write()`` and fsyncs,
then the series, the index, and last rewrites ``summary.json`` atomically
(temp file, fsync, rename). When ``flush()`` returns, its facts survive a
kill -9 and a power cut. A kill -9 loses at most the facts handed over since
the last completed flush: about ``FLUSH_EVERY`` seconds of facts (0.25 s) plus
the time the flush itself takes.

Why 0.25 s and not less: the flush thread's system calls each take the GIL
back from a training loop that lets go of it inside torch; flushing every
0.1 s made the Recorder cost a Trainer step ~5%, every 0.25 s ~2%
(bench/RESULTS.md, Trainer). Another process still sees facts well within
a second.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
import time
from pathlib import Path

import numpy as np
import orjson

from .._base.errors import DamagedError, SomatizeTypeError, SomatizeValueError
from .._store.files import append_durably, make_dirs, sync_dir
from . import _log
from ._runs import (
    INDEX,
    LIVE,
    LIVE_LOCK,
    LOCK,
    LOG,
    SERIES,
    SUMMARY,
    checked_name,
    read_summary,
    run_folder,
    run_names,
    store_root,
    try_lock,
)

FLUSH_EVERY = 0.25  # seconds; another process sees facts within about this
TOOK = "finished/took_us"  # the series of whole-forward times
_NUMBERS = (int, float, np.integer, np.floating)
CHUNK = 8192  # pending items a flush takes at a time
_NODE_KINDS = frozenset(("ran", "recalled", "kept"))


class Recorder:
    """``Recorder(store, run="a-run", summarising=["loss"], resume=False)``.

    A watcher: hand it to ``watching=``. Forwards count from 0; facts that
    arrive after a forward's ``finished`` and before the next forward begins
    (the Trainer's ``loss``, ``updated``) belong to that forward; facts
    before the first ``forward_began()`` belong to forward 0.

    ``resume=True`` continues a finished or interrupted run, numbering on from
    its last forward; a run another Recorder of this process is recording (a
    notebook cell run again) is taken over: that Recorder is closed first. ``flush()`` returns once every fact handed over is on
    disk; ``close()`` (also at exit, and leaving a ``with`` block) marks the
    run finished; a ``with`` block left by an exception marks it interrupted.
    A process killed outright (kill -9) loses at most the facts not yet
    flushed, 0.25 to 0.5 s of them; the run then lists as interrupted.
    """

    def __init__(self, store, run="a-run", summarising=("loss",), resume=False):
        if isinstance(summarising, str):
            summarising = [summarising]
        try:
            summarising = list(summarising)
        except TypeError:
            summarising = [summarising]
        for name in summarising:
            if not isinstance(name, str) or not name:
                raise SomatizeTypeError(
                    f"summarising= takes the names of facts to summarise, like "
                    f"summarising=['loss']; got {name!r:.60} in it"
                )
        checked_name(run)
        root = store_root(store, create=True)
        folder = run_folder(root, run)
        for changed in make_dirs(folder / SERIES, root):  # durable from its first fact
            sync_dir(changed)
        self.run = run
        self.root = root  # the store's folder
        self.folder = folder
        self._real = os.path.realpath(folder)
        self._pid = os.getpid()
        self._pending: list = []
        self._flush_lock = threading.Lock()
        self._error: BaseException | None = None
        self._closed = False
        self._fds: dict = {}
        if resume:  # a notebook cell run again: take the run over from the old Recorder
            with LIVE_LOCK:
                old = LIVE.get(self._real)
            if old is not None:
                old.close()
        with LIVE_LOCK:
            if self._real in LIVE:
                raise SomatizeValueError(
                    f"run {run!r} is already being recorded by another Recorder in this "
                    f"process ({LIVE[self._real]!r}). Close it first (recorder.close()), take "
                    f"the run over and continue it: Recorder(store, run={run!r}, resume=True), "
                    f"or record into another run, e.g. Recorder(store, run={_free_name(root, run)!r})"
                )
            self._lock_fd = _lock_or_refuse(root, folder, run)
            try:
                self._open(root, run, list(summarising), resume)
            except BaseException:
                self._release()
                raise
            LIVE[self._real] = self
        _start_flusher()

    # -- the hot path -----------------------------------------------------

    def __call__(self, fact):
        self._pending.append(fact)

    def forward_began(self):
        if self._error is not None or self._closed:
            self._raise_if_unusable()
        self._pending.append(None)  # a marker: the flush numbers forwards

    # -- flushing ---------------------------------------------------------

    def flush(self) -> None:
        """Write every fact handed over so far, durably, and return."""
        with self._flush_lock:
            self._raise_if_unusable(closed_ok=True)
            if os.getpid() != self._pid or self._closed:
                return  # a forked child must not write its parent's run
            pending = self._pending
            n = len(pending)
            if not n:
                return
            batch = _Batch()
            # In chunks: one huge young list would be walked by every
            # collection of the cyclic GC while the flush allocates.
            for start in range(0, n, CHUNK):
                self._absorb(self._grouped(pending[start : min(start + CHUNK, n)]), batch)
            if batch.count:
                try:
                    self._commit(batch)
                except BaseException as e:
                    self._error = e
                    raise
            # Only this (locked) flush deletes; appends land after index n.
            del pending[:n]

    def close(self, state: str = "finished") -> None:
        """Flush, mark the run ``state`` (finished) and let it go."""
        if self._closed:
            return
        try:
            if self._error is None:
                self.flush()
                with self._flush_lock:
                    self._summary["state"] = state
                    self._write_summary()
        finally:
            with self._flush_lock:
                self._closed = True
                self._release()
        self._raise_if_unusable(closed_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.close("finished" if kind is None else "interrupted")

    def __repr__(self):
        s = self._summary
        return f"Recorder(run={self.run!r}, forwards={s['forwards']}, facts={s['facts']}, state={'closed' if self._closed else 'running'})"

    # -- inside ----------------------------------------------------------

    def _raise_if_unusable(self, closed_ok=False):
        if self._error is not None:
            raise DamagedError(
                f"the Recorder of run {self.run!r} stopped: writing to {self.folder} failed "
                f"({self._error!r}); facts up to the last flush are kept. Fix the cause "
                f"and record on with Recorder(store, run={self.run!r}, resume=True)"
            ) from self._error
        if self._closed and not closed_ok:
            raise SomatizeValueError(
                f"the Recorder of run {self.run!r} is closed: make a new one, "
                f"Recorder(store, run={self.run!r}, resume=True) to continue this run"
            )

    def _grouped(self, batch):
        """[(forward, [facts])] from pending facts and forward markers."""
        groups = []
        forward, has = self._forward, self._has_facts
        start = 0
        for mark in [i for i, fact in enumerate(batch) if fact is None] + [None]:
            stop = len(batch) if mark is None else mark
            if stop > start:
                groups.append((forward, batch[start:stop]))
                has = True
            if mark is not None and has:  # the next forward begins
                forward += 1
                has = False
            start = stop + 1
        self._forward, self._has_facts = forward, has
        return groups

    def _absorb(self, groups, batch):
        """Encode ``groups`` into ``batch`` and fold them into the summary."""
        if not groups:
            return
        data, rows = _log.encode_blocks(groups)
        batch.rows.extend((f, l, len(batch.data) + o, n) for f, l, o, n in rows)
        batch.data += data
        batch.last = groups[-1][0]
        summary = self._summary
        nodes = summary["nodes"]
        stats = summary["summarising"]
        points = batch.points
        numbers = _NUMBERS
        took_by: dict = {}  # node -> kind -> [took_us]: summed in C below
        node_kinds = _NODE_KINDS
        for forward, facts in groups:
            batch.count += len(facts)
            for fact in facts:
                kind = fact.get("fact")
                if kind in node_kinds:
                    node = fact.get("node")
                    try:
                        took_by[node][kind].append(fact.get("took_us"))
                    except KeyError:
                        took_by[node] = {"ran": [], "recalled": [], "kept": []}
                        took_by[node][kind].append(fact.get("took_us"))
                    continue
                if kind == "finished":
                    name, value = TOOK, fact.get("took_us")
                else:
                    value = fact.get("value")
                    if value is None:
                        continue
                    node = fact.get("node")
                    name = kind if node is None else f"{kind}/{node}"
                if value.__class__ is not float and value.__class__ is not int and (
                    type(value) is bool or not isinstance(value, numbers)
                ):
                    continue
                try:
                    pair = points[name]
                except KeyError:
                    if not _log.fits_a_file(name):
                        continue  # too long to name a series file: in the log only
                    pair = points[name] = ([], [])
                pair[0].append(forward)
                pair[1].append(value)
                if kind in stats:
                    _summarise(stats[kind], float(value))
        for node, per in took_by.items():
            agg = nodes.get(str(node))
            if agg is None:
                agg = nodes[str(node)] = {"ran": 0, "recalled": 0, "kept": 0, "total_us": 0, "max_us": 0}
            for kind, took in per.items():
                if not took:
                    continue
                agg[kind] += len(took)
                try:
                    total, most = sum(took), max(took)
                except TypeError:  # a took_us that is not a number is counted, not timed
                    took = [t for t in took if type(t) is not bool and isinstance(t, numbers)] or [0]
                    total, most = sum(took), max(took)
                agg["total_us"] += total
                if kind != "kept" and most > agg["max_us"]:
                    agg["max_us"] = most

    def _commit(self, batch):
        """Log first, then series, index, summary: each file only ever holds
        what the ones written before it hold."""
        summary = self._summary
        base = self._log_bytes
        append_durably(self._fd(LOG), batch.data)
        series = summary["series"]
        for name, (forwards, values) in batch.points.items():
            append_durably(self._fd(_log.series_file(self._series, name)), _log.points_bytes(forwards, values))
            series[name] = series.get(name, 0) + len(forwards) * _log.POINT.itemsize
        append_durably(self._fd(INDEX), _log.index_bytes(batch.rows, base))
        self._log_bytes = base + len(batch.data)
        summary["log_bytes"] = self._log_bytes
        summary["facts"] += batch.count
        summary["forwards"] = max(summary["forwards"], batch.last + 1)
        self._write_summary()

    def _write_summary(self):
        self._summary["updated"] = time.time()
        tmp = self.folder / f".{SUMMARY}.{self._pid}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            append_durably(fd, orjson.dumps(self._summary, option=orjson.OPT_SERIALIZE_NUMPY))
        finally:
            os.close(fd)
        os.replace(tmp, self.folder / SUMMARY)

    def _fd(self, path):
        fd = self._fds.get(path)
        if fd is None:
            full = self.folder / path
            new = not full.exists()
            fd = self._fds[path] = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if new:  # its name must survive a power cut as well as its bytes
                sync_dir(full.parent)
        return fd

    def _open(self, root, run, summarising, resume):
        self._series = Path(SERIES)  # relative to the run folder, like every _fd path
        old = read_summary(self.folder)
        if old is not None or (self.folder / LOG).exists():
            if not resume:
                state = (old or {}).get("state", "running")
                state = "interrupted" if state == "running" else state
                raise SomatizeValueError(
                    f"run {run!r} already exists in the store at {root} ({state}, "
                    f"{(old or {}).get('forwards', 0)} forwards): continue it with "
                    f"Recorder(store, run={run!r}, resume=True), or record a new run, "
                    f"e.g. Recorder(store, run={_free_name(root, run)!r})"
                )
            if old is None:
                raise DamagedError(
                    f"run {run!r} has facts but no readable {SUMMARY} in {self.folder}: "
                    f"run `somatize check {root}` and record into a new run"
                )
            replay = self._recover(old)
        else:
            old, replay = None, []
        now = time.time()
        summary = old or {
            "format": 1,
            "run": run,
            "started": now,
            "forwards": 0,
            "facts": 0,
            "log_bytes": 0,
            "series": {},
            "summarising": {},
            "nodes": {},
        }
        summary.update(state="running", pid=self._pid, host=socket.gethostname(), updated=now)
        for name in summarising:
            summary["summarising"].setdefault(name, {"count": 0, "first": None, "last": None, "min": None, "max": None})
        self._summary = summary
        self._log_bytes = summary["log_bytes"]
        self._forward = max(summary["forwards"] - 1, 0)
        self._has_facts = summary["forwards"] > 0
        self._write_summary()
        if replay:
            batch = _Batch()
            self._absorb(replay, batch)
            self._commit(batch)
            self._forward, self._has_facts = replay[-1][0], True

    def _recover(self, summary):
        """Cut the run back to its last completed flush, and return the whole
        blocks written after it (a flush a kill interrupted) to write again."""
        folder, committed = self.folder, summary["log_bytes"]
        log = folder / LOG
        raw = log.read_bytes() if log.exists() else b""
        if len(raw) < committed:
            raise DamagedError(
                f"run {self.run!r} is damaged: {LOG} holds {len(raw)} bytes, its summary "
                f"counts {committed}; run `somatize check` on the store and record into a new run"
            )
        replay = []
        try:
            for _first, _last, _count, at, _length in _log.scan(raw, committed):
                block = _log.read_block(raw, at)[4]
                replay.extend((fw, facts) for fw, facts in _log.decode(block))
        except _log.Torn:
            pass  # the torn remains of the interrupted flush: nothing to keep
        _truncate(log, committed)
        index = _log.read_index(folder / INDEX)
        keep = index[(index["offset"] + index["length"]) <= committed]
        end = int(keep["offset"][-1] + keep["length"][-1]) if len(keep) else 0
        rows = [(f, l, o, n) for f, l, _c, o, n in _log.scan(raw[:committed], end)]
        _truncate(folder / INDEX, keep.nbytes)
        if rows:
            with open(folder / INDEX, "ab") as f:
                f.write(_log.index_bytes(rows, 0))
                os.fsync(f.fileno())
        for name in _log.series_names(folder / SERIES):
            _truncate(_log.series_file(folder / SERIES, name), summary["series"].get(name, 0))
        return replay

    def _release(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        with LIVE_LOCK:
            if LIVE.get(self._real) is self:
                del LIVE[self._real]
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the lock
            self._lock_fd = None


class _Batch:
    """What one flush will write."""

    def __init__(self):
        self.data = bytearray()
        self.rows: list = []
        self.points: dict = {}
        self.count = 0
        self.last = -1


def _summarise(s, value):
    if s["count"] == 0:
        s["first"] = s["min"] = s["max"] = value
    elif value < s["min"]:
        s["min"] = value
    elif value > s["max"]:
        s["max"] = value
    s["count"] += 1
    s["last"] = value


def _truncate(path, size):
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return
    try:
        if os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)
            os.fsync(fd)
    finally:
        os.close(fd)


def _free_name(root, run):
    taken = set(run_names(root))
    n = 2
    while f"{run}-{n}" in taken:
        n += 1
    return f"{run}-{n}"


def _lock_or_refuse(root, folder, run):
    # A reader probing the lock holds it for microseconds: retry briefly.
    for _ in range(20):
        fd = try_lock(folder)
        if fd is not None:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
            return fd
        time.sleep(0.005)
    try:
        holder = (folder / LOCK).read_text().split()
    except OSError:
        holder = []
    who = f"pid {holder[0]} on {holder[1]}" if len(holder) >= 2 else "another process"
    raise SomatizeValueError(
        f"run {run!r} is being recorded right now by {who}: two Recorders cannot write "
        f"one run; record into another run, e.g. Recorder(store, run={_free_name(root, run)!r})"
    )


# -- one background flusher for every Recorder of this process --------------

_flusher: threading.Thread | None = None


def _flush_all():
    with LIVE_LOCK:
        recorders = list(LIVE.values())
    for recorder in recorders:
        try:
            recorder.flush()
        except Exception:
            pass  # kept on the recorder; its owner sees it at the next forward


def _loop():
    while True:
        time.sleep(FLUSH_EVERY)
        _flush_all()


def _start_flusher():
    global _flusher
    if _flusher is None or not _flusher.is_alive():
        _flusher = threading.Thread(target=_loop, name="somatize-recorder-flush", daemon=True)
        _flusher.start()


def _close_all():
    with LIVE_LOCK:
        recorders = [r for r in LIVE.values() if r._pid == os.getpid()]
    for recorder in recorders:
        try:
            recorder.close()
        except Exception:
            pass  # at exit there is nobody left to tell; the run reads as interrupted


def _forget_after_fork():
    # A forked child (a DataLoader worker) inherits the registry but not the
    # locks nor the thread; it must neither write nor close its parent's runs.
    global _flusher
    LIVE.clear()
    _flusher = None


atexit.register(_close_all)
os.register_at_fork(after_in_child=_forget_after_fork)
