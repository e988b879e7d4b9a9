"""Store discovery: the stores under the server's root, found by a bounded
breadth-first walk that follows no link (depth MAX_DEPTH, MAX_FOLDERS
folders visited, no hidden folders, no ``node_modules``), each addressed by
an id (a hash of its path below the root).

The walk is kept (``Walk``): under a root of 20,000 folders it costs seconds,
and the sidebar asks for the stores every 2 s while a run goes. It is walked
again at most once every ``AGAIN_S`` seconds, or less often where one walk
is long (it then takes at most ``SHARE`` of the time); an id not found
waits for that next walk, it never starts one.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time

from .._store.names import MARKER

MAX_DEPTH = 6  # folders below the root where a store is looked for
MAX_FOLDERS = 20_000  # folders looked at in one walk; the rest are not visited
SKIP = frozenset({"node_modules", "__pycache__", "site-packages"})
AGAIN_S = 5.0  # seconds a walk is kept at least: a store made since appears within this (or the gap below)
SHARE = 0.05  # of the time spent walking at most: a walk of 2.3 s is kept 46 s


def store_id(rel: str) -> str:
    return hashlib.sha256(rel.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def is_store(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(os.path.join(path, MARKER)).st_mode)
    except OSError:
        return False


def find_stores(root: str) -> dict[str, str]:
    """``{id: path below root}`` of every store under ``root``: a breadth-first
    walk that follows no link, skips hidden folders and ``node_modules``, and
    stops at MAX_DEPTH / MAX_FOLDERS; a store's own folders are not entered."""
    found: dict[str, str] = {}
    level = [""]
    seen = 0
    for _ in range(MAX_DEPTH + 1):
        below = []
        for rel in level:
            here = os.path.join(root, rel) if rel else root
            if is_store(here):
                found[store_id(rel or ".")] = rel or "."
                continue
            try:
                with os.scandir(here) as it:
                    subs = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
            except OSError:
                continue
            for name in subs:
                if name.startswith(".") or name in SKIP:
                    continue
                seen += 1
                if seen > MAX_FOLDERS:
                    return found
                below.append(f"{rel}/{name}" if rel else name)
        level = below
        if not level:
            break
    return found


class Walk:
    """``find_stores(root)``, kept: ``stores()`` answers the last walk, and
    walks again only when it is older than ``gap()`` (by ``clock``, seconds:
    tests pass one they move by hand). Walks never overlap: while one is
    under way, another thread answers the last one found (the very first
    waits for it). ``walks`` counts the walks made."""

    def __init__(self, root: str, clock=time.monotonic):
        self.root = root
        self._clock = clock
        self._found: dict[str, str] | None = None
        self._at = 0.0
        self._took = 0.0
        self._lock = threading.Lock()
        self.walks = 0

    def gap(self) -> float:
        """Seconds a walk is kept: AGAIN_S, or more where walking is long."""
        return max(AGAIN_S, self._took / SHARE)

    def stores(self) -> dict[str, str]:
        found = self._found
        if found is not None and self._clock() - self._at < self.gap():
            return found
        if not self._lock.acquire(blocking=found is None):
            return found  # another thread walks now: the last walk answers meanwhile
        try:
            if self._found is not None and self._clock() - self._at < self.gap():
                return self._found  # walked while this one waited
            began = self._clock()
            found = find_stores(self.root)
            self._took = self._clock() - began
            self._at = self._clock()
            self._found = found
            self.walks += 1
            return found
        finally:
            self._lock.release()
