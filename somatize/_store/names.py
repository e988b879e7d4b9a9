"""What a name in a Store may be, and what a digest looks like.

The rule kept here: a name is a relative path that cannot leave ``names/``
and cannot be mistaken for a digest. Every refusal says what to write instead.
"""

from __future__ import annotations

import os
import re

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
RUN_NAME = re.compile(r"[A-Za-z0-9._-]+")  # a run is one folder under runs/


def run_names(root):
    """The runs recorded in the store at ``root``, sorted."""
    try:
        return sorted(n for n in os.listdir(os.path.join(root, "runs"))
                      if RUN_NAME.fullmatch(n) and n not in (".", ".."))
    except FileNotFoundError:
        return []


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
        return f"a name cannot have an empty part (\"//\" or a trailing \"/\"): write {'/'.join(p for p in parts if p)!r}"
    if "." in parts or ".." in parts:
        return "a name cannot have '.' or '..' parts; write the full name, e.g. \"a-run/weights\""
    if any(len(p.encode()) > 255 for p in parts):
        return "each part between '/' must be at most 255 bytes; shorten it"
    return None


def name_of(path, names_root):
    """The name a file under ``names/`` stands for."""
    return os.path.relpath(path, names_root).replace(os.sep, "/")
