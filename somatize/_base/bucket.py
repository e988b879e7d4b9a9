"""``Bucket``: the one object-store client of somatize (obstore, the Python
face of Rust's ``object_store``), opened from a URL:

- ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix``:
  credentials, region, endpoint and account from the environment and the
  client's usual configuration (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
  ``AWS_ALLOW_HTTP``, ``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME``…).
  A URL holding credentials (``s3://key:secret@bucket``) or a query is
  refused: nothing secret is taken, kept, written or shown (``repr`` and
  every message name the URL only).
- ``memory://name/prefix``: bytes in this process, one store per name (two
  ``Bucket("memory://x")`` share them, as two processes share a bucket).

Keys are ``/``-joined parts below the prefix (a tuple of parts is taken
too). A key with an empty part, ``.``, ``..``, a backslash or a NUL is
refused (``SomatizeValueError``): nothing outside the prefix is ever
reached, and a listing skips (never reads) whatever it finds there that
is no such key. Sizes are bounded: ``get`` asks the size first and refuses
past ``limit`` (``DamagedError`` naming URL and key) before reading a byte.

Every request is retried on what may pass (5xx, timeouts, dropped
connections), ``attempts`` times in all with exponential backoff and
jitter (``sleep`` injectable, ``backoff`` the first wait, doubled up to
``backoff_cap``), then ``BucketError`` names the URL, the key, the attempts
and the last answer. An answer that will not pass (403, 400…) is not
retried. obstore's own retries are off (one place counts). A write whose
answer was lost and that meets a conflict when retried (412) reads the
key back: its own bytes there mean the first attempt landed (so writers
must make their bytes unique: a head carries its writer and sequence).

Conditional writes (S3, GCS and Azure have them since 2024): ``create``
is create-if-absent (False: already there, the deduplication of objects
named by content); ``replace_if`` replaces only the version whose etag it
was handed, and raises ``Fenced`` when another writer got there first.

``requests`` counts the requests made, by method, and ``sent``/``received``
the bytes of bodies (for bench/bench_bucket.py). obstore is not fork-safe:
its runtime's threads stay in the parent, and a request from a forked child
would wait forever; so a bucket asked in a process forked from one that had
used obstore raises ``BucketError`` saying to start it with ``spawn``
(a forked DataLoader worker that never touches the bucket is fine). A
``memory://`` bucket does not cross processes at all (a child has a copy).
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from urllib.parse import urlsplit

from .errors import (
    BucketError,
    DamagedError,
    Fenced,
    MissingExtra,
    SomatizeError,
    SomatizeTypeError,
    SomatizeValueError,
)

SCHEMES = ("s3", "gs", "az", "memory")
_URL = re.compile(r"^(s3|gs|az|memory)://", re.IGNORECASE)
_STATUS = re.compile(r"status code: (\d{3})")
_ALLOW_HTTP = {"s3": "AWS_ALLOW_HTTP", "gs": "GOOGLE_ALLOW_HTTP", "az": "AZURE_ALLOW_HTTP"}
ATTEMPTS = 5
BACKOFF_S = 0.2
BACKOFF_CAP_S = 5.0
TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0
MAX_KEY = 1024  # bytes of a whole key, prefix included (S3's bound)
_memory = {}  # name -> MemoryStore, shared by every Bucket of that name in this process
_memory_lock = threading.Lock()
_runtime_pid = None  # the process where obstore's runtime started (it does not survive a fork)


def is_url(text) -> bool:
    """Whether ``text`` names a bucket (``s3://``, ``gs://``, ``az://``, ``memory://``)."""
    return isinstance(text, str) and _URL.match(text) is not None


def _obstore():
    try:
        import obstore
        import obstore.exceptions
        import obstore.store
    except ImportError:
        raise MissingExtra("a store in a bucket (s3://, gs://, az://, memory://)", "cloud", "obstore") from None
    return obstore


def key_parts(key) -> tuple[str, ...]:
    """``key`` (a ``/``-joined str or a tuple of parts) as its parts, or
    ``SomatizeValueError`` where one would leave the prefix or is empty."""
    parts = tuple(key.split("/")) if isinstance(key, str) else tuple(key)
    for part in parts:
        if not isinstance(part, str):
            raise SomatizeTypeError(f"a bucket key is a str such as 'objects/ab/cd…'; got a part {part!r:.60}")
        if part in ("", ".", "..") or "\\" in part or "\x00" in part:
            raise SomatizeValueError(
                f"the bucket key {'/'.join(map(str, parts))!r:.300} is refused: its part {part!r:.40} "
                "would be empty or leave the store's prefix. Write keys as 'objects/ab/cd…': parts "
                "joined by '/', none empty, '.' or '..'"
            )
    if not parts:
        raise SomatizeValueError("an empty bucket key is refused; name a key below the prefix, e.g. 'names/x'")
    return parts


class Bucket:
    """Keys and their bytes below ``url``'s prefix; see the module docstring.

    ``attempts``: requests made at most for one call (1: no retry);
    ``backoff``/``backoff_cap``: the first wait and the longest, in
    seconds; ``sleep``: what waits (tests pass their own); ``timeout``: the
    longest one request may take, in seconds (``connect_timeout`` to connect)."""

    def __init__(self, url, *, attempts=ATTEMPTS, backoff=BACKOFF_S, backoff_cap=BACKOFF_CAP_S,
                 timeout=TIMEOUT_S, connect_timeout=CONNECT_TIMEOUT_S, sleep=time.sleep):
        if not isinstance(url, str):
            raise SomatizeTypeError(f"Bucket(url) takes a URL such as 's3://bucket/prefix'; got {type(url).__name__}")
        if not is_url(url):
            raise SomatizeValueError(
                f"{url!r:.200} is not a bucket URL; write s3://bucket/prefix, gs://bucket/prefix, "
                "az://container/prefix or memory://name/prefix"
            )
        split = urlsplit(url)
        scheme = split.scheme.lower()
        if "@" in split.netloc or split.query or split.fragment or split.password:
            raise SomatizeValueError(
                f"a bucket URL holds no credentials, query or fragment (got one starting "
                f"{scheme}://…); write {scheme}://bucket/prefix and give credentials through the "
                "environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, GOOGLE_SERVICE_ACCOUNT, "
                "AZURE_STORAGE_ACCOUNT_KEY…) or the client's usual configuration"
            )
        name = split.netloc
        path = split.path.strip("/")
        prefix = key_parts(path) if path else ()
        if not name or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise SomatizeValueError(
                f"the bucket URL {url!r:.200} names no bucket (or one with characters a bucket "
                f"name cannot have); write {scheme}://bucket/prefix"
            )
        if type(attempts) is not int or attempts < 1:
            raise SomatizeValueError(f"Bucket(attempts={attempts!r:.40}) takes an int >= 1 (1: no retry)")
        self.scheme, self.name, self.prefix = scheme, name, "/".join(prefix)
        self.url = f"{scheme}://{name}" + (f"/{self.prefix}" if self.prefix else "")
        self.attempts, self.backoff, self.backoff_cap, self.sleep = attempts, backoff, backoff_cap, sleep
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self.requests = {}  # method -> requests made (each attempt is one)
        self.sent = self.received = 0
        self._counting = threading.Lock()
        self._obs = _obstore()
        self._client, self._pid = None, None

    def __repr__(self):
        return f"Bucket({self.url!r})"

    def __getstate__(self):
        raise SomatizeTypeError(f"{self!r} is not pickled; pass its URL ({self.url!r}) and open it again")

    # ---- the client ------------------------------------------------------------

    def _store(self):
        """The obstore client, made on first use. In a process forked from one
        that had used obstore, ``BucketError`` (its runtime's threads did not
        cross the fork: a request would wait forever), ``memory://`` aside."""
        global _runtime_pid
        pid = os.getpid()
        if _runtime_pid is None:
            _runtime_pid = pid
        elif _runtime_pid != pid and self.scheme != "memory":
            raise BucketError(
                f"{self.url} cannot be reached from this process: it was forked (pid {pid}) from one "
                f"that had used a bucket (pid {_runtime_pid}), and the bucket client's threads do not "
                "cross a fork (a request would wait forever). Start processes that use a bucket with "
                "multiprocessing.get_context('spawn') or 'forkserver', or use it in the parent only",
                url=self.url,
            )
        if self._client is None or self._pid != pid:
            self._client, self._pid = self._open(), pid
        return self._client

    def _open(self):
        st = self._obs.store
        if self.scheme == "memory":
            with _memory_lock:
                found = _memory.get(self.name)
                if found is None:
                    found = _memory[self.name] = st.MemoryStore()
            return found
        options = {"timeout": f"{int(self.timeout * 1000)}ms",
                   "connect_timeout": f"{int(self.connect_timeout * 1000)}ms"}
        if os.environ.get(_ALLOW_HTTP[self.scheme], "").lower() in ("1", "true", "yes"):
            options["allow_http"] = True  # client_options replace the environment's; this one is kept
        kinds = {"s3": st.S3Store, "gs": st.GCSStore, "az": st.AzureStore}
        try:
            return kinds[self.scheme](self.name, client_options=options, retry_config={"max_retries": 0})
        except Exception as e:  # a configuration obstore refuses (no region, no account…)
            raise BucketError(
                f"{self.url} cannot be opened: {_first_line(e)}. Set the client's configuration in "
                "the environment (e.g. AWS_REGION, AWS_ENDPOINT_URL, AZURE_STORAGE_ACCOUNT_NAME)",
                url=self.url,
            ) from None

    def _path(self, key) -> str:
        parts = key_parts(key)
        path = "/".join((self.prefix, *parts) if self.prefix else parts)
        if len(path.encode()) > MAX_KEY:
            raise SomatizeValueError(f"the bucket key {path[:80]!r}… is longer than {MAX_KEY} bytes; shorten it")
        return path

    def where(self, key) -> str:
        """How ``key`` is named in a message: its URL."""
        return f"{self.url}/{'/'.join(key_parts(key))}"

    def _count(self, method, sent=0, received=0):
        with self._counting:
            self.requests[method] = self.requests.get(method, 0) + 1
            self.sent += sent
            self.received += received

    def _call(self, method, key, fn, sent=0, conflict=None):
        """``fn()``, retried on what may pass; obstore's conflicts (412, 304,
        404) are raised as they are for the caller. ``conflict(attempt)``:
        asked on a 412 after an attempt whose answer was lost."""
        exc = self._obs.exceptions
        final = (exc.NotModifiedError, exc.AlreadyExistsError, exc.PreconditionError, FileNotFoundError,
                 _TooLarge, _Short, SomatizeError)
        last = None
        for attempt in range(self.attempts):
            if attempt:
                wait = min(self.backoff_cap, self.backoff * 2 ** (attempt - 1))
                self.sleep(wait * (0.5 + random.random() / 2))
            self._count(method, sent)
            try:
                return fn()
            except final as e:
                if conflict is not None and attempt and isinstance(e, (exc.AlreadyExistsError, exc.PreconditionError)):
                    return conflict(e)
                raise
            except (exc.PermissionDeniedError, exc.UnauthenticatedError) as e:
                raise BucketError(
                    f"{method} {self.where(key)} was refused ({_first_line(e)}); check the credentials "
                    "the environment gives (they are never read from the store)", url=self.url, key=key,
                ) from None
            except (exc.InvalidPathError, exc.NotSupportedError, exc.UnknownConfigurationKeyError) as e:
                raise BucketError(f"{method} {self.where(key)}: {_first_line(e)}", url=self.url, key=key) from None
            except Exception as e:  # GenericError and what the client raises for sockets
                status = _status(e)
                if status is not None and 400 <= status < 500 and status not in (408, 429):
                    raise BucketError(
                        f"{method} {self.where(key)} was answered {status}: {_first_line(e)}",
                        url=self.url, key=key, status=status,
                    ) from None
                last = e
        status = _status(last)
        raise BucketError(
            f"{method} {self.where(key)} failed {self.attempts} times (the last: "
            f"{_first_line(last)}); the bucket is down, slow or unreachable. Retry later, or raise "
            "Bucket(attempts=…) or timeout=", url=self.url, key=key, status=status,
        ) from None

    # ---- reading -----------------------------------------------------------------

    def get(self, key, limit) -> bytes:
        """The bytes of ``key``; ``FileNotFoundError`` where none;
        ``DamagedError`` where it holds more than ``limit`` bytes (asked
        before a byte of it is read)."""
        found = self._get(key, None, limit)
        return found[0]

    def get_if_changed(self, key, etag, limit):
        """``(bytes, etag)`` of ``key``, or None where its etag is still
        ``etag`` (a 304: nothing sent); ``etag`` None: always read."""
        return self._get(key, etag, limit)

    def _get(self, key, etag, limit):
        path = self._path(key)
        obs = self._obs
        options = {"if_none_match": etag} if etag is not None else None

        def get():
            result = obs.get(self._store(), path, options=options)
            size = result.meta["size"]
            if limit is not None and size > limit:
                raise _TooLarge(size)
            data = bytes(result.bytes())
            if len(data) != size:
                raise _Short(len(data), size)
            return data, result.meta["e_tag"]

        try:
            data, tag = self._call("GET", key, get)
        except obs.exceptions.NotModifiedError:
            return None
        except _TooLarge as e:
            raise DamagedError(
                f"{self.where(key)} holds {e.args[0]:,} bytes, more than the {limit:,} a read there "
                "takes; nothing of it was read. Something other than somatize wrote it: delete it, "
                "or open the right bucket"
            ) from None
        except _Short as e:
            raise DamagedError(
                f"{self.where(key)} said it holds {e.args[1]:,} bytes and sent {e.args[0]:,}; read it again"
            ) from None
        with self._counting:
            self.received += len(data)
        return data, tag

    def head(self, key):
        """``(size, etag)`` of ``key``, or None where there is none."""
        path = self._path(key)
        try:
            meta = self._call("HEAD", key, lambda: self._obs.head(self._store(), path))
        except FileNotFoundError:
            return None
        return meta["size"], meta["e_tag"]

    def list(self, prefix="", tags=False):
        """``[(key, size)]`` of every key below the folder ``prefix`` (all
        when ""), sorted: one LIST (paginated by the client); ``tags``:
        ``[(key, size, etag)]`` (the LIST carries each key's etag). A key
        the bucket holds there that is no key of ours (``key_parts``) is skipped."""
        base = self._path(prefix) if prefix else self.prefix
        start = len(self.prefix) + 1 if self.prefix else 0

        def listing():
            return [o for chunk in self._obs.list(self._store(), prefix=base or None) for o in chunk]

        found = []
        for meta in self._call("LIST", prefix or ".", listing):
            path = meta["path"]
            if self.prefix and not path.startswith(self.prefix + "/"):
                continue
            key = path[start:]
            try:
                key_parts(key)
            except SomatizeValueError:
                continue
            found.append((key, meta["size"], meta.get("e_tag")) if tags else (key, meta["size"]))
        found.sort()
        return found

    def folders(self, prefix=""):
        """``(folders, files)`` right below the folder ``prefix``: the names of
        its folders, and ``[(name, size)]`` of its keys (one LIST with a delimiter)."""
        base = self._path(prefix) if prefix else self.prefix
        obs = self._obs
        got = self._call("LIST", prefix or ".", lambda: obs.list_with_delimiter(self._store(), prefix=base or None))
        cut = len(base) + 1 if base else 0
        names = sorted(p[cut:].strip("/") for p in got["common_prefixes"] if p.startswith(base))
        files = sorted((o["path"][cut:], o["size"]) for o in got["objects"] if o["path"].startswith(base))
        ok = [n for n in names if n and "/" not in n and n not in (".", "..")]
        return ok, [(n, s) for n, s in files if n and "/" not in n and n not in (".", "..")]

    # ---- writing -----------------------------------------------------------------

    def create(self, key, data) -> bool:
        """Put ``data`` at ``key`` unless a key is there (create-if-absent):
        True once written, False when one was there (a 412; nothing written)."""
        path, data = self._path(key), _bytes(data)
        obs = self._obs
        try:
            self._call("PUT", key, lambda: obs.put(self._store(), path, data, mode="create", use_multipart=False),
                       sent=len(data), conflict=lambda e: self._own(key, data, e) is not None or _raise(e))
        except obs.exceptions.AlreadyExistsError:
            return False
        except obs.exceptions.PreconditionError:  # some stores answer a create so
            return False
        return True

    def replace_if(self, key, data, etag) -> str:
        """Put ``data`` at ``key`` only where its version is still ``etag``
        (None: only where no key is); its new etag. ``Fenced`` where another
        writer changed (or made, or removed) it first."""
        path, data = self._path(key), _bytes(data)
        obs = self._obs
        mode = "create" if etag is None else {"e_tag": etag}

        def put():
            return obs.put(self._store(), path, data, mode=mode, use_multipart=False)["e_tag"]

        try:
            return self._call("PUT", key, put, sent=len(data), conflict=lambda e: self._own(key, data, e) or _raise(e))
        except (obs.exceptions.AlreadyExistsError, obs.exceptions.PreconditionError, FileNotFoundError):
            pass
        was = "was made" if etag is None else "changed (or was removed)"
        raise Fenced(
            f"{self.where(key)} {was} by another writer since this one read it"
            f"{'' if etag is None else f' (etag {etag})'}; this writer is fenced out and wrote "
            "nothing there. Read it again and decide, or stop this writer", url=self.url, key=key,
        )

    def _own(self, key, data, error):
        """After a lost answer, a 412: the etag of ``key`` where it holds
        ``data`` (the first attempt landed), else None."""
        try:
            got = self._get(key, None, len(data))
        except (FileNotFoundError, DamagedError):
            return None
        return got[1] if got[0] == data else None

    def put(self, key, data) -> str:
        """Put ``data`` at ``key`` whatever is there (names, the marker); its etag."""
        path, data = self._path(key), _bytes(data)
        return self._call("PUT", key, lambda: self._obs.put(self._store(), path, data, use_multipart=False),
                          sent=len(data))["e_tag"]

    def delete(self, key) -> None:
        """Remove ``key``; none there: nothing."""
        path = self._path(key)
        try:
            self._call("DELETE", key, lambda: self._obs.delete(self._store(), path))
        except FileNotFoundError:
            pass


class _TooLarge(Exception):
    pass


class _Short(Exception):
    pass


def _raise(error):
    raise error


def _bytes(data) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, (list, tuple)):
        return b"".join(bytes(c) if not isinstance(c, bytes) else c for c in data)
    raise SomatizeTypeError(f"a bucket takes bytes (or a list of buffers); got {type(data).__name__}")


def _status(error):
    if error is None:
        return None
    found = _STATUS.search(str(error))
    return int(found.group(1)) if found else None


def _first_line(error) -> str:
    text = str(error).split("\n", 1)[0].strip()
    return (text[:300] + "…") if len(text) > 300 else text or type(error).__name__


class BucketBackend:
    """A store's bytes in a ``Bucket``: the part of the storage seam
    (``_base/backend.py``) that the Store's objects, names and marker go
    through, by parts below the bucket's prefix. What differs from
    ``LocalBackend``, and why:

    - Every PUT is durable once answered, and atomic: ``make``, ``sync``
      and ``sweep`` have nothing to do (no folders, no temp files).
    - ``create`` is the bucket's create-if-absent (a 412: False). A value's
      object of 1 MiB or more is asked for first (a HEAD), so a copy that
      is there already costs no upload. An object of another size there is
      left alone (reading it says it is damaged; ``check`` lists it).
    - ``list`` answers ``"file"`` or ``"dir"`` only (a bucket holds no links,
      FIFOs or devices); ``version`` is the etag.
    - Appending, staging, locks: not here (a run in a bucket is written to
      a local write-ahead copy and uploaded by segments, record/_upload).
    """

    HEAD_FIRST = 1 << 20  # bytes from which create asks before it uploads

    def __init__(self, bucket):
        self.bucket = bucket

    def __repr__(self):
        return f"BucketBackend({self.bucket.url!r})"

    def where(self, parts, at=None) -> str:
        """How ``parts`` is named in a message: its URL."""
        return self.bucket.where(parts) if parts else self.bucket.url

    def read(self, parts, limit=None, head=None):
        """The whole key ``parts`` as a writable uint8 array the caller owns;
        ``limit``: a larger one is refused (``DamagedError``) before it is
        read. ``head`` (a local file's first look) is not needed: the whole
        bytes are here, and their reader checks their layout."""
        import numpy as np

        data = self.bucket.get(parts, limit)
        return np.frombuffer(bytearray(data), np.uint8)

    def read_range(self, parts, limit, start=0, at=None) -> bytes:
        """At most ``limit`` bytes of ``parts`` from ``start`` (the whole key is fetched)."""
        return self.bucket.get(parts, None)[start:start + limit]

    def size(self, parts, at=None):
        """Bytes of the key ``parts``; None where there is none."""
        found = self.bucket.head(parts)
        return None if found is None else found[0]

    def version(self, parts, at=None):
        """The etag of ``parts``; None where there is none."""
        found = self.bucket.head(parts)
        return None if found is None else found[1]

    def list(self, parts=(), at=None):
        """``(name, kind)`` right below the folder ``parts``: kind "file" or "dir"."""
        folders, files = self.bucket.folders("/".join(parts))
        return [(name, "dir") for name in folders] + [(name, "file") for name, _ in files]

    def walk(self, parts):
        """The parts (below ``parts``) of every key under the folder ``parts`` (one LIST)."""
        cut = len(parts)
        return [tuple(key.split("/"))[cut:] for key, _ in self.bucket.list("/".join(parts))]

    def make(self, parts):
        """Nothing to make: a bucket has no folders."""
        return set()

    def create(self, parts, chunks, size, later=None) -> bool:
        """Put ``chunks`` at ``parts`` unless a key is there (False; nothing
        written). ``parts`` may be a function giving them once the chunks
        are consumed (the name hashed while they are)."""
        data = _bytes(list(chunks))
        if callable(parts):
            parts = parts()
        if size >= self.HEAD_FIRST and self.bucket.head(parts) is not None:
            return False
        return self.bucket.create(parts, data)

    def replace(self, parts, data) -> None:
        """Put ``data`` at ``parts``, whatever is there (a name, the marker)."""
        self.bucket.put(parts, data)

    def remove(self, parts, at=None) -> None:
        """Remove the key ``parts``; none there: nothing."""
        self.bucket.delete(parts)

    def sweep(self, cutoff) -> None:
        """Nothing to sweep: a bucket's PUT leaves no temp file."""

    def sync(self, handles=(), folders=(), together=True) -> None:
        """Nothing to sync: a PUT is durable once answered."""
