"""Checking a Store, as git's fsck does: every object re-hashes to its name.

The rule kept here: checking reads and never repairs, and reports rather than
raises. Each problem is one line that names the file and says what to do
about it; whatever is on disk (links, FIFOs, devices, folders where files
belong, a file where a folder belongs) becomes such a line, never a traceback
or a wait. Nothing is followed out of the store and only regular files are
read (through the store's backend). Files in ``tmp/`` are ignored: they are writes a crash
interrupted, never visible under a name.
"""

from __future__ import annotations

import re

from .._base.errors import BucketError, SomatizeError
from .._base.files import Refused
from .names import DIGEST, MARKER, name_problem
from .objects import TREE, Damaged, check_head, digest_in, parse, references

_HEX2 = re.compile(r"[0-9a-f]{2}")
_HEX62 = re.compile(r"[0-9a-f]{62}")
_FOLDERS = ("objects", "names", "tmp")


def check(store):
    """Every problem in ``store``, one line each naming the path; [] when sound."""
    problems = []
    root = _root(store)
    try:
        top = dict(store.backend.list(()))
    except BucketError as e:
        return [f"{root}: cannot be listed ({e}); check the bucket's URL and the credentials the environment gives"]
    except (OSError, Refused) as e:
        return [f"{root}: cannot be listed ({_text(e)}); pass the folder of a store"]
    if top.get(MARKER, "file") != "file":
        problems.append(f"{root / MARKER}: is {top[MARKER]}, not the store's marker file; replace it "
                        "with a file holding {\"format\": 1}")
    for folder in _FOLDERS:
        if folder in top and top[folder] != "dir":
            problems.append(f"{root / folder}: is {top[folder]}, where the store's folder belongs "
                            "(nothing is followed out of a store); remove it")
    if top.get("objects") == "dir":
        problems += _check_objects(store)
    if top.get("names") == "dir":
        problems += _check_names(store)
    return problems


class _Url(str):
    """A bucket store's URL, joined as a path is (``/``, ``joinpath``), for a problem's line."""

    def __truediv__(self, part):
        return _Url(f"{self}/{part}")

    def joinpath(self, *parts):
        return _Url("/".join((self, *parts)))


def _root(store):
    """What a problem's line names the store by: its folder, or its URL."""
    return store.path if store.path is not None else _Url(store.url)


def _text(e):
    return str(e) if isinstance(e, Refused) else (e.strerror or str(e))


def _check_objects(store):
    problems = []
    manifests = {}  # digest -> the leaves it references
    objects = _root(store) / "objects"
    try:
        subs, listed_in = _objects_listing(store)
    except (OSError, Refused) as e:
        return [f"{objects}: cannot be listed ({_text(e)}); fix its permissions"]
    for sub, kind in subs:
        if kind != "dir" or not _HEX2.fullmatch(sub):
            problems.append(f"{objects / sub}: not an object folder (objects/ holds only ab/ folders; "
                            f"this is {kind}); remove it")
            continue
        try:
            listed = listed_in[sub] if listed_in is not None else sorted(store.backend.list(("objects", sub)))
        except (OSError, Refused) as e:
            problems.append(f"{objects / sub}: cannot be listed ({_text(e)}); remove it or fix its permissions")
            continue
        for name, kind in listed:
            problems += _check_object(store, sub, name, kind, manifests)
    for digest, leaves in manifests.items():
        for leaf in leaves:
            if leaf in manifests:  # never written by keep: a recall refuses it
                problems.append(f"{store._object_path(digest)}: a manifest whose part {leaf} is another "
                                "manifest; delete it and keep the value again")
    return problems


def _objects_listing(store):
    """``(subs, listed_in)``: the entries of ``objects/`` and, in a bucket,
    every ``ab/`` folder's entries too, from one LIST (``listed_in``: None
    on disk, where each folder is listed when its turn comes)."""
    if store.bucket is None:
        return sorted(store.backend.list(("objects",))), None
    listed_in, subs = {}, {}
    for key, _ in store.bucket.list("objects"):
        parts = key.split("/")[1:]
        if len(parts) == 1:
            subs[parts[0]] = "file"
        else:
            subs.setdefault(parts[0], "dir")
            listed_in.setdefault(parts[0], set()).add((parts[1], "file" if len(parts) == 2 else "dir"))
    return sorted(subs.items()), {sub: sorted(entries) for sub, entries in listed_in.items()}


def _check_object(store, prefix, name, kind, manifests):
    path = _root(store) / "objects" / prefix / name
    if kind != "file" or not _HEX62.fullmatch(name):
        return [f"{path}: not an object (an object is a file named by 62 hex digits; this is {kind}); remove it"]
    digest = f"sha256:{prefix}{name}"
    try:
        buf = store.backend.read(("objects", prefix, name), head=check_head)
        actual = digest_in(buf)
    except Damaged as e:
        return [f"{path}: damaged: {e}; delete it and keep the value again"]
    except (OSError, Refused) as e:
        return [f"{path}: cannot be read ({_text(e)}); fix its permissions or remove it"]
    if actual != digest:
        return [f"{path}: damaged: its bytes hash to {actual}, not to its name; delete it and keep the value again"]
    try:
        codec, meta, _ = parse(buf, digest)
    except Damaged as e:
        return [f"{path}: damaged: {e}; delete it and keep the value again"]
    if codec != TREE:
        return []
    tree = meta.get("tree") if isinstance(meta, dict) else None
    if tree is None:
        return [f"{path}: damaged: a manifest without a tree; delete it and keep the value again"]
    leaves = sorted(set(map(str, references(tree))))
    manifests[digest] = leaves
    return [
        f"{path}: a manifest whose part {leaf[:80]} is not in the store; keep the value again"
        for leaf in leaves
        if not (DIGEST.fullmatch(leaf) and store._has_object(leaf))
    ]


def _check_names(store):
    problems = []
    names = _root(store) / "names"
    problems += _strays(store, ("names",))
    for name in store.names():
        path = names.joinpath(*name.split("/"))
        if name_problem(name):
            problems.append(f"{path}: {name_problem(name)} (a file not written by the store); rename or delete it")
            continue
        try:
            digest = store._read_ref(name)
        except SomatizeError as e:
            problems.append(f"{path}: the name {name!r} does not hold a digest ({e}); keep it again or delete it")
            continue
        if digest is not None and not store._has_object(digest):
            problems.append(
                f"{path}: the name {name!r} points at {digest}, which is not in the store (dangling); "
                "keep the value again or delete the name"
            )
    return problems


def _strays(store, parts):
    """Lines for what under ``parts`` is neither a file nor a folder (links,
    FIFOs, devices): ``names()`` skips them, so they would go unseen."""
    problems = []
    stack = [parts]
    while stack:
        here = stack.pop()
        try:
            listed = store.backend.list(here)
        except (OSError, Refused) as e:
            problems.append(f"{_root(store).joinpath(*here)}: cannot be listed ({_text(e)}); remove it")
            continue
        for name, kind in listed:
            if kind == "dir":
                stack.append((*here, name))
            elif kind != "file":
                problems.append(f"{_root(store).joinpath(*here, name)}: is {kind}, not a name the store "
                                "wrote (nothing is followed); remove it")
    return problems


def count_objects(store):
    """How many files ``objects/`` holds (for a report), without reading them."""
    total = 0
    if store.bucket is not None:
        try:
            return len(store.bucket.list("objects"))
        except OSError:
            return 0  # check() reports why
    try:
        for sub, kind in store.backend.list(("objects",)):
            if kind == "dir":
                total += len(store.backend.list(("objects", sub)))
    except (OSError, Refused):
        pass  # check() reports why
    return total
