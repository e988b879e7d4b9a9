"""Store discovery: the stores under the server's root, found by a bounded
breadth-first walk that follows no link (depth MAX_DEPTH, MAX_FOLDERS
folders visited, no hidden folders, no ``node_modules``), each addressed by
an id (a hash of its path below the root)."""

from __future__ import annotations

import hashlib
import os
import stat

from .._store.names import MARKER

MAX_DEPTH = 6  # folders below the root where a store is looked for
MAX_FOLDERS = 20_000  # folders looked at in one walk; the rest are not visited
SKIP = frozenset({"node_modules", "__pycache__", "site-packages"})


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
