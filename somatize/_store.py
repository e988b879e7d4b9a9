"""The Store: a folder of immutable, content-addressed objects and the names
that point at them.

The rule kept here: nothing is ever half written. Every file is written to
``tmp/``, flushed to disk, then renamed into place, and the folder that holds
it is flushed before anything points at it: an object before the manifest that
references it, a manifest before the name. A crash at any moment leaves
whatever was visible before, plus at most some files in ``tmp/`` (harmless:
``check`` ignores them and opening a store sweeps those over an hour old).
Several processes may keep into one store at once: objects are named by their
content, so two writers of one object rename identical bytes onto one name.

Layout (see docs/ARCHITECTURE.md)::

    SOMATIZE              marker: {"format": 1}
    objects/ab/<62 hex>   immutable objects (format in _objects.py), read-only
    names/<name>          a ref: the text "sha256:<64 hex>"; a name may hold "/"
    runs/                 the record's (not touched here)
    tmp/                  temp files, renamed into place

A name and a folder of names cannot share a path (as in git): with
``"a/b"`` kept, ``"a"`` is refused, and the other way round.

Reading verifies every object against its checksum, so damage raises
``DamagedError`` and never returns wrong bytes; ``check`` re-hashes with
sha256. Large objects are read by mapping the file copy-on-write: no copy, and
the returned arrays are writable without touching the file. This leans on
objects being immutable, which the store guarantees for its own writes.
"""

from __future__ import annotations

import difflib
import hashlib
import mmap
import os
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import orjson

from ._codecs import codec_named
from ._errors import DamagedError, SomatizeError, SomatizeKeyError, SomatizeTypeError, SomatizeValueError
from ._objects import TREE, Damaged, build, parse, references, split

FORMAT = 1
_OWN = {"SOMATIZE", "objects", "names", "runs", "tmp"}
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HEX2 = re.compile(r"[0-9a-f]{2}")
_HEX62 = re.compile(r"[0-9a-f]{62}")
_HASH_WHILE_WRITING = 1 << 20  # bytes; below this a thread costs more than it saves
_MAP_AT = 1 << 20  # bytes; objects this large are mapped, not read
_STALE_TMP_S = 3600
_WRITERS = 8  # threads writing the leaves of one value
_CLOSE_AMONG = 5000  # names compared when suggesting close ones


class StoreNotWritable(SomatizeError, PermissionError):
    """The store's folder cannot be written."""


def digest_of(value):
    """The digest ``Store.put(value)`` would return, in any store; writes nothing."""
    return split(value).top().digest


def as_store(store_or_path):
    """``store=`` arguments: a ``Store``, or a path to one."""
    if isinstance(store_or_path, Store):
        return store_or_path
    if isinstance(store_or_path, (str, os.PathLike)):
        return Store(store_or_path)
    raise SomatizeTypeError(
        f"store= takes a Store or a path to one; got {type(store_or_path).__name__} "
        f"{store_or_path!r:.60}. Write store=Store(\"path/to/store\") or store=\"path/to/store\"."
    )


class Store:
    """A folder that keeps values under names; see the module docstring."""

    def __init__(self, path):
        if not isinstance(path, (str, os.PathLike)):
            raise SomatizeTypeError(
                f"Store(path) takes a folder path (str or pathlib.Path); got "
                f"{type(path).__name__} {path!r:.60}"
            )
        self.path = Path(os.fspath(path)).expanduser().absolute()
        self._tmp = self.path / "tmp"
        self._objects = self.path / "objects"
        self._names = self.path / "names"
        try:
            self._open()
        except PermissionError as e:
            if isinstance(e, SomatizeError):
                raise
            raise StoreNotWritable(
                f"Store({str(self.path)!r}): permission denied on {e.filename!r}. Pass a folder "
                "you can read and write to, or fix its permissions."
            ) from None

    def __repr__(self):
        return f"Store({str(self.path)!r})"

    # ---- opening ---------------------------------------------------------------

    def _open(self):
        root = self.path
        if root.exists() and not root.is_dir():
            raise SomatizeValueError(
                f"Store({str(root)!r}): that path is a file; a store is a folder. Pass the "
                f"path of a folder (it is created if missing), e.g. Store({str(root) + '.store'!r})"
            )
        try:
            root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            blocker = next((p for p in root.parents if p.exists() and not p.is_dir()), None)
            raise SomatizeValueError(
                f"Store({str(root)!r}) cannot be created: {str(blocker)!r} is a file, not a "
                "folder. Pass a path whose parents are folders."
            ) from None
        marker = root / "SOMATIZE"
        if not marker.exists():
            # hidden files (.ipynb_checkpoints, .DS_Store) do not make a folder someone's
            strangers = sorted(n for n in set(os.listdir(root)) - _OWN if not n.startswith("."))
            if strangers:
                raise SomatizeValueError(
                    f"Store({str(root)!r}): that folder holds other files ({', '.join(strangers[:3])}"
                    f"{', …' if len(strangers) > 3 else ''}) and is not a store. Pass a new or "
                    f"empty folder, e.g. Store({str(root / 'store')!r})"
                )
        try:
            for d in (self._tmp, self._objects, self._names):
                d.mkdir(exist_ok=True)
            probe = self._tmp / f"probe-{os.getpid()}-{secrets.token_hex(4)}"
            probe.write_bytes(b"")
            probe.unlink()
        except PermissionError:
            raise StoreNotWritable(
                f"Store({str(root)!r}) is not writable (could not create a file in "
                f"{str(self._tmp)!r}). Pass a folder you can write to, or fix its permissions."
            ) from None
        if marker.exists():
            self._read_marker(marker)
        else:
            self._write_file(marker, orjson.dumps({"format": FORMAT}))
        self._sweep_tmp()

    def _read_marker(self, marker):
        try:
            fmt = orjson.loads(marker.read_bytes())["format"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise DamagedError(
                f"{str(marker)!r} is not a store marker; it should hold {{\"format\": {FORMAT}}}. "
                "Rewrite it so, or open a different folder."
            ) from None
        if fmt != FORMAT:
            raise SomatizeValueError(
                f"{str(self.path)!r} is a store of format {fmt!r}; this somatize reads format "
                f"{FORMAT}. Upgrade somatize to open it."
            )

    def _sweep_tmp(self):
        cutoff = time.time() - _STALE_TMP_S
        for entry in os.scandir(self._tmp):
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
            except OSError:
                pass  # another process swept it first

    # ---- names -----------------------------------------------------------------

    def _ref_path(self, name):
        problem = _name_problem(name)
        if problem:
            raise SomatizeValueError(f"the name {name!r} is not allowed: {problem}")
        return self._names.joinpath(*name.split("/"))

    def lookup(self, name):
        """The digest ``name`` points at, or None when there is no such name."""
        if not isinstance(name, str) or _name_problem(name):
            return None
        path = self._names.joinpath(*name.split("/"))
        try:
            text = path.read_bytes().decode("ascii", "replace").strip()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        if not _DIGEST.fullmatch(text):
            raise DamagedError(
                f"the ref {str(path)!r} (name {name!r}) does not hold a digest. Keep the name "
                "again, or delete that file."
            )
        return text

    def names(self, prefix=""):
        """Every name, sorted; only those starting with ``prefix`` when given."""
        found = []
        for folder, dirs, files in os.walk(self._names):
            rel = os.path.relpath(folder, self._names).replace(os.sep, "/")
            for f in files:
                name = f if rel == "." else f"{rel}/{f}"
                if name.startswith(prefix):
                    found.append(name)
        return sorted(found)

    def link(self, name, digest):
        """Point ``name`` at an object already in the store."""
        path = self._ref_path(name)
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise SomatizeValueError(
                f"link({name!r}, {digest!r:.80}): a digest is \"sha256:\" and 64 lowercase hex "
                "digits, as keep() and put() return"
            )
        if not self._object_path(digest).exists():
            raise SomatizeKeyError(
                f"link({name!r}, {digest!r}): no such object in {self!r}. Keep the value "
                "first with store.put(value), which returns its digest."
            )
        self._write_ref(name, path, digest)

    def _write_ref(self, name, path, digest):
        try:
            made = _make_dirs(path.parent, self._names)
        except (FileExistsError, NotADirectoryError):
            taken = next((p for p in reversed(path.parents) if p.is_file()), path.parent)
            raise SomatizeValueError(
                f"cannot keep the name {name!r}: {_name_of(taken, self._names)!r} is already a "
                f"name, and a name cannot also be a folder of names. Pick another name, e.g. "
                f"{name.replace('/', '-')!r}"
            ) from None
        inside = os.path.realpath(self._names) + os.sep
        if not os.path.realpath(path.parent).startswith(inside) and path.parent != self._names:
            # a folder under names/ that links elsewhere: never write outside the store
            raise DamagedError(
                f"cannot keep the name {name!r}: {str(path.parent)!r} leads outside the store "
                f"(a link). Remove that link from {str(self._names)!r}."
            )
        try:
            self._write_file(path, digest.encode(), sync_dirs=made)
        except IsADirectoryError:
            raise SomatizeValueError(
                f"cannot keep the name {name!r}: it is a folder of names ({name}/…). Pick another "
                f"name, e.g. {name + '-value'!r}"
            ) from None

    # ---- values ----------------------------------------------------------------

    def keep(self, name, value):
        """Keep ``value`` under ``name``; returns its digest ``"sha256:…"``."""
        path = self._ref_path(name)
        digest = self.put(value)
        self._write_ref(name, path, digest)
        return digest

    def put(self, value):
        """Keep ``value`` without a name; returns its digest."""
        parts = split(value)
        leaves = parts.leaves
        dirs = set()
        if len(leaves) > 1:
            # each fsync waits on the disk; waiting in parallel lets the
            # filesystem commit many files at once
            with ThreadPoolExecutor(min(_WRITERS, len(leaves))) as pool:
                for made in pool.map(lambda leaf: self._write_object(leaf, sync_dir=False), leaves):
                    dirs |= made
        elif leaves:
            dirs = self._write_object(leaves[0], sync_dir=False)
        for d in dirs:  # leaves reach the disk before the manifest naming them
            _sync_dir(d)
        top = parts.top()
        self._write_object(top)
        return top.digest

    def digest_of(self, value):
        """The digest ``put(value)`` would return; writes nothing."""
        return digest_of(value)

    def recall(self, name_or_digest):
        """The value kept under a name, or under a digest ``"sha256:…"``."""
        key = name_or_digest
        if not isinstance(key, str):
            raise SomatizeTypeError(
                f"recall takes a name or a digest (str); got {type(key).__name__} {key!r:.60}"
            )
        if key.startswith("sha256:"):
            if not _DIGEST.fullmatch(key):
                raise SomatizeValueError(
                    f"recall({key!r:.80}): a digest is \"sha256:\" and 64 lowercase hex digits"
                )
            digest, name = key, None
            if not self._object_path(digest).exists():
                raise SomatizeKeyError(f"no object {digest} in {self!r}; store.names() lists what is kept")
        else:
            self._ref_path(key)
            digest, name = self.lookup(key), key
            if digest is None:
                raise SomatizeKeyError(self._unknown(key))
        codec, meta, buffers = self._read(digest, name)
        if codec != TREE:
            return codec_named(codec).decode(meta, buffers)
        try:
            return build(meta["tree"], lambda leaf: self._recall_leaf(leaf, digest, name))
        except Damaged as e:
            raise DamagedError(f"{self._what(digest, name)} is damaged: {e}. {_FIX}") from None
        except (KeyError, TypeError):
            raise DamagedError(f"{self._what(digest, name)} is damaged: a manifest without a tree. {_FIX}") from None

    def _recall_leaf(self, leaf, manifest, name):
        if not isinstance(leaf, str) or not _DIGEST.fullmatch(leaf):
            raise Damaged(f"it references {leaf!r:.80}, which is not a digest")
        codec, meta, buffers = self._read(leaf, name, part_of=manifest)
        if codec == TREE:
            raise Damaged(f"it references another manifest {leaf}")
        return codec_named(codec).decode(meta, buffers)

    def _unknown(self, name):
        known = self.names()
        if len(known) > _CLOSE_AMONG:  # difflib compares one by one: stay near the name
            head = name.split("/")[0]
            known = [n for n in known if n.split("/")[0] == head][:_CLOSE_AMONG]
        close = difflib.get_close_matches(name, known, n=5)
        hint = f" Close names: {', '.join(map(repr, close))}." if close else ""
        return f"no name {name!r} in {self!r}.{hint} store.names() lists every name."

    def _what(self, digest, name, part_of=None):
        what = f"object {digest} ({self._object_path(digest)})"
        if part_of:
            what += f", a part of {part_of}"
        return what + (f", kept as {name!r}," if name else "")

    def _read(self, digest, name, part_of=None):
        path = self._object_path(digest)
        try:
            buf = _read_file(path)
        except FileNotFoundError:
            raise DamagedError(
                f"{self._what(digest, name, part_of)} is missing from the store. {_FIX}"
            ) from None
        try:
            return parse(buf)
        except Damaged as e:
            raise DamagedError(f"{self._what(digest, name, part_of)} is damaged: {e}. {_FIX}") from None

    # ---- writing ---------------------------------------------------------------

    def _object_path(self, digest):
        hexes = digest[7:]
        return self._objects / hexes[:2] / hexes[2:]

    def _write_object(self, obj, sync_dir=True):
        """Write ``obj`` unless already there; the folders left to flush."""
        if obj.size < _HASH_WHILE_WRITING or obj._digest is not None:
            path = self._object_path(obj.digest)
            if _present(path, obj.size):
                return set()
            return self._place(obj, path, sync_dir)
        # Large: hash in a thread (hashlib lets go of the GIL) while the bytes
        # go to a temp file and to disk; the name is only known once both are
        # done. A copy that turns out to exist already cost a write, not a read.
        hasher = threading.Thread(target=obj.hash)
        hasher.start()
        tmp, fd = self._temp()
        try:
            _write_all(fd, obj.parts)
            os.fsync(fd)
        except BaseException:
            _unlink(tmp)
            raise
        finally:
            hasher.join()
            os.close(fd)
        path = self._object_path(obj.digest)
        if _present(path, obj.size):  # another writer placed it meanwhile, or it was there
            _unlink(tmp)
            return set()
        return self._rename(tmp, path, sync_dir)

    def _place(self, obj, path, sync_dir):
        tmp, fd = self._temp()
        try:
            _write_all(fd, obj.parts)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        os.close(fd)
        return self._rename(tmp, path, sync_dir)

    def _rename(self, tmp, path, sync_dir):
        try:
            made = _make_dirs(path.parent, self._objects)
            os.replace(tmp, path)
        except BaseException:
            _unlink(tmp)
            raise
        dirs = {path.parent, *made}
        if sync_dir:
            for d in dirs:
                _sync_dir(d)
            return set()
        return dirs

    def _temp(self):
        tmp = self._tmp / f"{os.getpid()}-{secrets.token_hex(8)}"
        return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)

    def _write_file(self, path, data, sync_dirs=()):
        tmp = self._tmp / f"{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, [data])
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink(tmp)
            raise
        for d in {path.parent, *sync_dirs}:
            _sync_dir(d)

    # ---- checking --------------------------------------------------------------

    def check(self):
        """Every problem in the store, one line each naming the path; [] when sound.

        Re-hashes every object with sha256, checks that every manifest's parts
        and every name's object exist. Files in tmp/ are ignored: they are
        writes a crash interrupted, never visible under a name."""
        problems = []
        for sub in sorted(os.scandir(self._objects), key=lambda e: e.name):
            if not (sub.is_dir() and _HEX2.fullmatch(sub.name)):
                problems.append(f"{sub.path}: not an object folder (objects/ holds only ab/ folders); remove it")
                continue
            for entry in sorted(os.scandir(sub.path), key=lambda e: e.name):
                problems += self._check_object(sub.name, entry)
        for name in self.names():
            path = self._names.joinpath(*name.split("/"))
            try:
                digest = self.lookup(name)
            except DamagedError:
                problems.append(f"{path}: the name {name!r} does not hold a digest; keep it again or delete it")
                continue
            if digest is None:
                problems.append(f"{path}: {_name_problem(name)} (a file not written by the store); rename or delete it")
                continue
            if not self._object_path(digest).exists():
                problems.append(f"{path}: the name {name!r} points at {digest}, which is not in the store (dangling)")
        return problems

    def _check_object(self, prefix, entry):
        if not (entry.is_file() and _HEX62.fullmatch(entry.name)):
            return [f"{entry.path}: not an object (its name is not 62 hex digits); remove it"]
        digest = f"sha256:{prefix}{entry.name}"
        try:
            actual = _sha256_file(entry.path)
        except OSError as e:
            return [f"{entry.path}: cannot be read ({e.strerror})"]
        if actual != digest:
            return [f"{entry.path}: damaged: its bytes hash to {actual}, not to its name; delete it and keep the value again"]
        try:
            codec, meta, _ = parse(_read_file(entry.path))
        except Damaged as e:
            return [f"{entry.path}: damaged: {e}"]
        if codec != TREE:
            return []
        tree = meta.get("tree") if isinstance(meta, dict) else None
        return [
            f"{entry.path}: a manifest whose part {leaf} is not in the store"
            for leaf in references(tree)
            if not (isinstance(leaf, str) and _DIGEST.fullmatch(leaf) and self._object_path(leaf).exists())
        ]


_FIX = (
    "Run store.check() (or `somatize check`) to list every damaged file; delete those files "
    "and keep their values again to repair the store"
)


def _name_problem(name):
    if not isinstance(name, str):
        return f"a name is a str, not {type(name).__name__}"
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


def _name_of(path, names_root):
    return os.path.relpath(path, names_root).replace(os.sep, "/")


def _make_dirs(folder, root):
    """Create ``folder`` under ``root``; the folders whose entries changed."""
    if folder.is_dir():
        return set()
    made = set()
    missing = []
    p = folder
    while not p.is_dir() and p != root:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            if not d.is_dir():
                raise
        made.add(d.parent)
    return made


def _present(path, size):
    """The object is there already; one of another size (truncated) is replaced."""
    try:
        return os.stat(path).st_size == size
    except FileNotFoundError:
        return False


def _write_all(fd, parts):
    for part in parts:
        view = memoryview(part)
        while view.nbytes:
            n = os.write(fd, view)
            view = view[n:]


def _sync_dir(folder):
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sha256_file(path):
    with open(path, "rb", buffering=0) as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def _read_file(path):
    """The file's bytes as a writable uint8 array the caller owns."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size >= _MAP_AT:
            # copy-on-write: pages come straight from the page cache, and a
            # write into a returned array never reaches the file
            try:
                return np.frombuffer(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY), np.uint8)
            except OSError:
                pass  # a filesystem that cannot map files: read it instead
        buf = np.empty(size, np.uint8)
        view, got = memoryview(buf), 0
        while got < size:  # one read stops at 2 GiB
            n = f.readinto(view[got:])
            if not n:
                break  # shorter than it was a moment ago: parse will say truncated
            got += n
        return buf[:got]
