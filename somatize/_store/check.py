"""Checking a Store, as git's fsck does: every object re-hashes to its name.

The rule kept here: checking reads and never repairs. Each problem is one
line that names the file and says what to do about it. Files in ``tmp/`` are
ignored: they are writes a crash interrupted, never visible under a name.
"""

from __future__ import annotations

import os
import re

from .._base.errors import DamagedError
from .files import read_file, sha256_file
from .names import DIGEST, name_problem
from .objects import TREE, Damaged, parse, references

_HEX2 = re.compile(r"[0-9a-f]{2}")
_HEX62 = re.compile(r"[0-9a-f]{62}")


def check(store):
    """Every problem in ``store``, one line each naming the path; [] when sound."""
    problems = []
    objects = store.path / "objects"
    for sub in sorted(os.scandir(objects), key=lambda e: e.name):
        if not (sub.is_dir() and _HEX2.fullmatch(sub.name)):
            problems.append(f"{sub.path}: not an object folder (objects/ holds only ab/ folders); remove it")
            continue
        for entry in sorted(os.scandir(sub.path), key=lambda e: e.name):
            problems += _check_object(store, sub.name, entry)
    for name in store.names():
        path = store.path.joinpath("names", *name.split("/"))
        try:
            digest = store.lookup(name)
        except DamagedError:
            problems.append(f"{path}: the name {name!r} does not hold a digest; keep it again or delete it")
            continue
        if digest is None:
            problems.append(f"{path}: {name_problem(name)} (a file not written by the store); rename or delete it")
            continue
        if not store._object_path(digest).exists():
            problems.append(
                f"{path}: the name {name!r} points at {digest}, which is not in the store (dangling); "
                "keep the value again or delete the name"
            )
    return problems


def count_objects(store):
    """How many files ``objects/`` holds (for a report), without reading them."""
    total = 0
    for sub in os.scandir(store.path / "objects"):
        if sub.is_dir():
            total += sum(1 for _ in os.scandir(sub.path))
    return total


def _check_object(store, prefix, entry):
    if not (entry.is_file() and _HEX62.fullmatch(entry.name)):
        return [f"{entry.path}: not an object (its name is not 62 hex digits); remove it"]
    digest = f"sha256:{prefix}{entry.name}"
    try:
        actual = sha256_file(entry.path)
    except OSError as e:
        return [f"{entry.path}: cannot be read ({e.strerror}); fix its permissions"]
    if actual != digest:
        return [f"{entry.path}: damaged: its bytes hash to {actual}, not to its name; delete it and keep the value again"]
    try:
        codec, meta, _ = parse(read_file(entry.path))
    except Damaged as e:
        return [f"{entry.path}: damaged: {e}; delete it and keep the value again"]
    if codec != TREE:
        return []
    tree = meta.get("tree") if isinstance(meta, dict) else None
    return [
        f"{entry.path}: a manifest whose part {leaf} is not in the store; keep the value again"
        for leaf in references(tree)
        if not (isinstance(leaf, str) and DIGEST.fullmatch(leaf) and store._object_path(leaf).exists())
    ]
