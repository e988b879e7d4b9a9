"""A bucket's runs read through a local mirror: every reader of the record
reads a bucket store as it reads a store on disk.

The rule kept here: the bucket is asked as little as a reader needs, and
every byte taken from it proves itself before a reader sees it. A run's
head is polled with a conditional GET (304: nothing changed, nothing more
asked); a listing of every run is one LIST of ``heads/``, whose etags say
which heads changed, and only those are fetched. Segments never change
once made: each is fetched once, checked (``_segments.decode``: its run, its
number, its body's hash, its files' sizes) and written into the mirror's
files at its offsets, then kept forever. The mirror is a local store
(``$SOMATIZE_CACHE/mirror/<sha256(url)[:16]>/store``, in the format every
reader reads), so ``runs``, ``curve``, ``facts``, ``compare`` and ``somatize
runs`` read it unchanged, verifying the series and index against the
summary as they do on disk.

A run's state is its last summary's, with one correction a lock makes on
disk: a run whose writer's head says "running" but was last replaced more
than ``STALE_S`` seconds ago (by the writer's clock against this one's) is
interrupted, its ``cause`` saying so; the writer replaces its head at least
every ``_upload.HEARTBEAT_S``. Damage in the bucket (a segment missing, or
one that does not prove itself) raises ``DamagedError`` naming its key from
a query of that run, and lists the run as damaged.

What the mirror holds of each run (``seen/<run>.json``: the head's etag,
the segments written, the files' sizes) is shared by every process of the
machine that reads the bucket: one of them at a time writes it
(``_Lock``), and a process finds what another fetched.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from pathlib import Path

import orjson

from .._base import files
from .._base.backend import LocalBackend
from .._base.bucket import is_url
from .._base.errors import DamagedError
from .._base.forks import fork_safe
from .._store.names import is_run_name
from . import _segments, _summary
from ._runs import ELSEWHERE, INDEX, LOG, SUMMARY
from ._segments import Broken

CACHE_ENV = "SOMATIZE_CACHE"
STALE_S = 60.0  # seconds a running run's head may go unreplaced before it reads interrupted
FETCHERS = 16  # requests in flight at once
BATCH = 64  # segments fetched, then written, at a time
STALE = ("its writer stopped replacing the run's head in the bucket (killed, cut off, or its "
         "machine stopped); the run stops at its last segment there")
clock = time.time  # the reader's clock, against a head's "updated" (tests set it)


def cache_root() -> Path:
    """``$SOMATIZE_CACHE``, else ``~/.cache/somatize``: where a machine keeps
    its copies of bucket stores (asked each time: a test sets it)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "somatize").absolute()


def home_of(kind: str, url: str) -> Path:
    """``<cache>/<kind>/<sha256(url)[:16]>``: a bucket's mirror or its write-ahead copies."""
    return cache_root() / kind / hashlib.sha256(url.encode()).hexdigest()[:16]


def bucket_of(store):
    """The ``Bucket`` of a Store in a bucket; None for one on disk (or a path)."""
    return getattr(store, "bucket", None)


def damaged(bucket, key, why, run) -> DamagedError:
    return DamagedError(
        f"{bucket.where(key)} {why}: run {run!r} is damaged in the bucket {bucket.url}. What came "
        "before that key reads as it was; restore the key from a copy, or delete the run"
    )


# -- writing segments into a local run ---------------------------------------------


class _LocalGap(Exception):
    """A local file is shorter than what was written into it: the copy is damaged; fetch it again."""


class Filler:
    """Segments written, in order, into the run ``run`` of the local store
    ``fs`` (a mirror, or a write-ahead copy being made from its bucket):
    ``file := file[:offset] + bytes`` for each entry, then its summary.
    ``sizes``: each file's size as the segments so far left it."""

    def __init__(self, fs: LocalBackend, run: str, sizes: dict):
        self.fs, self.run, self.sizes = fs, run, dict(sizes)
        self.summary = b""  # the last summary written
        self._handles: dict = {}
        fs.make(("runs", run, "series"))

    def apply(self, seg: _segments.Segment) -> None:
        """Write ``seg``; ``Broken`` where it does not follow the ones before
        (an offset past a file's end, sizes other than its own header says)."""
        sizes = self.sizes
        for name, offset, data in seg.entries:
            have = sizes.get(name, 0)
            if offset > have:
                raise Broken(f"writes {name} from byte {offset}, past the {have} the segments before it hold")
            h = self._handle(name)
            on_disk = os.fstat(h).st_size
            if on_disk < have:
                raise _LocalGap(name)
            if on_disk > offset:
                self.fs.truncate(h, offset)
            self.fs.append(h, [data])
            sizes[name] = offset + len(data)
        said = {f: v[0] for f, v in seg.files.items() if v[0]}
        held = {f: s for f, s in sizes.items() if s}
        if said != held:
            raise Broken(f"says its run's files hold {said}; written, they hold {held}")
        if seg.summary:
            try:
                summary = _summary.parse(seg.summary)
            except _summary.Broken as e:
                raise Broken(f"holds a summary that does not read ({e})") from None
            counted = {LOG: summary["log_bytes"], INDEX: summary["index"][0]}
            counted.update({_series_file(n): v[0] for n, v in summary["series"].items()})
            wrong = [f for f, n in counted.items() if sizes.get(f, 0) != n]
            if wrong:
                raise Broken(f"holds a summary counting {wrong[0]} other than its files hold")
            self.summary = seg.summary

    def _handle(self, name):
        h = self._handles.get(name)
        if h is None:
            h = self._handles[name] = self.fs.open_append(("runs", self.run, *name.split("/")))[0]
        return h

    def close(self):
        for h in self._handles.values():
            self.fs.close(h)
        self._handles.clear()


def _series_file(name: str) -> str:
    from ._log import series_file_name

    return f"series/{series_file_name(name)}"


_FETCH = None
_FETCH_LOCK = fork_safe(threading.Lock())


def _pool():
    """The threads that fetch segments (made on first use, anew in a forked child)."""
    global _FETCH
    with _FETCH_LOCK:
        if _FETCH is None:
            from concurrent.futures import ThreadPoolExecutor

            _FETCH = ThreadPoolExecutor(FETCHERS, thread_name_prefix="somatize-bucket-fetch")
        return _FETCH


def _forget_pool():
    global _FETCH
    _FETCH = None


os.register_at_fork(after_in_child=_forget_pool)


def fetched(bucket, run, start, stop):
    """Segments ``start`` .. ``stop - 1`` of ``run``, in order, each checked
    (``DamagedError`` naming the key of one missing or not proving itself),
    fetched ``FETCHERS`` at a time."""
    pool = _pool() if stop - start > 1 else None
    for at in range(start, stop, BATCH):
        numbers = range(at, min(stop, at + BATCH))
        def one(n):
            return _one(bucket, run, n)

        yield from (pool.map(one, numbers) if pool else map(one, numbers))


def _one(bucket, run, n):
    key = _segments.segment_key(run, n)
    try:
        data = bucket.get(key, _segments.SEGMENT_LIMIT)
    except FileNotFoundError:
        raise damaged(bucket, key, "is missing (its run's head counts it)", run) from None
    try:
        return _segments.decode(data, run, n)
    except Broken as e:
        raise damaged(bucket, key, str(e), run) from None


def download(bucket, run, count, fs, sizes=None, start=0):
    """Segments ``start`` .. ``count - 1`` of ``run`` written into the run's
    folder of the local store ``fs``; the ``Filler`` that wrote them (its
    sizes and last summary)."""
    filler = Filler(fs, run, sizes or {})
    try:
        for seg in fetched(bucket, run, start, count):
            try:
                filler.apply(seg)
            except Broken as e:
                raise damaged(bucket, _segments.segment_key(run, seg.n), str(e), run) from None
    finally:
        filler.close()
    return filler


# -- the mirror ----------------------------------------------------------------------


class _Lock:
    """One writer of a mirror at a time: the threads of this process (a
    lock) and the processes of this machine (a POSIX record lock, which a
    forked child does not inherit: a DataLoader worker holds nothing)."""

    def __init__(self, path: Path):
        self.path = path
        self._threads = fork_safe(threading.Lock())

    def __enter__(self):
        self._threads.acquire()
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
        except BaseException:
            if getattr(self, "_fd", None) is not None:
                os.close(self._fd)
                self._fd = None
            self._threads.release()
            raise
        return self

    def __exit__(self, *exc):
        fd, self._fd = self._fd, None
        os.close(fd)  # closing lets the record lock go
        self._threads.release()


class Mirror:
    """The runs of ``bucket`` in a local store (``store``), fetched as readers ask."""

    def __init__(self, bucket):
        from .._store.store import Store

        self.bucket = bucket
        self.home = home_of("mirror", bucket.url)
        self.root = self.home / "store"
        self._seen_dir = self.home / "seen"
        for folder in (self.home, self._seen_dir):
            folder.mkdir(parents=True, exist_ok=True)
        _note_url(self.home, bucket.url)
        Store(self.root)  # made where missing
        self.store = Store(self.root, readonly=True)
        self.fs = LocalBackend(self.root)
        self._lock = _Lock(self.home / "lock")
        self._seen: dict = {}  # run -> what seen/<run>.json said last

    def __repr__(self):
        return f"Mirror({self.bucket.url!r} at {str(self.root)!r})"

    # -- what the mirror holds of a run --------------------------------------------
    #
    # seen/<run>.json: {"etag": the head's, "segments": written, "sizes": {file: size},
    #   "updated": the head's, "state": the run's last summary's, "shown": "as-is" or
    #   "stale" (its summary.json here says interrupted: its head went unreplaced)};
    # seen/<run>.summary: that last summary as the bucket holds it.

    def _seen_of(self, run, fresh=False) -> dict:
        seen = None if fresh else self._seen.get(run)
        if seen is None:
            try:
                seen = orjson.loads((self._seen_dir / f"{run}.json").read_bytes())
                if not (isinstance(seen, dict) and isinstance(seen.get("segments"), int)
                        and isinstance(seen.get("sizes"), dict)):
                    seen = None
            except (OSError, orjson.JSONDecodeError):
                seen = None
            seen = seen or {"etag": None, "segments": 0, "sizes": {}, "updated": 0, "state": None, "shown": None}
            self._seen[run] = seen
        return seen

    def _keep_seen(self, run, seen):
        _write_over(self._seen_dir / f"{run}.json", orjson.dumps(seen))
        self._seen[run] = seen

    def _folder(self, run) -> str:
        return os.path.join(self.root, "runs", run)  # as the listing joins it (_runs._row)

    # -- syncing ---------------------------------------------------------------------

    def run(self, run: str) -> None:
        """Bring run ``run`` up to its head: one conditional GET, then its new
        segments. ``DamagedError`` naming the key where the bucket's run is
        damaged; a run the bucket lacks is dropped from the mirror."""
        problem = self._sync(run)
        if problem is not None:
            raise problem

    def every_run(self) -> None:
        """Bring every run up to its head: one LIST of ``heads/``; the heads
        whose etag changed are fetched (in parallel); a run damaged in the
        bucket lists as damaged, naming the key."""
        listed = {}
        for key, _size, etag in self.bucket.list("heads", tags=True):
            run = _segments.run_of_head(key)
            if run is not None and is_run_name(run):
                listed[run] = etag
        known = {p.name[:-5] for p in self._seen_dir.glob("*.json")} | set(self._seen)
        for run in known - set(listed):
            self._drop(run)
        changed = []
        for run, etag in listed.items():
            seen = self._seen_of(run)
            if seen.get("etag") != etag or ELSEWHERE.get(self._folder(run)):
                changed.append(run)
            else:
                self._show(run, seen)  # no request: its liveness moves with the clock
        if changed:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(FETCHERS, len(changed)), thread_name_prefix="somatize-bucket-heads") as pool:
                list(pool.map(self._sync, changed))

    def _sync(self, run):
        """Sync ``run``; the ``DamagedError`` a query of it raises, or None."""
        bucket, key = self.bucket, _segments.head_key(run)
        seen = self._seen_of(run)
        damaged_before = bool(ELSEWHERE.get(self._folder(run)))
        try:  # damaged at the last look: read whole again (a 304 would repair nothing)
            got = bucket.get_if_changed(key, None if damaged_before else seen.get("etag"), _segments.HEAD_LIMIT)
        except FileNotFoundError:
            self._drop(run)
            return None
        except DamagedError as e:  # a head too large to be one
            return self._damage(run, e)
        if got is None:  # 304: as it was
            self._show(run, seen)
            return None
        data, etag = got
        try:
            head = _segments.decode_head(data, run)
        except Broken as e:
            return self._damage(run, damaged(bucket, key, f"is not a head of ours ({e})", run))
        try:
            self._advance(run, head, etag)
        except DamagedError as e:
            return self._damage(run, e)
        if damaged_before:
            ELSEWHERE.pop(self._folder(run), None)
            with self._lock:
                _touch_summary(self.fs, run)
            self._show(run, self._seen_of(run))
        return None

    def _advance(self, run, head, etag):
        """Write the segments the mirror lacks, up to ``head``'s count: each
        batch fetched with no lock held (a listing's runs are fetched side by
        side), then written under the mirror's lock from where the mirror
        stands then (another process may have written them first)."""
        count = head["segments"]
        while True:
            seen = self._seen_of(run, fresh=True)
            start = seen["segments"]
            if start >= count:  # as far as this head, or past it (another process read a later one)
                break
            stop = min(count, start + BATCH)
            got = list(fetched(self.bucket, run, start, stop))
            with self._lock:
                seen = self._seen_of(run, fresh=True)
                if seen["segments"] != start:  # another process wrote meanwhile: look again
                    continue
                filler = Filler(self.fs, run, seen["sizes"])
                try:
                    for seg in got:
                        try:
                            filler.apply(seg)
                        except Broken as e:
                            raise damaged(self.bucket, _segments.segment_key(run, seg.n), str(e), run) from None
                except _LocalGap:  # the mirror's copy lost bytes: fetched again whole
                    self._remove_folder(run)
                    self._keep_seen(run, dict(seen, segments=0, sizes={}, etag=None, state=None, shown=None))
                    continue
                finally:
                    filler.close()
                done = stop == count
                seen = dict(seen, etag=etag if done else None, segments=stop, sizes=filler.sizes,
                            updated=head["updated"])
                if filler.summary:
                    _write_over(self._seen_dir / f"{run}.summary", filler.summary)
                    _replace(self.fs, run, SUMMARY, filler.summary)
                    seen.update(state=_summary.parse(filler.summary)["state"], shown="as-is")
                self._keep_seen(run, seen)
            if done:
                break
        if seen["segments"] == count and seen.get("etag") != etag:  # written by another process: this head seen
            with self._lock:
                seen = self._seen_of(run, fresh=True)
                if seen["segments"] == count:
                    seen = dict(seen, etag=etag, updated=head["updated"])
                    self._keep_seen(run, seen)
        self._show(run, seen)

    def _show(self, run, seen):
        """The run's state as its summary and head say: "running" and its
        head replaced within ``STALE_S``: alive, elsewhere (``ELSEWHERE``:
        its lock here is nobody's); longer ago: interrupted, its summary
        here saying so until its writer replaces the head again."""
        folder = self._folder(run)
        running = seen.get("state") == "running"
        stale = running and clock() - seen.get("updated", 0) > STALE_S
        if running and not stale:
            ELSEWHERE[folder] = ""
        elif not ELSEWHERE.get(folder):
            ELSEWHERE.pop(folder, None)
        shown = "stale" if stale else "as-is"
        if seen.get("state") is None or seen.get("shown") == shown:
            return
        with self._lock:
            seen = self._seen_of(run, fresh=True)
            if seen.get("shown") == shown or seen.get("state") is None:
                return
            try:
                raw = (self._seen_dir / f"{run}.summary").read_bytes()
            except OSError:
                return
            if stale:
                summary = _summary.parse(raw)
                summary["state"], summary["cause"] = "interrupted", STALE
                raw = _summary.dumps(summary)
            _replace(self.fs, run, SUMMARY, raw)
            self._keep_seen(run, dict(seen, shown=shown))

    def _damage(self, run, error):
        folder = self._folder(run)
        if ELSEWHERE.get(folder) != str(error):
            ELSEWHERE[folder] = str(error)
            with self._lock:
                self.fs.make(("runs", run))  # listed, as damaged, even before a byte of it came
                _touch_summary(self.fs, run)
        return error

    def _drop(self, run):
        """The bucket holds no run ``run`` (any more): nor does the mirror."""
        ELSEWHERE.pop(self._folder(run), None)
        with self._lock:
            self._remove_folder(run)
            for name in (f"{run}.json", f"{run}.summary"):
                try:
                    os.unlink(self._seen_dir / name)
                except FileNotFoundError:
                    pass
            self._seen.pop(run, None)

    def _remove_folder(self, run):
        import shutil

        self._seen.pop(run, None)
        folder = Path(self._folder(run))
        if folder.is_dir() and not folder.is_symlink():
            trash = self.root / "tmp" / files.trash_name(run)
            os.replace(folder, trash)
            shutil.rmtree(trash, ignore_errors=True)


def _write_over(path: Path, data: bytes):
    """``path`` replaced by ``data`` at once (not synced: the cache is fetched again)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _replace(fs, run, name, data):
    """The file ``name`` of the run replaced at once (a reader sees the old
    bytes or the new); not synced: the mirror is a copy, fetched again."""
    staged = fs.stage(("runs", run, name))
    try:
        fs.append(staged, [data])
    finally:
        fs.close(staged)
    fs.place(staged)


def _touch_summary(fs, run):
    """The run's summary.json made a new file of the same bytes: a listing
    that kept its row by that file's identity reads it again."""
    try:
        raw = fs.read_range(("runs", run, SUMMARY), _summary.MAX_BYTES)
    except (FileNotFoundError, files.Refused):
        return
    _replace(fs, run, SUMMARY, raw)


def _note_url(home: Path, url: str):
    """``home/url``: which bucket a folder of the cache copies, for a person looking."""
    note = home / "url"
    if not note.exists():
        note.write_text(url + "\n")


_MIRRORS: dict = {}
_MIRRORS_LOCK = fork_safe(threading.Lock())


def mirror_of(bucket) -> Mirror:
    """The mirror of ``bucket``'s URL in this process (and this cache folder)."""
    key = (bucket.url, str(cache_root()))
    with _MIRRORS_LOCK:
        found = _MIRRORS.get(key)
        if found is None:
            found = _MIRRORS[key] = Mirror(bucket)
        return found


def check(store) -> tuple[list[str], list[str]]:
    """``(problems, notes)`` of the runs of a Store in a bucket, as
    ``somatize check`` says them: every run brought into this machine's
    mirror (each segment checked as it is fetched: one missing or damaged
    is a problem naming its key), then each run's files read there as on
    disk (``_check.check_runs``: every block, the index and the series
    against the summary)."""
    from ._check import check_runs

    mirror = mirror_of(store.bucket)
    mirror.bucket = store.bucket
    mirror.every_run()
    below = os.path.join(mirror.root, "runs", "")
    damaged_there = {folder[len(below):]: why for folder, why in list(ELSEWHERE.items())
                     if why and folder.startswith(below)}
    problems = [f"run {run!r}: {why}" for run, why in sorted(damaged_there.items())]
    more, notes = check_runs(mirror.root)
    said = f" (read in this machine's copy of {store.bucket.url}'s runs, {mirror.root})"
    problems += [p + said for p in more if not any(p.startswith(f"run {run!r}") for run in damaged_there)]
    return problems, notes


def _written_here(bucket, run):
    """The local copy (a Store) of ``run`` where a live Recorder of this
    process writes it into ``bucket``: a query reads what was handed over
    there, unsent facts too, as it reads a run on disk."""
    from ._runs import LIVE, LIVE_LOCK

    with LIVE_LOCK:
        live = list(LIVE.values())
    for rec in live:
        sender = rec._sender
        if sender is not None and rec.run == run and sender.bucket.url == bucket.url and not rec._closed:
            from .._store.store import as_store

            return as_store(rec.root)
    return None


def reading(store, run=None, sync=True):
    """What a reader reads for ``store``: itself, or for a Store in a bucket
    its mirror's local Store, brought up to the bucket first (``run``: that
    run alone, one conditional GET; None: every run, one LIST; ``sync``
    False: as it is). A URL is opened as the Store it names."""
    bucket = bucket_of(store)
    if bucket is None:
        if is_url(store):
            from .._store.store import as_store

            store = as_store(store, readonly=True)  # a reader makes nothing there
            bucket = bucket_of(store)
        if bucket is None:
            return store
    if isinstance(run, str):
        writing = _written_here(bucket, run)
        if writing is not None:  # a live Recorder of this process writes it: its copy, as on disk
            return writing
    mirror = mirror_of(bucket)
    mirror.bucket = bucket  # the caller's (each Bucket of a URL is the same bucket; it counts its own requests)
    if not sync:
        return mirror.store
    if run is None:
        mirror.every_run()
    elif isinstance(run, str) and is_run_name(run):
        mirror.run(run)
    return mirror.store

