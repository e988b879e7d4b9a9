"""A run written into a bucket: a local write-ahead copy, and an uploader
that commits what it holds to the bucket, segment after segment.

The rule kept here: the network is never on the training's path. A
Recorder of a Store in a bucket writes the run exactly as on disk, into a
write-ahead copy on this machine (``$SOMATIZE_CACHE/wal/<sha256(url)[:16]>/
store``: a local store; lock, ctrl-C and kill -9 as there). One thread of
the process (``somatize-bucket-upload``) then seals what the copy's commits
added, at most every ``SEAL_S`` seconds (or once ``SEAL_BYTES`` are
waiting, or when ``flush()`` or ``close()`` asks), into the run's next
segment and commits it:

1. ``runs/<run>/seg/<n>`` created if absent (``_segments``): the commit.
   Segments form one order; a 412 means another writer made segment ``n``
   (the run resumed elsewhere, or a second Recorder): this one is
   ``Fenced`` and stops, its facts kept in its local copy.
2. ``heads/<run>.json`` replaced if its etag is the one this writer last
   saw (created if absent): how far the run is, its summary, the writer's
   id and a sequence number. A 412 there is looked at: a head that counts
   this writer's segment or one past it was written by a writer that has
   taken the run (fenced); one counting fewer is a writer that lost the
   race and has not yet learnt it, and is replaced.

A head is also replaced every ``HEARTBEAT_S`` while the run is open and
nothing new is sealed, so a reader tells a live writer from a dead one
(``_mirror.STALE_S``). ``flush()`` returns once its facts are in a segment
and the head counts it; ``close()`` once the head says finished. A bucket
that does not answer (after ``Bucket``'s own retries) stops nothing: the
training goes on, the uploader tries again after a growing pause, and a
``flush()`` waiting on it raises that ``BucketError``.

What a segment carries is found by size and checksum: each file's bytes
past what the bucket holds; a file whose bytes no longer go on from what
was sent (a run rewound, an index rebuilt) is sent whole again
(``_segments``: an entry is ``file := file[:offset] + bytes``).
"""

from __future__ import annotations

import os
import secrets
import threading
import time

import xxhash

from .._base.errors import BucketError, DamagedError, Fenced, SomatizeValueError
from .._base.forks import fork_safe
from . import _segments, _summary
from ._mirror import _replace, download, home_of
from ._runs import INDEX, LOG, SUMMARY

SEAL_S = 2.0  # seconds between segments of a run at most while facts come
SEAL_BYTES = 4 << 20  # bytes waiting that seal a segment at once
HEARTBEAT_S = 15.0  # seconds between heads of an open run with nothing new
TICK_S = 0.25  # how often the uploader looks
PAUSE_S, PAUSE_CAP_S = 1.0, 60.0  # after a failed upload: the first pause, the longest
READ_CHUNK = 1 << 24
clock = time.monotonic  # the uploader's (tests set it)
wall = time.time  # what a head says of when it was written


class Link:
    """A Store in a bucket, as a Recorder writes it: ``wal``, the local
    store its runs are written into first, and ``bucket``."""

    def __init__(self, store):
        from .._store.store import as_store

        self.bucket = store.bucket
        self.home = home_of("wal", self.bucket.url)
        self.home.mkdir(parents=True, exist_ok=True)
        from ._mirror import _note_url

        _note_url(self.home, self.bucket.url)
        self.wal = as_store(self.home / "store")

    def prepare(self, run, fs, resume, named) -> dict:
        """Before a Recorder opens ``run`` in the write-ahead copy (its lock
        held): what the bucket holds of it, the copy made to hold the same
        when it does not (another machine's run, or this machine's copy
        behind the bucket). Returns the uploader's start: the next segment's
        number, the head's etag and what each file holds there."""
        bucket = self.bucket
        if not named:  # a name of its own, never drawn before (its segment 0 fences a collision out)
            return {"segments": 0, "etag": None, "files": {}}
        try:
            data, etag = bucket.get_if_changed(_segments.head_key(run), None, _segments.HEAD_LIMIT)
        except FileNotFoundError:
            data, etag = None, None
        head = None
        if data is not None:
            try:
                head = _segments.decode_head(data, run)
            except _segments.Broken as e:
                raise DamagedError(f"{bucket.where(_segments.head_key(run))} {e}: run {run!r} cannot be "
                                   "continued from it; record into another run") from None
        count = head["segments"] if head else 0
        while bucket.head(_segments.segment_key(run, count)) is not None:  # a writer stopped before its head
            count += 1
        if count == 0:
            return {"segments": 0, "etag": etag, "files": {}}
        if not resume:
            raise SomatizeValueError(
                f"run {run!r} already exists in {bucket.url} ({count} segments): continue it with "
                f"Recorder(store, run={run!r}, resume=True), or record a new run"
            )
        files = head["files"] if head and count == head["segments"] else _last_files(bucket, run, count)
        hashers = _matching(fs, run, files)
        if hashers is None:  # this machine's copy is not the bucket's: made again from the segments
            _clear(fs, run)
            filler = download(bucket, run, count, fs)
            if filler.summary:
                _replace(fs, run, SUMMARY, filler.summary)
            hashers = _matching(fs, run, files)
            if hashers is None:
                raise DamagedError(f"run {run!r}: its segments in {bucket.url} do not add up to the files "
                                   "its head says; record into another run")
        return {"segments": count, "etag": etag, "files": hashers, "verify": True}

    def sender(self, recorder, start):
        sender = Sender(recorder, self.bucket, start)
        with _LOCK:
            _SENDERS.append(sender)
        _start()
        return sender


def _last_files(bucket, run, count):
    from ._mirror import _one

    return _one(bucket, run, count - 1).files


def _matching(fs, run, files):
    """``{file: [size, xxh3 running]}`` of the copy's files where each begins
    with what the bucket's ``files`` say; None where one does not."""
    out = {}
    for name, (size, want) in files.items():
        hasher = xxhash.xxh3_64()
        got = _hash_range(fs, ("runs", run, *name.split("/")), 0, size, hasher)
        if got != size or hasher.intdigest() != want:
            return None
        out[name] = [size, hasher]
    return out


def _hash_range(fs, parts, start, stop, hasher) -> int:
    """Bytes ``start``..``stop`` of a file into ``hasher``, read in chunks; how many there were."""
    at = start
    while at < stop:
        try:
            data = fs.read_range(parts, min(READ_CHUNK, stop - at), at)
        except FileNotFoundError:
            break
        if not data:
            break
        hasher.update(data)
        at += len(data)
    return at - start


def _clear(fs, run):
    """Empty the copy's run folder of its files (the lock stays: it is held)."""
    for sub in ((), ("series",)):
        try:
            listed = fs.list(("runs", run, *sub))
        except (OSError, Exception):
            continue
        for name, kind in listed:
            if kind == "file" and name != "lock":
                fs.remove(("runs", run, *sub, name))


class Sender:
    """One run's uploads: what the bucket holds (``files``: each file's size
    and running xxh3 there; ``n``, the next segment's number; ``etag``, the
    head's), and how far the local copy's commits are (``local``, counted
    by the Recorder's ``committed``) against what was sent (``sent``)."""

    def __init__(self, recorder, bucket, start):
        self.recorder, self.bucket, self.run = recorder, bucket, recorder.run
        self.writer = secrets.token_hex(8)
        self.n, self.etag, self.files = start["segments"], start["etag"], start["files"]
        self.verify = start.get("verify", False)  # the log checked against the bucket's once
        self.seq = 0
        self.local = 1  # the copy holds something the bucket does not (its summary, at least)
        self.sent = 0
        self.summary = None  # the last summary sent (bytes) and as read
        self.parsed = None
        self.log_cut = None  # where a rewind cut the log (Recorder.rewind), until sent from there
        self.cuts = 0  # rewinds so far
        self.open = True
        self.pid = os.getpid()
        self.last_seal = clock()  # the first segment too waits SEAL_S (or a flush): a short run sends one
        self.last_head = clock()
        self.pause_until = 0.0
        self.pauses = 0
        self.failures = 0  # failed attempts so far; a waiter raises the one after its wait began
        self.error = None  # the last failure
        self.fenced = None
        self.waiting = 0
        self.state = threading.Condition(fork_safe(threading.Lock()))
        self.busy = fork_safe(threading.Lock())  # one upload of the run at a time

    # -- what the Recorder says ---------------------------------------------------------

    def committed(self):
        """A commit of the local copy (under the Recorder's flush lock)."""
        self.local += 1

    def rewound(self, log_bytes):
        """The local log was cut back to ``log_bytes`` (under the flush lock)."""
        self.log_cut = log_bytes if self.log_cut is None else min(self.log_cut, log_bytes)
        self.cuts += 1
        self.local += 1

    def wait(self, closing=False):
        """Return once the bucket holds what the local copy held when called
        (``closing``: and let the run go); raise what stopped that."""
        with self.state:
            target, failures = self.local, self.failures
            self.waiting += 1
        _WAKE.set()
        try:
            with self.state:
                while self.sent < target and self.fenced is None and self.failures == failures:
                    self.state.wait(TICK_S)
                if self.fenced is not None:
                    raise self.fenced
                if self.sent < target:
                    raise self.error
        finally:
            with self.state:
                self.waiting -= 1
            if closing:
                self.let_go()

    def let_go(self):
        self.open = False
        with _LOCK:
            if self in _SENDERS:
                _SENDERS.remove(self)

    # -- the uploader's ------------------------------------------------------------------

    def tick(self, now):
        if self.pid != os.getpid() or self.fenced is not None:
            return
        if not self.open and self.local == self.sent:  # closed, and all of it sent
            self.let_go()
            return
        urgent = self.waiting > 0
        if not urgent and now < self.pause_until:
            return
        if self.local != self.sent:
            behind = self.recorder._log_bytes - self.files.get(LOG, (0,))[0]
            if urgent or now - self.last_seal >= SEAL_S or behind >= SEAL_BYTES:
                self._attempt(self._send, now)
        elif self.open and now - self.last_head >= HEARTBEAT_S:
            self._attempt(self._head, now)

    def _attempt(self, step, now):
        with self.busy:
            try:
                step()
            except Fenced as e:
                self.fenced = e
                self.recorder._fail(e)
            except (BucketError, DamagedError, OSError) as e:
                self.error = e
                self.pause_until = now + min(PAUSE_CAP_S, PAUSE_S * 2 ** self.pauses)
                self.pauses += 1
                with self.state:
                    self.failures += 1
                    self.state.notify_all()
                return
            self.pauses = 0
            self.pause_until = 0.0

    def _send(self):
        """Seal and commit segments until the bucket holds what the copy held when this began."""
        while True:
            with self.recorder._flush_lock:
                local, cuts = self.local, self.cuts
                plan = self._plan()
            if plan is None:
                self._sent(local)
                return
            entries, summary, files, done = plan
            self._commit(entries, summary, files, cuts)
            if done:
                self._sent(local)
                return

    def _sent(self, local):
        self.last_seal = clock()
        with self.state:
            self.sent = max(self.sent, local)
            self.state.notify_all()

    def _plan(self):
        """Under the Recorder's flush lock (the copy as one commit left it):
        ``(entries, summary or b"", files after, done)`` of the next segment,
        or None when the bucket holds it all."""
        rec = self.recorder
        fs, parts = rec._fs, rec._parts
        raw = fs.read_range((*parts, SUMMARY), _summary.MAX_BYTES + 1)
        summary = _summary.parse(raw)
        want = {LOG: summary["log_bytes"], INDEX: summary["index"][0]}
        sums = {INDEX: summary["index"][1]}
        for name, (size, h) in summary["series"].items():
            f = _series_file(name)
            want[f], sums[f] = size, h
        files = {f: [s, h.copy()] for f, (s, h) in self.files.items()}
        log = files.get(LOG)
        if log is not None and (self.verify or (self.log_cut is not None and self.log_cut < log[0])):
            keep = log[0] if self.log_cut is None else min(log[0], self.log_cut)
            hasher = xxhash.xxh3_64()
            if self.verify:  # the copy's log begins with what the bucket holds, or is sent whole
                whole = _hash_range(fs, (*parts, LOG), 0, log[0], hasher) == log[0]
                if not whole or hasher.intdigest() != log[1].intdigest():
                    keep, hasher = 0, xxhash.xxh3_64()
                elif keep < log[0]:
                    hasher = xxhash.xxh3_64()
                    _hash_range(fs, (*parts, LOG), 0, keep, hasher)
            else:
                _hash_range(fs, (*parts, LOG), 0, keep, hasher)
            files[LOG] = [keep, hasher]
        entries, room = [], _segments.SEGMENT_BYTES
        for f in sorted(set(want) | set(files), key=lambda f: (f != LOG, f == INDEX, f)):
            size = want.get(f, 0)
            have, hasher = files.get(f, (0, None))
            if hasher is None:
                hasher = xxhash.xxh3_64()
            if have > size or (f in sums and have and not _goes_on(fs, (*parts, *f.split("/")), have, size,
                                                                   hasher, sums[f])):
                have, hasher = 0, xxhash.xxh3_64()  # cut or written again: sent whole
                if f in files:
                    entries.append((f, 0, b""))
                    files[f] = [0, hasher]
            if have == size:
                if size == 0:
                    files.pop(f, None)
                continue
            take = min(size - have, room)
            if take == 0:
                break
            data = fs.read_range((*parts, *f.split("/")), take, have)
            if len(data) != take:
                raise DamagedError(f"{fs.where((*parts, *f.split('/')))} holds fewer bytes than its run's "
                                   f"summary counts ({have + len(data)} of {size}); resume the run to repair it")
            hasher.update(data)
            if entries and entries[-1][0] == f and entries[-1][1] == 0 and not entries[-1][2]:
                entries[-1] = (f, 0, data)
            else:
                entries.append((f, have, data))
            files[f] = [have + take, hasher]
            room -= take
        done = all(files.get(f, (0,))[0] == size for f, size in want.items())
        if not entries and raw == self.summary:
            return None
        if done:
            self._to_send = (raw, summary)
        return entries, raw if done else b"", files, done

    def _commit(self, entries, summary, files, cuts=None):
        """Segment ``n``, then the head counting it. ``cuts``: the rewinds
        the plan saw (one made since is sent from by the next plan)."""
        bucket, run, n = self.bucket, self.run, self.n
        listed = {f: [s, h.intdigest()] for f, (s, h) in files.items() if s}
        data = _segments.encode(run, n, self.writer, entries, summary, listed)
        key = _segments.segment_key(run, n)
        if not bucket.create(key, data):
            raise Fenced(self._fenced_text(f"its segment {n} ({bucket.where(key)}) was made by another "
                                           "writer first"), url=bucket.url, key=key)
        with self.recorder._flush_lock:
            self.n, self.files, self.verify = n + 1, files, False
            if self.cuts == cuts:
                self.log_cut = None
        if summary:
            self.summary, self.parsed = self._to_send
        self._head()

    def _head(self):
        """The head replaced: how far the run is, by this writer."""
        bucket, key = self.bucket, _segments.head_key(self.run)
        parsed = self.parsed
        listed = {f: [s, h.intdigest()] for f, (s, h) in self.files.items() if s}
        for _ in range(8):
            self.seq += 1
            data = _segments.encode_head(self.run, self.writer, self.seq, self.n,
                                         parsed["state"] if parsed else "running", wall(), listed, parsed)
            try:
                self.etag = bucket.replace_if(key, data, self.etag)
                self.last_head = clock()
                return
            except Fenced:
                try:
                    now, etag = bucket.get_if_changed(key, None, _segments.HEAD_LIMIT)
                    head = _segments.decode_head(now, self.run)
                except FileNotFoundError:
                    head, etag = None, None
                except _segments.Broken:
                    head = None
                if head is not None and head["writer"] != self.writer and head["segments"] >= self.n:
                    raise Fenced(self._fenced_text(f"its head ({bucket.where(key)}) counts {head['segments']} "
                                                   f"segments, written by another writer"),
                                 url=bucket.url, key=key) from None
                self.etag = etag  # a writer behind this one wrote it: replaced
        raise BucketError(f"{bucket.where(key)} kept changing under this writer; try again", url=bucket.url, key=key)

    def _fenced_text(self, what):
        rec = self.recorder
        return (f"run {self.run!r} in {self.bucket.url} was taken by another writer: {what}. Another "
                f"Recorder (another process or machine, with resume=True) records it now, so this one is "
                f"fenced out and sends nothing more. Its facts are kept in its local copy, {rec.folder}; "
                f"record on into another run, e.g. Recorder(store, run={self.run + '-2'!r})")


def _series_file(name):
    from ._log import series_file_name

    return f"series/{series_file_name(name)}"


def _goes_on(fs, parts, have, size, hasher, want) -> bool:
    """Whether the file's bytes ``have``..``size`` added to ``hasher`` (what
    was sent) give ``want`` (the summary's checksum of the whole file)."""
    h = hasher.copy()
    if _hash_range(fs, parts, have, size, h) != size - have:
        return False
    return h.intdigest() == want


# -- the one uploader thread of a process ------------------------------------------------

_SENDERS: list = []
_LOCK = fork_safe(threading.Lock())
_WAKE = threading.Event()
_thread = None


def _loop():
    while True:
        _WAKE.wait(TICK_S)
        _WAKE.clear()
        with _LOCK:
            senders = list(_SENDERS)
        now = clock()
        for sender in senders:
            try:
                sender.tick(now)
            except Exception as e:  # kept for the Recorder's owner; the thread goes on
                sender.error = e


def _start():
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_loop, name="somatize-bucket-upload", daemon=True)
        _thread.start()


def _forget_after_fork():
    """A forked child (a DataLoader worker) uploads nothing of its parent's runs."""
    global _thread, _WAKE
    _SENDERS.clear()
    _thread = None
    _WAKE = threading.Event()


os.register_at_fork(after_in_child=_forget_after_fork)
