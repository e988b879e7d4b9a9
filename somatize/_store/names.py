"""What a name in a Store may be, what a digest looks like, and where a
store is (its marker file).

The rule kept here: a name is a relative path that cannot leave ``names/``
and cannot be mistaken for a digest. Names are Unicode text normalised to NFC
(``normal``): "café" typed as one code point or as "e" + a combining accent is
one name, kept and found under its NFC form. Every refusal says what to write
instead. Imports no numpy: the command line lists runs through here.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import unicodedata
from pathlib import Path

from .._base.backend import LocalBackend
from .._base.errors import SomatizeTypeError, SomatizeValueError
from .._base.files import Refused

MARKER = "SOMATIZE"  # the file that makes a folder a store: {"format": 2}
MAX_NAME = 1024  # bytes of UTF-8 in a whole name; each part at most 255
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
RUN_NAME = re.compile(r"[A-Za-z0-9._-]+")  # a run is one folder under runs/
RUN_NAME_LIMIT = 200  # characters of a run name: a folder name is at most 255 bytes


def is_run_name(name) -> bool:
    """Whether ``name`` may name a run: the one rule (``RUN_NAME``, not "."
    or "..", at most ``RUN_NAME_LIMIT`` characters) that recording, listing
    and the run browser apply."""
    return (isinstance(name, str) and len(name) <= RUN_NAME_LIMIT and RUN_NAME.fullmatch(name) is not None
            and name not in (".", ".."))


def run_names(root, links_too=False):
    """The runs recorded in a store, sorted: the folders under ``runs/`` with
    a run's name (``is_run_name``). ``root``: the store's folder, or its
    backend. ``runs/`` is not followed if it is a link (none then), nor is
    any run; ``links_too``: also what else has a run's name there (a link, a
    file), which the record lists as damaged."""
    fs = LocalBackend(root) if isinstance(root, (str, os.PathLike)) else root
    try:
        listed = fs.list(("runs",))
    except (OSError, Refused):  # none, or not a folder of this store
        return []
    return sorted(name for name, kind in listed if (links_too or kind == "dir") and is_run_name(name))


def name_problem(name):
    """Why ``name`` cannot name a value, with the fix; None when it can."""
    if not isinstance(name, str):
        return f'a name is a str, not {type(name).__name__}; write e.g. "a-run/weights"'
    if not name:
        return 'a name cannot be empty; write e.g. "a-run/weights"'
    if name.startswith("/"):
        return f'a name is relative to the store, not absolute: write {name.lstrip("/")!r}'
    if name.startswith("sha256:"):
        return "names starting with 'sha256:' would read as digests; drop that prefix"
    if "\\" in name:
        return f"use '/' between parts, not '\\': write {name.replace(chr(92), '/')!r}"
    if any(ord(c) < 32 or c == "\x7f" for c in name):
        return "a name cannot hold control characters (NUL, newline, tab, …); remove them"
    parts = name.split("/")
    if "" in parts:
        fixed = "/".join(p for p in parts if p)
        return f"a name cannot have an empty part (\"//\" or a trailing \"/\"): write {fixed!r}"
    if "." in parts or ".." in parts:
        return "a name cannot have '.' or '..' parts; write the full name, e.g. \"a-run/weights\""
    if any(len(p.encode()) > 255 for p in parts):
        return "each part between '/' must be at most 255 bytes (the filesystem's limit); shorten it"
    if len(name.encode()) > MAX_NAME:
        return f"a name must be at most {MAX_NAME} bytes in all; shorten it, or use fewer '/' parts"
    return None


def normal(name):
    """``name`` in NFC, the one form a name is kept and found under."""
    return unicodedata.normalize("NFC", name) if isinstance(name, str) and not name.isascii() else name


def store_root(store_or_path):
    """The root folder of a ``Store``, or of a path naming one, checking its
    marker; opens nothing for writing and writes nothing (``Store(path)``
    would make a store there)."""
    if not isinstance(store_or_path, (str, os.PathLike)):
        # A Store exists only once its module is loaded: asked there, not
        # imported (store imports this module, and numpy, which listing runs
        # never loads).
        store = sys.modules.get(__package__ + ".store")
        if store is not None and isinstance(store_or_path, store.Store):
            return store_or_path.path
        raise SomatizeTypeError(
            f"store= takes a Store or a path to one; got {type(store_or_path).__name__} "
            f"{store_or_path!r:.60}. Write store=Store(\"path/to/store\") or store=\"path/to/store\"."
        )
    root = Path(os.fspath(store_or_path)).expanduser().absolute()
    try:
        is_store = stat.S_ISREG(os.lstat(root / MARKER).st_mode)
    except OSError:
        is_store = False
    if not is_store:
        raise SomatizeValueError(
            f"{str(root)!r} is not a somatize store (no {MARKER} file in it): pass the "
            f"folder a Store(path) or Recorder(path, ...) made"
        )
    return root


def backend_of(store_or_path):
    """The backend a store's bytes go through: a ``Store``'s own, or the
    local one of the store a path names (its marker checked: ``store_root``)."""
    store = sys.modules.get(__package__ + ".store")
    if store is not None and isinstance(store_or_path, store.Store):
        return store_or_path.backend
    return LocalBackend(store_root(store_or_path))


def name_of(path, names_root):
    """The name a file under ``names/`` stands for."""
    return os.path.relpath(path, names_root).replace(os.sep, "/")
