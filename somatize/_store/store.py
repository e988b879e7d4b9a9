"""The Store: a folder of immutable, content-addressed objects and the names
that point at them.

The rule kept here: nothing is ever half written. Every file is written to
``tmp/``, flushed to disk, then renamed into place, and the folder that holds
it is flushed before anything points at it: an object before the manifest that
references it, a manifest before the name (helpers in ``files.py``). A crash
at any moment leaves whatever was visible before, plus at most some files in
``tmp/`` (harmless: ``check`` ignores them and opening a store sweeps those
over an hour old). Several processes may keep into one store at once: objects
are named by their content, so two writers of one object rename identical
bytes onto one name.

Layout (see docs/ARCHITECTURE.md)::

    SOMATIZE              marker: {"format": 1}
    objects/ab/<62 hex>   immutable objects (format in objects.py), read-only
    names/<name>          a ref: the text "sha256:<64 hex>"; a name may hold "/"
    runs/                 the record's (not touched here)
    tmp/                  temp files, renamed into place

A name and a folder of names cannot share a path (as in git): with
``"a/b"`` kept, ``"a"`` is refused, and the other way round.

Reading verifies every object against its checksum, so damage raises
``DamagedError`` and never returns torn or flipped bytes; an object under
1 MiB is also re-hashed against its name (a whole file copied over another is
refused); ``check`` (``check.py``) re-hashes every object with sha256. Large objects are read by mapping the file
copy-on-write: no copy, and the returned arrays are writable without touching
the file. This leans on objects being immutable, which the store guarantees
for its own writes.

``Store(path, readonly=True)`` opens an existing store and writes nothing at
all, not even on opening: for reading a store one cannot (or must not) change.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from . import files as _files
from .._base.codecs import codec_named
from .._base.errors import DamagedError, SomatizeError, StoreNotWritable, SomatizeKeyError, SomatizeTypeError, SomatizeValueError
from .names import DIGEST, name_of, name_problem, run_names
from .objects import TREE, Damaged, build, parse, split
from .check import check as _check

FORMAT = 1
_OWN = {"SOMATIZE", "objects", "names", "runs", "tmp"}
_HASH_WHILE_WRITING = 1 << 20  # bytes; below this a thread costs more than it saves
_STALE_TMP_S = 3600
_WRITERS = 8  # threads writing the leaves of one value
_CLOSE_AMONG = 5000  # names compared when suggesting close ones


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

    def __init__(self, path, readonly=False):
        if not isinstance(path, (str, os.PathLike)):
            raise SomatizeTypeError(
                f"Store(path) takes a folder path (str or pathlib.Path); got "
                f"{type(path).__name__} {path!r:.60}"
            )
        self.path = Path(os.fspath(path)).expanduser().absolute()
        self.readonly = bool(readonly)
        self._tmp = self.path / "tmp"
        self._objects = self.path / "objects"
        self._names = self.path / "names"
        if self.readonly:
            self._open_to_read()
            return
        try:
            self._open()
        except PermissionError as e:
            if isinstance(e, SomatizeError):
                raise
            raise StoreNotWritable(
                f"Store({str(self.path)!r}): permission denied on {e.filename!r}. Pass a folder "
                "you can read and write to, or fix its permissions (to only read an existing "
                "store, open it with Store(path, readonly=True))."
            ) from None

    def __repr__(self):
        return f"Store({str(self.path)!r}{', readonly=True' if self.readonly else ''})"

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
                    f"Store({str(root)!r}): that folder already holds files of its own "
                    f"({', '.join(strangers[:3])}{', …' if len(strangers) > 3 else ''}) and no "
                    f"SOMATIZE marker, so it is not a store, and a store is not made among "
                    f"someone else's files. Pass a new or empty folder, e.g. "
                    f"Store({str(root / 'store')!r})"
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
                f"{str(self._tmp)!r}). Pass a folder you can write to, or fix its permissions "
                "(to only read an existing store, open it with Store(path, readonly=True))."
            ) from None
        if marker.exists():
            self._read_marker(marker)
        else:
            _files.write_file(self._tmp, marker, orjson.dumps({"format": FORMAT}))
        self._sweep_tmp()

    def _open_to_read(self):
        marker = self.path / "SOMATIZE"
        if not marker.is_file():
            what = "no such folder" if not self.path.exists() else "no SOMATIZE marker in it"
            raise SomatizeValueError(
                f"Store({str(self.path)!r}, readonly=True): not a store ({what}). A read-only "
                "store must exist already: pass the folder a Store(path) made, or drop "
                "readonly=True to make one there."
            )
        self._read_marker(marker)

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

    def _refuse_if_readonly(self, call):
        if self.readonly:
            raise StoreNotWritable(
                f"{call}: {self!r} was opened read-only and keeps nothing. Open it as "
                f"Store({str(self.path)!r}) to keep values."
            )

    # ---- names -----------------------------------------------------------------

    def _ref_path(self, name):
        problem = name_problem(name)
        if problem:
            raise SomatizeValueError(f"the name {name!r} is not allowed: {problem}")
        return self._names.joinpath(*name.split("/"))

    def lookup(self, name):
        """The digest ``name`` points at, or None when there is no such name."""
        if not isinstance(name, str) or name_problem(name):
            return None
        path = self._names.joinpath(*name.split("/"))
        try:
            text = path.read_bytes().decode("ascii", "replace").strip()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        if not DIGEST.fullmatch(text):
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

    def runs(self):
        """The names of the runs recorded here, sorted; their summaries and
        states are in ``somatize.record.runs(store)``."""
        return run_names(self.path)

    def link(self, name, digest):
        """Point ``name`` at an object already in the store."""
        self._refuse_if_readonly(f"link({name!r}, …)")
        path = self._ref_path(name)
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
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
            made = _files.make_dirs(path.parent, self._names)
        except (FileExistsError, NotADirectoryError):
            taken = next((p for p in reversed(path.parents) if p.is_file()), path.parent)
            raise SomatizeValueError(
                f"cannot keep the name {name!r}: {name_of(taken, self._names)!r} is already a "
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
            _files.write_file(self._tmp, path, digest.encode(), sync_dirs=made)
        except IsADirectoryError:
            raise SomatizeValueError(
                f"cannot keep the name {name!r}: it is a folder of names ({name}/…). Pick another "
                f"name, e.g. {name + '-value'!r}"
            ) from None

    # ---- values ----------------------------------------------------------------

    def keep(self, name, value):
        """Keep ``value`` under ``name``; returns its digest ``"sha256:…"``."""
        self._refuse_if_readonly(f"keep({name!r}, …)")
        path = self._ref_path(name)
        digest = self.put(value)
        self._write_ref(name, path, digest)
        return digest

    def put(self, value):
        """Keep ``value`` without a name; returns its digest."""
        self._refuse_if_readonly("put(…)")
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
            _files.sync_dir(d)
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
                f"recall takes a name or a digest (str); got {type(key).__name__} {key!r:.60}. "
                'Write store.recall("a-run/weights") or store.recall("sha256:…")'
            )
        if key.startswith("sha256:"):
            if not DIGEST.fullmatch(key):
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
        if not isinstance(leaf, str) or not DIGEST.fullmatch(leaf):
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
            buf = _files.read_file(path)
        except FileNotFoundError:
            raise DamagedError(
                f"{self._what(digest, name, part_of)} is missing from the store. {_FIX}"
            ) from None
        try:
            parsed = parse(buf)
        except Damaged as e:
            raise DamagedError(f"{self._what(digest, name, part_of)} is damaged: {e}. {_FIX}") from None
        # The checksum proves the bytes whole, not that they are the object
        # this name means (a file copied over another). A small object is
        # re-hashed too, which costs microseconds; a large one relies on its
        # checksum (sha256 would cap recall at ~1.8 GB/s) and on `check`.
        if len(buf) < _files.MAP_AT and "sha256:" + hashlib.sha256(buf).hexdigest() != digest:
            raise DamagedError(
                f"{self._what(digest, name, part_of)} holds another object's bytes: the file "
                f"does not hash to its name. {_FIX}"
            )
        return parsed

    # ---- writing objects ---------------------------------------------------------

    def _object_path(self, digest):
        hexes = digest[7:]
        return self._objects / hexes[:2] / hexes[2:]

    def _write_object(self, obj, sync_dir=True):
        """Write ``obj`` unless already there; the folders left to flush."""
        if obj.size < _HASH_WHILE_WRITING or obj._digest is not None:
            path = self._object_path(obj.digest)
            if _files.has_size(path, obj.size):  # one of another size is truncated: replaced
                return set()
            return self._rename(_files.write_temp(self._tmp, obj.parts, 0o444), path, sync_dir)
        # Large: hash in a thread (hashlib lets go of the GIL) while the bytes
        # go to a temp file and to disk; the name is only known once both are
        # done. A copy that turns out to exist already cost a write, not a read.
        body = list(obj.parts)  # seal() appends the trailer once it is known
        hasher = threading.Thread(target=obj.seal)
        hasher.start()
        tmp = None
        if obj.size >= _files.DIRECT_AT:
            def parts():
                yield from body
                hasher.join()
                yield from obj.parts[len(body):]

            try:
                tmp = _files.write_temp_direct(self._tmp, parts(), 0o444)
            finally:
                hasher.join()
        if tmp is None:
            tmp = self._write_temp_beside(obj, body, hasher)
        path = self._object_path(obj.digest)
        if _files.has_size(path, obj.size):  # another writer placed it meanwhile, or it was there
            _files.unlink(tmp)
            return set()
        return self._rename(tmp, path, sync_dir)

    def _write_temp_beside(self, obj, body, hasher):
        """The temp file of a large object written while ``hasher`` seals it."""
        tmp, fd = _files.new_temp(self._tmp, 0o444)
        try:
            try:
                _files.write_all(fd, body)
            finally:
                hasher.join()
            _files.write_all(fd, obj.parts[len(body):])
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _files.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def _rename(self, tmp, path, sync_dir):
        try:
            made = _files.make_dirs(path.parent, self._objects)
        except BaseException:
            _files.unlink(tmp)
            raise
        _files.replace(tmp, path)
        dirs = {path.parent, *made}
        if sync_dir:
            for d in dirs:
                _files.sync_dir(d)
            return set()
        return dirs

    # ---- checking --------------------------------------------------------------

    def check(self):
        """Every problem in the store, one line each naming the path; [] when sound.

        Re-hashes every object with sha256, checks that every manifest's parts
        and every name's object exist. Files in tmp/ are ignored: they are
        writes a crash interrupted, never visible under a name."""
        return _check(self)


_FIX = (
    "Run store.check() (or `somatize check`) to list every damaged file; delete those files "
    "and keep their values again to repair the store"
)
