"""Stores in buckets, named by URL in the server's configuration
(``c.SomatizeApp.stores = ["s3://team/runs"]``), shown beside the stores
found under the root.

A bucket store is read through this machine's read-only mirror of it
(``record/_mirror``: a local store every reader reads unchanged), so its
runs' listing, curves, node times and facts are answered as a local
store's are, from that folder. What the bucket is asked, and when:

- **At most once a poll.** A request finds the bucket refreshed within
  ``FRESH_S`` (by the server's clock) and asks nothing: one poll of the
  sidebar (the stores, each store's runs, an open run's curves) shares one
  refresh. Nobody looking, nothing asked.
- **A refresh is conditional GETs.** Each run the mirror last saw running
  (its writer replacing its head) is brought up to its head by one
  conditional GET (304: unchanged, nothing more); its new segments are
  fetched once and kept. Never a LIST a run.
- **A LIST of ``heads/`` at most every ``LIST_S``** (one for the whole
  store, with each head's etag: only the changed heads are fetched), so a
  run made, finished, resumed or deleted in the bucket shows within that.
- **Off the request.** A refresh runs on its own thread; a request waits
  for one under way at most ``WAIT_S`` (``FIRST_WAIT_S`` for the first),
  then answers what the mirror holds: a slow or dead bucket never holds
  the page up for its retries.
- **A bucket that does not answer** (``BucketError``, a URL that is no
  bucket's, a prefix that holds no store) is an error row: the URL and
  the cause, in words fit for a client (``_public.public_text``: no
  endpoint, no credential, no local path). It is asked again after
  ``ERROR_S``; its runs the mirror holds are still served.

Nothing of a bucket's configuration but its URL, without any user or
query in it, is ever sent; the id a store is addressed by is a hash of
that URL; the mirror's folder is never named (``Watched.places``).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from urllib.parse import urlsplit

from .._base.bucket import is_url
from .._base.errors import BucketError, DamagedError, SomatizeError
from ..record._runs import ELSEWHERE
from ._public import public_text

FRESH_S = 1.0  # a refresh answers every request within this: one poll's requests share one
LIST_S = 10.0  # seconds between LISTs of heads/: a run new in the bucket shows within this
ERROR_S = 10.0  # after a failed refresh, seconds before the bucket is asked again
WAIT_S = 2.0  # a request waits this long for a refresh under way, then answers the last one
FIRST_WAIT_S = 30.0  # ... and this long for the very first (before it, nothing is known)
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="somatize-bucket-refresh")


def shown_url(url) -> str:
    """``url`` as a client may see it: without a user, password, query or
    fragment (a URL holding any is refused anyway: ``Bucket``)."""
    text = str(url).strip()
    try:
        split = urlsplit(text)
    except ValueError:
        return "<a URL that does not read>"
    if not split.scheme:
        return text if not os.path.isabs(text) else "<path>"  # a path is no store of this list
    host = split.netloc.rsplit("@", 1)[-1]
    return f"{split.scheme}://{host}{split.path}".rstrip("/")


def bucket_id(shown: str) -> str:
    """The id a bucket store is addressed by: a hash of its shown URL (a
    local store's is a hash of its path; the NUL keeps the two apart)."""
    return hashlib.sha256(f"bucket\x00{shown}".encode("utf-8", "surrogateescape")).hexdigest()[:16]


class Watched:
    """One configured URL: its Store (opened read-only on the first refresh
    that reaches it), its mirror's folder (``root``, None until one refresh
    succeeded) and its last problem (``error``, client-safe text, or None).
    ``refreshes``/``lists``: counts, for tests."""

    def __init__(self, url, clock=time.monotonic):
        self.given = url
        self.url = shown_url(url)
        self.id = bucket_id(self.url)
        self._clock = clock
        self._store = None
        self.root: str | None = None
        self.error: str | None = None
        self._at: float | None = None  # when the last refresh began
        self._listed_at: float | None = None
        self._failed = False
        self._job = None
        self._lock = threading.Lock()
        self.refreshes = self.lists = 0

    def places(self) -> list:
        """``(mirror folder, its name in a client's text)``: for ``public_text``."""
        return [(self.root, f"<copy of {self.url}>")] if self.root else []

    def start(self):
        """Begin a refresh where one is due and none is under way; the one under way, or None."""
        with self._lock:
            if self._job is None:
                gap = ERROR_S if self._failed else FRESH_S
                if self._at is None or self._clock() - self._at >= gap:
                    self._at = self._clock()
                    self._job = _POOL.submit(self._refresh)
            return self._job

    def look(self) -> None:
        """Refresh where due (``start``), waiting for one under way at most
        ``WAIT_S`` (``FIRST_WAIT_S`` before anything is known)."""
        job = self.start()
        if job is not None:
            first = self.root is None and self.error is None
            wait_for([job], timeout=FIRST_WAIT_S if first else WAIT_S)
            if first and not job.done():
                self.error = f"{self.url} has not answered yet (the server is still asking it)"

    def _refresh(self) -> None:
        try:
            self._sync()
            self.error, self._failed = None, False
        except (SomatizeError, OSError) as e:  # BucketError, MissingExtra, not a store, a URL refused
            self.error, self._failed = self._cause(e), True
        except Exception as e:  # the client's own failure: said by kind, its text may name the endpoint
            self.error, self._failed = f"{self.url} could not be read ({type(e).__name__})", True
        finally:
            with self._lock:
                self._job = None
            self.refreshes += 1

    def _sync(self) -> None:
        from .._store.store import as_store
        from ..record._mirror import mirror_of, reading

        if not is_url(self.given):
            raise SomatizeError(
                f"{self.url!r} is not a bucket URL: c.SomatizeApp.stores takes s3://bucket/prefix, "
                "gs://bucket/prefix or az://container/prefix (a store on disk is found under the "
                "server's root by itself)")
        if self._store is None:
            self._store = as_store(self.given, readonly=True)  # a reader makes nothing in the bucket
        now = self._clock()
        if self._listed_at is None or now - self._listed_at >= LIST_S:
            reading(self._store)  # one LIST of heads/; the changed heads and their new segments
            self._listed_at = now
            self.lists += 1
        else:
            for run in self._running():
                try:
                    reading(self._store, run)  # one conditional GET of its head (304: nothing more)
                except DamagedError:  # the mirror lists it damaged, naming the key
                    pass
        self.root = str(mirror_of(self._store.bucket).root)

    def _running(self) -> list[str]:
        """The runs the mirror last saw alive (``_runs.ELSEWHERE``: "" while
        their writer replaces their head)."""
        if self.root is None:
            return []
        runs = os.path.join(self.root, "runs") + os.sep
        return sorted(f[len(runs):] for f, why in list(ELSEWHERE.items()) if why == "" and f.startswith(runs))

    def _cause(self, error) -> str:
        text = str(error)
        if self.url not in text and not isinstance(error, BucketError):
            text = f"{self.url}: {text}"
        return public_text(text, None, self.places())[:600]


class Buckets:
    """The configured URLs, in order, by id."""

    def __init__(self, urls=(), clock=time.monotonic):
        self.watched: dict[str, Watched] = {}
        for url in urls:
            w = Watched(url, clock)
            self.watched.setdefault(w.id, w)  # one URL named twice is one store

    def __iter__(self):
        return iter(self.watched.values())

    def get(self, sid: str) -> Watched | None:
        return self.watched.get(sid)

    def look(self) -> None:
        """Refresh every bucket where due, side by side, each waited for as ``Watched.look`` waits."""
        for w in self.watched.values():
            w.start()
        for w in self.watched.values():
            w.look()

    def places(self) -> list:
        return [p for w in self.watched.values() for p in w.places()]
