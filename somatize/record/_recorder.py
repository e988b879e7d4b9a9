"""The Recorder: a watcher that writes the stream of facts into a run, durably.

The rule kept here: the hot path is one list append. Handing a fact over costs
``list.append``; numbering forwards, encoding, summarising and writing all
happen on a flush, which the background flusher runs every ``_flusher.FLUSH_EVERY``
seconds, and ``flush()``, ``close()`` and exit.

A flush appends whole blocks to ``facts.log`` in one ``write()``, then the
series and the index, syncs them (one ``syncfs`` where cheap, else an fsync
each: ``_base.files.sync_all``), and last rewrites ``summary.json``
atomically (temp file, synced, rename) with the bytes and xxh3 checksum of
each file. Every byte goes through the store's backend (``Store.backend``,
``_base/backend.py``): the run's folders held open, its files appended,
the summary staged and placed, the lock.
When ``flush()`` returns, its facts survive a kill -9 and a power cut.

A flush that fails (a full disk, say) stops the Recorder: the next call into
it (the next fact handed over, ``forward_began()``, ``flush()``, ``close()``)
raises ``DamagedError`` saying what failed; nothing is retried in silence.
A query in this process reads the facts not yet flushed from memory
(``_view``): reading never makes a Recorder write.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
import warnings
from pathlib import Path

import orjson
import xxhash

from .._base.errors import BucketError, DamagedError, Fenced, SomatizeTypeError, SomatizeValueError
from .._base.files import Refused
from .._graph.watchers import Holders
from .._store.names import run_names
from .._store.store import StoreNotWritable, as_store
from . import _files, _flusher, _log, _recovery, _summary
from ._columns import refused_fact
from ._logged import Logging
from ._runs import (
    INDEX,
    LIVE,
    LIVE_LOCK,
    LOCK,
    LOG,
    SERIES,
    SUMMARY,
    checked_name,
    folder_problem,
    load_summary,
    run_folder,
    runs_dir,
    try_lock,
)

CHUNK = 8192  # pending items a flush takes at a time


def default_name() -> str:
    """A run name that sorts by when it began: ``run-20260131-142502-3f9a0c1e``
    (the Recorder claims it by making its folder, so two never collide)."""
    return time.strftime("run-%Y%m%d-%H%M%S-") + secrets.token_hex(4)


class Recorder:
    """``Recorder(store, run=None, summarising=["loss"], resume=False, config=None)``.

    A watcher: hand it to ``watching=``; a loop of one's own (no Trainer)
    hands it its values with ``log(values, step=None)``. ``run=None`` names
    the run after the moment it began plus a random suffix (``run-20260131-142502-3f9a0c1e``),
    claimed by making its folder, so two Recorders never collide, in any
    process; ``recorder.run`` (and its repr) says the name.
    Forwards count from 0; facts that arrive after a forward's ``finished``
    and before the next forward begins (the Trainer's ``loss``, ``updated``)
    belong to that forward; facts before the first ``forward_began()`` belong
    to forward 0, as the first forward's do (they do not shift the numbering).

    In a data-parallel job, a run has one writer: on a process whose
    ``RANK`` (set by torchrun and ``somatize.torch.launch``) is not 0, the
    Recorder made is a stand-in that opens and writes nothing
    (``recording`` is False; its repr says so, naming ``RANK``), so the same
    line runs on every rank. Where ``RANK`` is set without ``WORLD_SIZE``
    (no launcher of a data-parallel job set it), the first such Recorder of
    the process also warns (``RuntimeWarning``), naming the variable.

    ``config``: the run's configuration (a dict of JSON-like values: the
    learning rate, the layer sizes, the seed), kept in its summary and shown
    as ``config.<key>`` columns by ``runs(store)`` and ``somatize runs``; a
    value JSON cannot hold is refused, the error naming its key.

    ``resume=True`` continues a finished or interrupted run, numbering on from
    its last forward; its config is the one recorded: omit ``config=``, or
    give the same (a different one is refused: it would be another run). A
    run another Recorder of this process is recording (a notebook cell run
    again) is taken over: that Recorder is closed first.
    ``flush()`` returns once every fact handed over is on disk; ``close()``
    (and leaving a ``with`` block) marks the run finished. A run its owner
    did not close is interrupted, with a ``cause`` where the process can
    tell one: a ``with`` block left by an exception, or a script ended by
    one (KeyboardInterrupt for ctrl-C / SIGINT), names the exception's type;
    a process that exits without ``close()`` says so.

    A process killed outright (kill -9) loses at most the facts handed over
    since the last completed flush: the flusher runs every 0.25 s, so
    typically 0.25 to 0.5 s of facts, more under heavy load; the run then
    lists as interrupted.

    A Store in a bucket (``Store("s3://bucket/prefix")``): the run is
    written as above into a copy on this machine (under
    ``$SOMATIZE_CACHE``, by default ``~/.cache/somatize``), and a thread of
    the process sends what its commits add to the bucket, a segment at most
    every 2 s (``record/_upload.py``): a step never waits on the network.
    ``flush()`` returns once the bucket holds what was handed over,
    ``close()`` once the run's head there says finished. Another writer of
    the run (a Recorder with ``resume=True`` on another machine) fences this
    one out: ``Fenced`` at its next call. ``resume=True`` goes on from this
    machine's copy where it begins with what the bucket holds (and sends
    what it holds beyond), else from the bucket's segments.
    """

    recording = True  # False for a Recorder made on a rank other than 0 (see _Bystander)
    _logging = None  # a loop's log(): made by its first call (_logged.Logging)
    _sender = None  # a run in a bucket: its uploads (_upload.Sender)

    def __new__(cls, *args, **kwargs):
        if cls is Recorder and launched_rank() != 0:
            return object.__new__(_Bystander)
        return object.__new__(cls)

    def __init__(self, store, run=None, summarising=("loss",), resume=False, config=None):
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
            refused = refused_fact(name)
            if refused is not None:
                raise SomatizeValueError(f"summarising=: {refused}")
        if config is not None:
            config = _summary.config_json(config)  # before anything is written
        if run is not None:
            checked_name(run)
        store = _writable_store(store)
        link = _bucket_link(store)
        if link is not None:  # written on this machine first, then sent (_upload)
            store = link.wal
        root, fs = Path(store.path), store.backend
        named = run is not None
        while True:
            if not named:
                run = default_name()
            folder = run_folder(root, run)
            runs_dir(root)  # a runs/ that is a symlink or a file is refused, not written through
            problem = folder_problem(folder) or folder_problem(folder / SERIES)
            if problem is not None and named:
                raise DamagedError(f"run {run!r}: {problem}; move it away or record into another run")
            try:  # following no link on the way; durable from its first fact
                made = None if problem else fs.make(("runs", run, SERIES))
            except Refused as e:
                if not named:
                    continue
                raise DamagedError(f"run {run!r}: {folder / SERIES} cannot be made ({e}); "
                                   "move it away or record into another run") from None
            # A name of our own is claimed by making its folder: of processes
            # drawing the same one, only one makes it; the others draw again.
            if named or (made is not None and ("runs",) in made):
                break
        self.run = run
        self.root = root  # the store's folder
        self.folder = folder
        self._fs = fs  # the store's backend: every byte of the run goes through it
        self._parts = ("runs", run)  # the run's folder in the store
        self._real = os.path.realpath(folder)
        self._pid = os.getpid()
        self._born = time.monotonic()  # the flusher leaves a Recorder younger than FLUSH_EVERY to its close
        self._error_before = _flusher.last_error()  # an error before this run began is not its cause
        self._pending: list = []
        self._flush_lock = threading.Lock()
        self._error: BaseException | None = None
        self._closed = False
        self._fds: dict = {}  # LOG, INDEX -> fd
        self._series_fds: dict = {}  # series name -> fd
        self._dirs: dict = {}  # "" (the run's folder), SERIES -> fd: opened once, the files opened in them
        # Folders that gained a file (or were made) since the last commit: synced
        # with that commit's files, before its summary names them. The folders
        # this Recorder made are synced at its first commit, not here: until a
        # commit, nothing of the run was promised to survive a power cut, and
        # Recorder() does not wait on three fsyncs one after the other.
        # "" (the run's folder) and SERIES stand for the folders held open (_dirs).
        self._new_in: set = {"" if p == ("runs", run) else p for p in made or ()}
        self._lock_fd = None
        self._unsynced = None  # fd of a new run's first summary, synced with its first commit (_open)
        self._holders = Holders()  # producers that hold facts back (held_by)
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
            try:
                self._lock_fd = _lock_or_refuse(fs, root, folder, run)
                start = None if link is None else link.prepare(run, fs, resume, named)
                self._open(root, run, list(summarising), resume, config)
                if link is not None:
                    self._sender = link.sender(self, start)
            except (_files.NotAFile, Refused) as e:
                self._release()
                said = f"{e.where} is not a regular file ({e})" if isinstance(e, Refused) else e
                raise DamagedError(f"run {run!r}: {said}; move it away or record into another run") from None
            except BaseException:
                self._release()
                raise
            LIVE[self._real] = self
        _flusher.start()

    # -- the hot path -----------------------------------------------------

    def __call__(self, fact):
        self._pending.append(fact)  # after a failed flush, _pending refuses (_Stopped)

    def held_by(self, hand_over) -> None:
        """``hand_over`` (a bound method) holds facts back before handing
        them over (the Trainer, reading its losses off the device in bulk):
        it is called first whenever this Recorder is flushed, closed or read
        from the thread that registered it, so what was done is written."""
        if self._logging is not None:
            raise SomatizeValueError(
                f"run {self.run!r} records a loop's log(), whose steps are its forwards: a Trainer watching it "
                f"would record its own steps as forwards too, mixed with the loop's. Give the Trainer a "
                f"Recorder of its own"
            )
        self._holders.add(hand_over)

    def take(self, items):
        """Facts held back (by the Trainer, which reads its losses off the
        device in bulk) handed over in one call, ``None`` marking where a
        forward began: the same as handing each over in turn."""
        if self._closed:
            self._raise_if_unusable()
        self._pending.extend(items)

    def forward_began(self):
        """Called by the engine (and the Trainer) as a forward begins: the facts
        that follow belong to the next forward number."""
        if self._closed:
            self._raise_if_unusable()
        self._pending.append(None)  # a marker: the flush numbers forwards

    def log(self, values, step=None) -> None:
        """Record a loop's values for one step: ``rec.log({"loss": loss, "lr": lr})``.

        ``values``: a dict of numbers: Python ints and floats, numpy
        scalars, and 0-d tensors on any device (once ``somatize.torch`` is
        imported). A tensor is not read here: it is held, and read with
        every other one held in one host sync, at the first step that begins
        32 steps or 0.25 s after it was logged, or when this Recorder is
        flushed, closed or queried from the thread that logged it; so a step
        waits for no device. A tensor changed in place after it was logged
        (``total += loss``) is recorded as None, and a RuntimeWarning names
        it. A value that is not one number (a str, a dict, a bool, a 2-d
        tensor) is refused, naming its key. NaN and infinities are kept, as
        the record keeps them (``somatize.record.runs`` says how the
        summaries take them).

        ``step``: the loop's step, a whole number >= 0; by default the one
        after the last (0 first, or after a resumed run's last). The same
        step again logs more of it (an evaluation at that step); a step
        before the last is refused, naming both. Each step is one forward of
        the run, forwards counting the steps logged from 0, so every reader
        (``curve``, ``progress``, ``runs`` and its ``steps``, ``compare``,
        the run browser, ``somatize runs``) reads the run as a Trainer's. A
        step numbered otherwise than its forward (a loop counting from 1,
        or logging every 10th step) is also kept as the fact ``step``.

        A key is a fact's name (letters, digits, ``_ . - /``, starting with
        a letter or ``_``), and each value becomes the fact
        ``{"fact": key, "value": v}``, as the Trainer says ``loss``, ``lr``
        and ``val_*``: ``loss`` is the step's loss, ``lr`` its learning
        rate, ``val_<metric>`` an evaluation's, and ``summarising=`` names
        those ``runs()`` summarises. The other names the engine and the
        Trainer give their own facts (``ran``, ``grad_norm``, ``wall_s``,
        ...) and ``step`` are refused. On the steps the Trainer says its
        clock (the first ten, every 20th, and at least once a second) a
        step also says ``wall_s``, so ``progress(x="wall")`` draws the run
        over time.

        One loop logs into a Recorder, from one thread; a Recorder that a
        Trainer watches is refused (give each its own)."""
        if self._closed:
            self._raise_if_unusable()
        logging = self._logging
        if logging is None:
            logging = self._logging = Logging(self)
        logging.log(values, step)

    def _next_forward(self) -> int:
        """The number the next forward to begin will have, the facts not
        flushed yet counted in (where ``log`` goes on from)."""
        with self._flush_lock:
            pending = list(self._pending) if isinstance(self._pending, list) else []
            _, forward, has = _group(pending, self._forward, self._has_facts)
        return forward + 1 if has else forward

    # -- flushing ---------------------------------------------------------

    def flush(self) -> None:
        """Write every fact handed over so far, durably, and return (a run in
        a bucket: once the bucket holds them)."""
        self._flush()
        if self._sender is not None and os.getpid() == self._pid:  # a forked child sends nothing
            self._sender.wait()

    def _flush(self, state=None, background=False) -> bool:
        """``flush``; ``state`` (a function that marks the run's state in its
        summary) is written with the commit's summary, so a close writes the
        summary once; ``background``: the flusher's, beside the training, so
        its files are synced on its own thread (``sync_all``: one syncfs, or an
        fsync each one after the other). Returns
        whether it was (False: nothing to commit)."""
        if os.getpid() != self._pid:
            # A forked child must not write its parent's run, nor take its
            # locks: one the flusher thread held at the fork is held forever.
            return False
        if self._holders:
            self._holders()
        with self._flush_lock:
            self._raise_if_unusable(closed_ok=True)
            if self._closed:
                return False
            pending = self._pending
            n = len(pending)
            if not n:
                return False
            marked = False
            # ctrl-C reaches only the main thread: the flusher's own flushes need no way back
            saved = None if background else self._saved()
            try:
                batch = _Batch()
                # In chunks: one huge young list would be walked by every
                # collection of the cyclic GC while the flush allocates.
                for start in range(0, n, CHUNK):
                    self._absorb(self._grouped(pending[start : min(start + CHUNK, n)]), batch)
                if batch.count:
                    self._commit(batch, state, together=not background)
                    marked = state is not None
                # Only this (locked) flush deletes; appends land after index n.
                # The try's last statement: once done, nothing is left to undo.
                del pending[:n]
            except Exception as e:
                self._fail(e)
                self._raise_if_unusable()
            except BaseException:  # KeyboardInterrupt, SystemExit: they pass through, nothing damaged
                if saved is None:
                    raise
                self._undo(saved, pending, n)
                raise
            return marked

    def close(self, state: str = "finished") -> None:
        """Flush, mark the run ``state`` (finished, or interrupted) and let it go."""
        if state not in ("finished", "interrupted"):
            raise SomatizeValueError(
                f"close(state) marks a run 'finished' or 'interrupted'; got {state!r:.40}: "
                f"write recorder.close() for a run that ended as it should"
            )
        self._end(state, None)

    def _end(self, state: str, cause: str | None) -> None:
        """Flush, mark the run ``state``, saying its ``cause`` when interrupted."""
        if self._closed:
            return
        if os.getpid() != self._pid:  # a forked child's copy: the run and its locks are the parent's
            self._closed = True
            return

        def mark():
            self._summary["state"] = state
            self._summary.pop("cause", None)
            if cause is not None and state == "interrupted":
                self._summary["cause"] = cause

        try:
            # written with the last facts, or alone; never by a forked child (the run is its parent's)
            if self._error is None and not self._flush(mark):
                with self._flush_lock:
                    mark()
                    self._write_summary([])  # a run that never committed: its folders, made by Recorder(), synced
        except Exception as e:
            self._fail(e)
        except BaseException:
            # ctrl-C (or SystemExit) during the close: nothing on disk is
            # damaged. Unless the closing summary was renamed in, the run
            # stays open: close() again, or the exit marks it interrupted.
            if self._error is None and not self._closed_on_disk(state):
                with self._flush_lock:
                    self._summary["state"] = "running"
                    self._summary.pop("cause", None)
                raise
            self._let_go()
            raise
        self._let_go()
        self._raise_if_unusable(closed_ok=True)
        if self._sender is not None:
            try:
                self._sender.wait(closing=True)
            except BucketError as e:
                raise BucketError(
                    f"run {self.run!r} is closed on this machine (its local copy: {self.folder}), but "
                    f"{e.url} did not take its last segment: {e}. Recorder(store, run={self.run!r}, "
                    f"resume=True) on this machine sends it, and close() then marks it {state}",
                    url=e.url, key=e.key, status=e.status) from e

    def _let_go(self):
        if self._sender is not None:
            self._sender.open = False  # no more heads of an open run; what is left is still sent
        with self._flush_lock:
            self._closed = True
            if self._error is None:
                self._pending = _Stopped(self)  # a fact handed over now says "closed"
            self._release()

    def _closed_on_disk(self, state) -> bool:
        """Whether the run's summary on disk says ``state`` (a close's commit was renamed in)."""
        try:
            return (load_summary(self.folder, self._dir(""), self._fs) or {}).get("state") == state
        except Exception:
            return False

    # -- a training resumed from what it kept --------------------------------

    @property
    def forwards(self) -> int:
        """How many forwards the run holds so far, the ones not yet flushed included."""
        return self._view().summary["forwards"]

    def checkpoint(self) -> dict:
        """Where the run stands, for a Trainer's checkpoint: flushed first, so
        the record holds durably what the checkpoint says was done.
        ``rewind(position)`` comes back here."""
        self.flush()
        return {"run": self.run, "forwards": self.forwards}

    def rewind(self, forwards) -> None:
        """Drop the facts of forward ``forwards`` on, durably, and number on
        from there: a training resumed from a checkpoint kept after that many
        forwards does them again, and the run reads as one, with no forward
        twice (the Trainer calls it with the position ``checkpoint()`` gave
        when it resumes; a position of another run rewinds nothing).
        Refuses to go forward."""
        if isinstance(forwards, dict):
            if forwards.get("run") != self.run:
                return
            forwards = forwards.get("forwards")
        if isinstance(forwards, bool) or not isinstance(forwards, int) or forwards < 0:
            raise SomatizeTypeError(f"rewind(forwards) takes a count of forwards (an int >= 0); got {forwards!r:.40}")
        self.flush()
        with self._flush_lock:
            self._raise_if_unusable()
            have = self._summary["forwards"]
            if forwards > have:
                raise SomatizeValueError(
                    f"run {self.run!r} holds {have} forwards, fewer than the {forwards} to rewind to: "
                    f"this record is not the one the training was kept with; resume into the run it was "
                    f"kept with, or start the training again"
                )
            if forwards == have:
                return
            self._close_files()  # the series and the index are replaced: open them again
            try:
                head, self._hashers = _recovery.cut(self._fs, self._parts, self._summary, self.run, forwards)
                self._write_summary()
                _recovery.truncate(self._fs, (*self._parts, LOG), self._summary["log_bytes"])
                self._log_bytes = self._summary["log_bytes"]
                if self._sender is not None:
                    self._sender.rewound(self._log_bytes)
                if head:
                    batch = _Batch()
                    self._absorb(head, batch)
                    self._commit(batch)
            except BaseException as e:
                self._fail(e)
                self._raise_if_unusable()
            self._forward, self._has_facts = max(forwards - 1, 0), True if forwards > 0 else None
            if self._logging is not None:
                self._logging.forward = None  # log() asks where the run stands again

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.close()
        else:
            self._end("interrupted", _summary.cause_of(value))

    def __repr__(self):
        s = self._summary
        # the Recorder's own condition; the run's state is what runs() says
        how = ", stopped by a failed flush" if self._error is not None else ", closed" if self._closed else ""
        return f"Recorder(run={self.run!r}, forwards={s['forwards']}, facts={s['facts']}{how})"

    # -- what a query in this process reads ----------------------------------

    def _view(self) -> _View:
        """The run as it stands: the summary of the last completed flush (what
        the files hold) and, from memory, the facts handed over since."""
        if self._holders:
            self._holders()
        with self._flush_lock:
            committed = _copy(self._summary)
            pending = list(self._pending) if isinstance(self._pending, list) else []
            groups, _, _ = _group(pending, self._forward, self._has_facts)
        summary = _copy(committed)
        points: dict = {}
        summary["facts"] += _summary.summarise(groups, summary, points)
        if groups:
            summary["forwards"] = max(summary["forwards"], groups[-1][0] + 1)
        return _View(committed, summary, groups, points)

    # -- inside ----------------------------------------------------------

    def _fail(self, error):
        if self._error is None:
            self._error = error
            self._pending = _Stopped(self)

    def _raise_if_unusable(self, closed_ok=False):
        if isinstance(self._error, Fenced):
            raise Fenced(f"the Recorder of run {self.run!r} stopped: {self._error}",
                         url=self._error.url, key=self._error.key) from self._error
        if self._error is not None:
            raise DamagedError(
                f"the Recorder of run {self.run!r} stopped: a flush into {self.folder} failed "
                f"({self._error!r}); facts up to the last completed flush are kept. Fix the cause "
                f"and record on with Recorder(store, run={self.run!r}, resume=True)"
            ) from self._error
        if self._closed and not closed_ok:
            raise SomatizeValueError(
                f"the Recorder of run {self.run!r} is closed: make a new one, "
                f"Recorder(store, run={self.run!r}, resume=True) to continue this run"
            )

    def _saved(self):
        """What a flush changes in memory, for ``_undo``."""
        return (_copy(self._summary), self._log_bytes, self._forward, self._has_facts,
                {name: hasher.copy() for name, hasher in self._hashers.items()})

    def _undo(self, saved, pending, n):
        """A flush stopped by KeyboardInterrupt or SystemExit (ctrl-C landing
        in it, or raised by a signal handler): nothing on disk is damaged.
        When its summary was renamed in, the commit stands and its ``n``
        facts leave ``pending``. Otherwise the Recorder is put back as the
        last commit left it: every file it appends to is cut back to the
        bytes the summary on disk counts (a write may have landed past
        them), and the facts stay pending for the next flush or the close.
        A file that cannot be cut back stops the Recorder (``DamagedError``
        at the next call; resume repairs the run)."""
        summary, log_bytes, forward, has, hashers = saved
        if self._log_bytes != log_bytes:
            try:
                on_disk = (load_summary(self.folder, self._dir(""), self._fs) or {}).get("log_bytes")
            except Exception:
                on_disk = None
            if on_disk == self._log_bytes:
                del pending[:n]
                return
        try:
            for fd, size in ((self._fds.get(LOG), log_bytes), (self._fds.get(INDEX), summary["index"][0]),
                             *((fd, summary["series"].get(name, (0, 0))[0])
                               for name, fd in self._series_fds.items())):
                if fd is not None:
                    self._fs.truncate(fd, size)
        except OSError as e:
            self._fail(e)
        self._summary, self._log_bytes, self._forward, self._has_facts, self._hashers = (
            summary, log_bytes, forward, has, hashers)

    def _grouped(self, batch):
        groups, self._forward, self._has_facts = _group(batch, self._forward, self._has_facts)
        return groups

    def _absorb(self, groups, batch):
        """Encode ``groups`` into ``batch`` and fold them into the summary."""
        if not groups:
            return
        data, rows = _log.encode_blocks(groups)
        batch.rows.extend((f, length, len(batch.data) + o, n) for f, length, o, n in rows)
        batch.data += data
        batch.last = groups[-1][0]
        batch.count += _summary.summarise(groups, self._summary, batch.points)

    def _commit(self, batch, state=None, together=True):
        """Log first, then series, index, summary: each file only ever holds
        what the ones written before it hold (a kill -9 keeps every write()
        made). Then the log, the series, the index, every folder that
        gained a file and the summary's temp file are synced together, in
        one round (``sync_all``), and only then is the summary that counts
        them renamed in: it is the commit, so nothing needs syncing before
        another but all before it (a test traces the calls). One round
        instead of six one after the other (log, series, index, each folder,
        the summary).
        ``state``: the run's state, written with this commit's summary (a
        close writes it once). ``together``: see ``sync_all``."""
        summary = self._summary
        base = self._log_bytes
        fs = self._fs
        log = self._fds.get(LOG)
        if log is None:
            log = self._open_file("", LOG, self._fds, LOG)
        fs.append(log, [batch.data])
        series = summary["series"]
        written = [log]
        series_fds = self._series_fds
        for name, (forwards, values) in batch.points.items():
            data = _log.points_bytes(forwards, values)
            fd = series_fds.get(name)
            if fd is None:
                fd = self._open_file(SERIES, _log.series_file_name(name), series_fds, name)
            fs.append(fd, [data])
            written.append(fd)
            hasher = self._hashers.get(name)
            if hasher is None:
                hasher = self._hashers[name] = xxhash.xxh3_64()
            hasher.update(data)
            series[name] = [series.get(name, (0, 0))[0] + len(data), hasher.intdigest()]
        index = _log.index_bytes(batch.rows, base)
        fd = self._fds.get(INDEX)
        if fd is None:
            fd = self._open_file("", INDEX, self._fds, INDEX)
        fs.append(fd, [index])
        written.append(fd)
        self._hashers[INDEX].update(index)
        summary["index"] = [summary["index"][0] + len(index), self._hashers[INDEX].intdigest()]
        self._log_bytes = base + len(batch.data)
        summary["log_bytes"] = self._log_bytes
        summary["facts"] += batch.count
        summary["forwards"] = max(summary["forwards"], batch.last + 1)
        if state is not None:
            state()
        self._write_summary(written, together)

    def _synced(self, fds, together=True):
        """Sync ``fds`` (``sync_all``: one syncfs, or an fsync each), a new
        run's first summary (``_open``) and every folder that gained a file since the last
        commit together (the new files' names survive a power cut before the
        summary counts them)."""
        held, made = [], []
        for folder in self._new_in:
            if folder.__class__ is str:  # the run's own (_dirs)
                held.append(self._dir(folder))
            else:  # a folder Recorder() made, by its parts
                made.append(folder)
        first = [] if self._unsynced is None else [self._unsynced]
        self._fs.sync(fds + first + held, made, together)
        self._new_in = set()
        self._close_unsynced()

    def _close_unsynced(self):
        if self._unsynced is not None:
            self._fs.close(self._unsynced)
            self._unsynced = None

    def _write_summary(self, written=None, together=True, durable=True):
        """Write the summary to a temp file, sync it and rename it in (the
        backend's ``stage`` and ``place``). ``written``: the files this
        summary counts, synced with it and the folders that gained a file,
        in one round (``_synced``), all before the rename; None: the temp
        file alone (nothing new to count). ``durable=False``: its file kept
        open and synced with the next commit's files, not now (a new run's
        first summary, which counts nothing: see ``_open``)."""
        self._summary["updated"] = time.time()
        fs = self._fs
        try:
            staged = fs.stage((*self._parts, SUMMARY))
        except OSError as e:
            raise DamagedError(f"{e.filename} cannot be written ({e.strerror}); move it away") from None
        kept = False
        try:
            fs.append(staged, [_summary.dumps(self._summary)])
            if written is None and not durable:
                self._unsynced, kept = staged, True  # synced with the first commit's files (_synced)
            elif written is None:
                fs.sync([staged])
            else:
                self._synced([*written, staged], together)
        finally:
            if not kept:
                fs.close(staged)
        fs.place(staged)
        if self._sender is not None:
            self._sender.committed()

    def _dir(self, sub):
        """The run's folder (``sub`` "") or its ``SERIES`` folder, held open
        until the Recorder lets the run go: its files are opened in it."""
        fd = self._dirs.get(sub)
        if fd is None:
            path = self.folder / sub if sub else self.folder
            try:  # series/ opened in the run's folder; the run's, from the store's root down
                fd = self._fs.open_folder((sub,), at=self._dir("")) if sub else self._fs.open_folder(self._parts)
            except Refused as e:
                raise DamagedError(f"{path} is not a folder ({e}); move it away") from None
            except OSError as e:
                raise DamagedError(f"{path} is not a folder ({e.strerror}); move it away") from None
            self._dirs[sub] = fd
        return fd

    def _open_file(self, sub, name, fds, key):
        """``fds[key]``: the file ``name`` of the folder ``sub`` (``_dir``)
        opened to append, made when missing; a link, a FIFO or a folder there
        is refused. A file made here has its folder synced before the next
        summary names it. One system call for a new file: O_EXCL says
        whether it was there."""
        try:
            fd, new = self._fs.open_append((name,), at=self._dir(sub))
        except (OSError, Refused) as e:
            why = e if isinstance(e, Refused) else e.strerror
            raise DamagedError(f"{self.folder / sub / name} is not a regular file ({why}); move it away") from None
        fds[key] = fd
        if new:  # its name must survive a power cut as well as its bytes: synced before the summary
            self._new_in.add(sub)
        return fd

    def _close_files(self):
        for fd in (*self._fds.values(), *self._series_fds.values()):
            self._fs.close(fd)
        self._fds.clear()
        self._series_fds.clear()

    def _open(self, root, run, summarising, resume, config):
        try:
            old = load_summary(self.folder, self._dir(""), self._fs)
        except _summary.Broken as e:
            raise DamagedError(
                f"run {run!r}: {self.folder / SUMMARY} {e}; run `somatize check {root}` and "
                f"record into a new run, e.g. Recorder(store, run={_free_name(root, run)!r})"
            ) from None
        if old is not None or os.path.lexists(self.folder / LOG):
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
            if config is not None and _canonical(config) != _canonical(old["config"]):
                raise SomatizeValueError(_config_differs(run, old["config"], config))
            replay, self._hashers = _recovery.recover(self._fs, self._parts, old, run)
        else:
            old, replay = None, []
            self._hashers = {INDEX: xxhash.xxh3_64()}
        if old is None and "" not in self._new_in:  # a new run in a folder this Recorder did not make
            self._clear_leftovers()
        now = time.time()
        summary = old or _summary.new(run, now)
        if old is None and config is not None:
            summary["config"] = config
        summary.update(run=run, state="running", pid=self._pid, host=socket.gethostname(), updated=now)
        summary.pop("cause", None)
        for name in summarising:
            summary["summarising"].setdefault(name, {"count": 0, "first": None, "last": None, "min": None, "max": None})
        self._summary = summary
        self._log_bytes = summary["log_bytes"]
        self._forward = max(summary["forwards"] - 1, 0)
        self._has_facts = True if summary["forwards"] > 0 else None  # None: no forward began (see _group)
        # A new run's first summary says "running" to other processes and
        # counts nothing, so Recorder() does not wait for its fsync:
        # its file is kept open and synced with the first commit's files,
        # before that commit renames its own summary over it (if a power cut
        # loses that rename, the name still points at this one, whole). A
        # power cut before the first commit may leave it empty, and a run
        # folder whose summary is empty and which holds no facts lists as no
        # run (_runs.load_summary, _runs.recorded). A resumed run's summary
        # counts its facts: replaced durably.
        self._write_summary(durable=old is not None)
        if replay:
            batch = _Batch()
            self._absorb(replay, batch)
            self._commit(batch)
            self._forward, self._has_facts = replay[-1][0], True

    def _clear_leftovers(self):
        """Unlink the index and series files a new run's folder holds: left
        by a first commit a power cut cut short (an empty summary, no
        facts.log), they count for nothing, and appended to they would sit
        before the run's own bytes, which would then not verify. Unlinked,
        not emptied in place, so another link to the same file (a snapshot
        made with hard links) keeps its bytes; only regular files, reached
        through the folders held open, following no link (anything else
        there is refused when the run opens that name)."""
        fs = self._fs
        for sub, names in (("", (INDEX,)), (SERIES, None)):
            at = self._dir(sub)
            if names is None:
                names = [name for name, kind in fs.list((), at=at) if kind == "file" and name.endswith(".bin")]
            for name in names:
                try:
                    if fs.size((name,), at=at) is None:
                        continue
                except Refused:
                    continue
                fs.remove((name,), at=at)
                self._new_in.add(sub)  # the name gone is synced with the first commit's

    def _let_go_after_fork(self):
        """In a forked child: close the child's copy of the run's lock file
        (the parent's copy keeps the lock) and never close it again."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            try:
                self._fs.close(fd)
            except OSError:
                pass

    def _release(self):
        self._close_files()
        self._close_unsynced()
        for fd in self._dirs.values():
            self._fs.close(fd)
        self._dirs.clear()
        with LIVE_LOCK:
            if LIVE.get(self._real) is self:
                del LIVE[self._real]
        if self._lock_fd is not None:
            self._fs.close(self._lock_fd)  # closing drops the lock
            self._lock_fd = None


def launched_rank() -> int:
    """The rank a launcher gave this process (``RANK``, set by torchrun and
    ``somatize.torch.launch``), 0 when none did."""
    rank = os.environ.get("RANK", "0")
    return int(rank) if rank.isdigit() else 0


class _Bystander(Recorder):
    """What ``Recorder(...)`` makes on a rank other than 0 of a data-parallel
    job (``RANK`` set and not 0): one run has one writer, rank 0's Recorder,
    and the loss it records is already over every rank's examples
    (torch/_distributed.py). So the same code runs on every rank: here the
    Recorder opens nothing, writes nothing and takes facts only to drop them
    (the Trainer hands it none). ``recording`` is False; ``run`` is the name
    given (a name of its own is drawn only where the run is written)."""

    recording = False
    warned = False  # once a process

    def __init__(self, store, run=None, summarising=("loss",), resume=False, config=None):
        self.run, self.rank, self._closed = run, launched_rank(), False
        if not _Bystander.warned and "WORLD_SIZE" not in os.environ:
            _Bystander.warned = True
            warnings.warn(
                f"RANK={self.rank} in this process's environment, and no WORLD_SIZE: this Recorder "
                f"(run {run!r}) writes nothing, as on a rank other than 0 of a data-parallel job, "
                f"where rank 0 records the run. To record here, unset it first: os.environ.pop('RANK')",
                RuntimeWarning, stacklevel=2)

    def __call__(self, fact):
        pass

    def take(self, items):
        pass

    def held_by(self, hand_over):
        pass

    def forward_began(self):
        pass

    def log(self, values, step=None):
        pass

    def flush(self):
        pass

    def close(self, state="finished"):
        self._closed = True

    @property
    def forwards(self):
        return 0

    def checkpoint(self):
        return {"run": self.run, "forwards": 0}

    def rewind(self, forwards):
        pass

    def __exit__(self, kind, value, tb):
        self._closed = True

    def __repr__(self):
        return (f"Recorder(run={self.run!r}, RANK={self.rank}: writes nothing, "
                f"rank 0 records the run)")


def _copy(summary):
    """A copy of a summary that a flush (or a fold) may change without
    touching the original: its dicts of dicts, one level down."""
    out = dict(summary)
    out["index"] = list(summary["index"])
    out["series"] = dict(summary["series"])  # values are replaced, never changed in place
    out["nodes"] = {k: dict(v) for k, v in summary["nodes"].items()}
    out["summarising"] = {k: dict(v) for k, v in summary["summarising"].items()}
    return out


def _group(batch, forward, has):
    """([(forward, [facts])], forward, has) from pending facts and forward
    markers, numbering on from ``forward`` (``has``: it holds facts; None: no
    forward has begun in this run yet, so the facts so far belong to forward
    0 and the first forward is forward 0 too, whatever came before it: an
    evaluation or the instruments' first facts never shift the numbering)."""
    groups = []
    start = 0
    for mark in [i for i, fact in enumerate(batch) if fact is None] + [None]:
        stop = len(batch) if mark is None else mark
        if stop > start:
            groups.append((forward, batch[start:stop]))
            if has is not None:
                has = True
        if mark is not None:
            if has:  # the next forward begins
                forward += 1
            has = False
        start = stop + 1
    return groups, forward, has


class _View:
    """A live run as a query sees it (``Recorder._view``)."""

    def __init__(self, committed, summary, groups, points):
        self.committed = committed  # what the files hold (sizes, checksums)
        self.summary = summary  # the same, with the pending facts folded in
        self.groups = groups  # pending [(forward, [facts])]
        self.points = points  # pending {series: ([forwards], [values])}


class _Stopped:
    """The pending list of a Recorder whose flush failed: handing a fact over
    raises, so the owner hears of it at once (and the hot path pays nothing)."""

    def __init__(self, recorder):
        self.recorder = recorder

    def append(self, _fact):
        self.recorder._raise_if_unusable()

    extend = append

    def __len__(self):
        return 0

    def __getitem__(self, key):
        return []

    def __delitem__(self, key):
        pass


class _Batch:
    """What one flush will write."""

    def __init__(self):
        self.data = bytearray()
        self.rows: list = []
        self.points: dict = {}
        self.count = 0
        self.last = -1


def _writable_store(store):
    """The Store a Recorder writes into: a path is opened (made when
    missing) as the store's one ``as_store``; a read-only Store is refused."""
    store = as_store(store)
    if store.readonly:
        raise StoreNotWritable(
            f"a Recorder writes into its store, and {store!r} was opened read-only: "
            f"write Recorder(Store({str(store.path)!r}), ...)"
        )
    return store


def _bucket_link(store):
    """For a Store in a bucket, its ``_upload.Link`` (the local copy runs are
    written into first); None for a store on disk."""
    if getattr(store, "bucket", None) is None:
        return None
    from ._upload import Link

    return Link(store)


def _free_name(root, run):
    taken = set(run_names(root, links_too=True))
    n = 2
    while f"{run}-{n}" in taken:
        n += 1
    return f"{run}-{n}"


def _canonical(value) -> bytes:
    """JSON with sorted keys: 1 and 1.0, or True and 1, are different configs."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _config_differs(run, recorded, given) -> str:
    keys = sorted(k for k in {*recorded, *given}
                  if k not in recorded or k not in given or _canonical(recorded[k]) != _canonical(given[k]))
    shown = ", ".join(f"{k!r}: recorded {recorded.get(k, 'nothing')!r:.40}, given {given.get(k, 'nothing')!r:.40}"
                      for k in keys[:5])
    return (
        f"run {run!r} was recorded with another config ({shown}{' …' if len(keys) > 5 else ''}): "
        f"a run has one config. Continue it with Recorder(store, run={run!r}, resume=True) "
        f"without config= (it keeps the recorded one), or record the new config as a new run"
    )



def _lock_or_refuse(fs, root, folder, run):
    # A reader probing the lock holds it for microseconds: retry briefly.
    note = f"{os.getpid()} {socket.gethostname()}\n".encode()
    for _ in range(20):
        fd = try_lock(folder, fs, note)
        if fd is not None:
            return fd
        time.sleep(0.005)
    try:
        holder = fs.read_range(("runs", run, LOCK), 4096).decode(errors="replace").split()
    except (OSError, Refused):
        holder = []
    who = f"pid {holder[0]} on {holder[1]}" if len(holder) >= 2 else "another process"
    raise SomatizeValueError(
        f"run {run!r} is being recorded right now by {who}: two Recorders cannot write "
        f"one run; record into another run, e.g. Recorder(store, run={_free_name(root, run)!r})"
    )
