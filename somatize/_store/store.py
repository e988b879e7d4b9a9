"""The Store: a folder of immutable, content-addressed objects and the names
that point at them.

The rule kept here: nothing is ever half written. Every file is written to
``tmp/``, flushed to disk, then renamed into place, and the folder that holds
it is flushed before anything points at it: an object before the manifest that
references it, a manifest before the name (``writer.py``). Every byte is read
and written through the store's backend (``_base/backend.py``: create-if-absent
for objects, an atomic replace for names and the marker). A crash
at any moment leaves whatever was visible before, plus at most some files in
``tmp/`` (harmless: ``check`` ignores them and opening a store sweeps those
over an hour old, and any folder a failed delete left: ``_base.files.trash_name``).
Several processes may keep into one store at once: objects are named by
their content, so two writers of one object rename identical bytes onto one
name.

Layout (see docs/ARCHITECTURE.md)::

    SOMATIZE              marker: {"format": 2}; a store of format 1 (objects
                          SMZ1 only) is read, and marked 2 when written into
    objects/ab/<62 hex>   immutable objects (format in objects.py), read-only
    names/<name>          a ref: the text "sha256:<64 hex>"; a name may hold "/"
    runs/                 the record's (not touched here)
    tmp/                  temp files, renamed into place

A name and a folder of names cannot share a path (as in git): with
``"a/b"`` kept, ``"a"`` is refused, and the other way round.

Reading verifies every object against its checksum, so damage raises
``DamagedError`` and never returns torn or flipped bytes. A recall returns
exactly what was kept under that digest, or raises: an object's last 32 bytes
repeat its digest (format in objects.py), and the reader compares them with
the name it asked for, so a whole file copied over another (which passes its
own checksum) is refused at no cost. Why that, and not an xxh3 seeded with the
digest: the digest covers the checksum, so a seeded checksum could only be
computed after a second pass over the bytes once sha256 is done, slowing every
large keep; the repeated digest is appended after the one pass. It proves
identity against accidents (a copy, a mix-up), not against forgery: a forger
can write any bytes; ``check`` (``check.py``) re-hashes every object with
sha256, and an object under 1 MiB is re-hashed on every recall too (costs
microseconds). Large objects are read by mapping the file copy-on-write: no
copy, and the returned arrays are writable without touching the file. This
leans on objects being immutable, which the store guarantees for its own writes.

A leaf referenced many times by one manifest is read and decoded once, and
the references share the one value (as they share one object). What the
references would materialise is still bounded before anything is built: a
manifest of a few hundred kilobytes can refer 4,000 times to one 1 MB leaf,
and whatever copies the value it hands back (a list comprehension,
``np.stack``, sending it) would then hold 4 GB. So a recall first counts,
from the tree and the sizes of the leaf files, the bytes that repeated
references add to those present, and refuses past ``repeated_limit`` (1 GiB
by default; ``recall(name, repeated_limit=...)`` raises it).

Hostile by default: below the root nothing is followed (no link, out or in),
only regular files are read, each of a size its format allows, and a FIFO
never blocks (the backend's promises); what is not what the store writes raises
``DamagedError`` naming the path, and ``check`` lists it. Decoding errors are
told apart: a built-in codec's refusal is damage, a user codec's exception is
a ``CodecError`` naming that codec (the bytes passed their checksum).

Names are normalised to Unicode NFC on keep, lookup and recall (names.py).

``Store(path, readonly=True)`` opens an existing store and writes nothing at
all, not even on opening: for reading a store one cannot (or must not) change.
``direct_io`` says whether objects of 8 MiB or more are written around the
page cache (writer.py says why it is a switch).

If the store's folders vanish while it is open (a notebook deleting a cache
folder, or the whole store), the next write makes them again.
"""

from __future__ import annotations

import errno
import os
import secrets
import time
from pathlib import Path

import orjson

from .._base.backend import LocalBackend
from .._base.bucket import Bucket, BucketBackend, is_url
from .._base.codecs import codec_named
from .._base.errors import (
    BucketError,
    CodecError,
    DamagedError,
    SomatizeError,
    SomatizeKeyError,
    SomatizeTypeError,
    SomatizeValueError,
    StoreNotWritable,
)
from .._base.files import MAP_AT, FileInTheWay, Refused
from .._base.near import AMONG, close_names
from .check import check as _check
from .names import DIGEST, MARKER, is_run_name, name_of, name_problem, normal, run_names, store_root
from .objects import TREE, Damaged, NotThisObject, build, check_head, digest_in, parse, references, split
from .writer import Writer, direct_io_default, parts_of

FORMAT = 2  # its objects may be SMZ2, which a reader of format 1 would call damaged
_READS = (1, 2)
_OWN = {MARKER, "objects", "names", "runs", "tmp"}
_OWN_IN_A_BUCKET = _OWN | {"heads"}  # a bucket's runs: heads/<run>.json (record/_upload)
_STALE_TMP_S = 3600
_SMALL_FILE = 1024  # the most bytes a marker or a ref may hold (a ref is 71)
REPEATED_LIMIT = 1 << 30  # bytes repeated references may add to a recalled value (see the docstring)
_opened = {}  # (root, readonly) -> Store: as_store opens a path once per process


def digest_of(value):
    """The digest ``Store.put(value)`` would return, in any store; writes nothing."""
    return split(value).top().digest


def as_store(store_or_path, readonly=False):
    """The one reading of ``store=`` arguments: a ``Store`` as it is, or a path
    to one, opened once per process (a Store heals folders deleted under it)."""
    if isinstance(store_or_path, Store):
        return store_or_path
    if isinstance(store_or_path, str) and is_url(store_or_path):
        key = (Bucket(store_or_path).url, bool(readonly))
        found = _opened.get(key)
        if found is None:
            found = _opened[key] = Store(key[0], readonly=readonly)
        return found
    if isinstance(store_or_path, (str, os.PathLike)):
        key = (os.path.abspath(os.path.expanduser(os.fspath(store_or_path))), bool(readonly))
        found = _opened.get(key)
        if found is None:
            found = _opened[key] = Store(key[0], readonly=readonly)
        return found
    return store_root(store_or_path)  # neither: raises, naming what store= takes


class Store:
    """A folder that keeps values under names; see the module docstring.

    ``Store("s3://bucket/prefix")`` (or ``gs://``, ``az://``, ``memory://``)
    keeps them in a bucket (docs/store-and-record.md, "A store in a
    bucket"): ``bucket`` is its ``_base.bucket.Bucket`` and ``url`` its URL
    (both None for a folder, whose ``path`` is then None in a bucket's)."""

    bucket = None  # the store's Bucket, where it is in one
    url = None  # its URL, where it is in a bucket

    def __init__(self, path, readonly=False, direct_io=None):
        if isinstance(path, str) and is_url(path):
            self._in_bucket(path, readonly)
            return
        if not isinstance(path, (str, os.PathLike)):
            raise SomatizeTypeError(
                f"Store(path) takes a folder path (str or pathlib.Path); got "
                f"{type(path).__name__} {path!r:.60}"
            )
        self.path = Path(os.fspath(path)).expanduser().absolute()
        self.readonly = bool(readonly)
        self._tmp = self.path / "tmp"
        self._names = self.path / "names"
        # every byte of the store is read and written through it
        self.backend = LocalBackend(self.path, direct_io_default() if direct_io is None else bool(direct_io))
        self._writer = Writer(self.backend)
        if self.readonly:
            self._open_to_read()
            return
        self._open()

    def __repr__(self):
        return f"Store({self._named!r}{', readonly=True' if self.readonly else ''})"

    @property
    def _named(self):
        """How the store is named in a message: its folder, or its URL."""
        return self.url if self.path is None else str(self.path)

    # ---- in a bucket -------------------------------------------------------------

    def _in_bucket(self, url, readonly):
        """Open the store at ``url`` (a bucket): its marker read, or made
        create-if-absent where the prefix holds nothing else of anyone's."""
        self.bucket = Bucket(url)
        self.url, self.path, self.readonly = self.bucket.url, None, bool(readonly)
        self._tmp = self._names = None
        self.backend = BucketBackend(self.bucket)
        self._writer = Writer(self.backend)
        if self._has_marker():
            fmt = self._read_marker()
            if not self.readonly and fmt != FORMAT:
                self.backend.replace((MARKER,), orjson.dumps({"format": FORMAT}))
            return
        if self.readonly:
            raise SomatizeValueError(
                f"Store({self.url!r}, readonly=True): not a store (no {MARKER} marker there). A "
                "read-only store must exist already: pass the URL a Store(url) made, or drop "
                "readonly=True to make one there."
            )
        folders, files = self.bucket.folders()
        strangers = sorted({*folders, *(name for name, _ in files)} - _OWN_IN_A_BUCKET)
        if strangers:
            raise SomatizeValueError(
                f"Store({self.url!r}): that prefix already holds keys of its own "
                f"({', '.join(strangers[:3])}{', …' if len(strangers) > 3 else ''}) and no {MARKER} "
                f"marker, so it is not a store, and a store is not made among someone else's keys. "
                f"Pass a new or empty prefix, e.g. Store({self.url + '/store'!r})"
            )
        marker = orjson.dumps({"format": FORMAT})
        self.backend.create((MARKER,), [marker], len(marker))  # two openers at once: one writes it

    # ---- opening ---------------------------------------------------------------

    def _open(self):
        try:
            self._make()
        except PermissionError as e:
            if isinstance(e, SomatizeError):
                raise
            raise StoreNotWritable(
                f"Store({str(self.path)!r}): permission denied on {e.filename!r}. Pass a folder "
                "you can read and write to, or fix its permissions (to only read an existing "
                "store, open it with Store(path, readonly=True))."
            ) from None

    def _make(self):
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
        has_marker = self._has_marker()
        if not has_marker:
            # hidden files (.ipynb_checkpoints, .DS_Store) do not make a folder someone's
            listed = {name for name, _ in self.backend.list(())}
            strangers = sorted(n for n in listed - _OWN if not n.startswith("."))
            if strangers:
                raise SomatizeValueError(
                    f"Store({str(root)!r}): that folder already holds files of its own "
                    f"({', '.join(strangers[:3])}{', …' if len(strangers) > 3 else ''}) and no "
                    f"{MARKER} marker, so it is not a store, and a store is not made among "
                    f"someone else's files. Pass a new or empty folder, e.g. "
                    f"Store({str(root / 'store')!r})"
                )
        try:
            for d in ("tmp", "objects", "names"):
                self._folder((d,))
            probe = ("tmp", f"probe-{os.getpid()}-{secrets.token_hex(4)}")
            self.backend.close(self.backend.open_append(probe)[0])
            self.backend.remove(probe)
        except PermissionError:
            raise StoreNotWritable(
                f"Store({str(root)!r}) is not writable (could not create a file in "
                f"{str(self._tmp)!r}). Pass a folder you can write to, or fix its permissions "
                "(to only read an existing store, open it with Store(path, readonly=True))."
            ) from None
        if not has_marker or self._read_marker() != FORMAT:
            # a store of format 1 is about to hold objects an older somatize
            # cannot read: say so in the marker, so that it refuses the store
            # ("upgrade somatize") instead of calling those objects damaged
            self.backend.replace((MARKER,), orjson.dumps({"format": FORMAT}))
        self.backend.sweep(time.time() - _STALE_TMP_S)

    def _folder(self, parts):
        """Make ``root/parts…`` (folders), following no link; the folders changed."""
        try:
            return self.backend.make(parts)
        except Refused as e:
            where = self.path.joinpath(*parts)
            raise DamagedError(
                f"{str(where)!r} (or a folder above it in the store) is {e}; a store holds "
                f"only its own folders there and follows no link out. Remove it from "
                f"{str(self.path)!r} (the store makes it again)."
            ) from None

    def _has_marker(self):
        """Whether anything is there by the marker's name (what it is, reading it says)."""
        try:
            return self.backend.size((MARKER,)) is not None
        except Refused:
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _open_to_read(self):
        if not self._has_marker():
            what = "no such folder" if not self.path.exists() else f"no {MARKER} marker in it"
            raise SomatizeValueError(
                f"Store({str(self.path)!r}, readonly=True): not a store ({what}). A read-only "
                "store must exist already: pass the folder a Store(path) made, or drop "
                "readonly=True to make one there."
            )
        self._read_marker()

    def _read_marker(self):
        marker = self.backend.where((MARKER,))
        try:
            fmt = orjson.loads(self.backend.read((MARKER,), _SMALL_FILE).tobytes())["format"]
        except BucketError:
            raise
        except (Refused, OSError, orjson.JSONDecodeError, KeyError, TypeError, IndexError) as e:
            why = f" (it is {e})" if isinstance(e, Refused) else ""
            raise DamagedError(
                f"{marker!r} is not a store marker{why}; it should be a file holding "
                f"{{\"format\": {FORMAT}}}. Rewrite it so, or open a different folder."
            ) from None
        if fmt not in _READS or type(fmt) is not int:
            raise SomatizeValueError(
                f"{self._named!r} is a store of format {fmt!r:.40}; this somatize reads formats "
                f"{' and '.join(map(str, _READS))}. Upgrade somatize to open it."
            )
        return fmt

    def _refuse_if_readonly(self, call):
        if self.readonly:
            raise StoreNotWritable(
                f"{call}: {self!r} was opened read-only and keeps nothing. Open it as "
                f"Store({self._named!r}) to keep values."
            )

    # ---- names -----------------------------------------------------------------

    def _ref_path(self, name):
        problem = name_problem(name)
        if problem:
            raise SomatizeValueError(f"the name {name!r:.300} is not allowed: {problem}")
        return None if self._names is None else self._names.joinpath(*name.split("/"))

    def lookup(self, name):
        """The digest ``name`` points at, or None when there is no such name."""
        if not isinstance(name, str) or name_problem(name):
            return None
        found = self._read_ref(normal(name))
        if found is None and normal(name) != name:  # kept before names were normalised
            found = self._read_ref(name)
        return found

    def _read_ref(self, name):
        path = self.backend.where(("names", *name.split("/")))
        try:
            raw = self.backend.read(("names", *name.split("/")), _SMALL_FILE)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except BucketError:
            raise
        except Refused as e:
            if e.kind in ("a folder", "a file"):
                return None  # a folder of names, or a name where this one's folder would be
            raise DamagedError(
                f"the ref {path!r} (name {name!r}) is {e}; the store writes only small files "
                "there. Delete it, then keep the name again."
            ) from None
        except DamagedError as e:  # a bucket's: larger than a ref may be
            raise DamagedError(f"the ref {path!r} (name {name!r}) is damaged: {e}") from None
        except OSError as e:
            raise DamagedError(
                f"the ref {path!r} (name {name!r}) cannot be read ({e.strerror}); fix its "
                "permissions, or delete it and keep the name again."
            ) from None
        text = raw.tobytes().decode("ascii", "replace").strip()
        if not DIGEST.fullmatch(text):
            raise DamagedError(
                f"the ref {path!r} (name {name!r}) does not hold a digest. Keep the name "
                "again, or delete that file."
            )
        return text

    def names(self, prefix=""):
        """Every name, sorted; only those starting with ``prefix`` when given.
        Only regular files under ``names/`` are names: links are not followed."""
        if not isinstance(prefix, str):
            raise SomatizeTypeError(
                f"names(prefix=) takes a str; got {type(prefix).__name__} {prefix!r:.60}. "
                f'Write store.names("a-run/") or store.names()'
            )
        prefix = normal(prefix)
        found = ("/".join(parts) for parts in self.backend.walk(("names",)))
        return sorted(n for n in found if n.startswith(prefix))

    def runs(self):
        """The names of the runs recorded here, sorted; their summaries and
        states are in ``somatize.record.runs(store)``. In a bucket: the runs
        with a head (``heads/<run>.json``), one LIST."""
        if self.bucket is not None:
            found = (key[6:-5] for key, _ in self.bucket.list("heads") if key.endswith(".json"))
            return sorted(name for name in found if is_run_name(name))
        return run_names(self.backend)

    def link(self, name, digest):
        """Point ``name`` at an object already in the store."""
        self._refuse_if_readonly(f"link({name!r:.300}, …)")
        name = normal(name)
        path = self._ref_path(name)
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise SomatizeValueError(
                f"link({name!r}, {digest!r:.80}): a digest is \"sha256:\" and 64 lowercase hex "
                "digits, as keep() and put() return"
            )
        if not self._has_object(digest):
            raise SomatizeKeyError(
                f"link({name!r}, {digest!r}): no such object in {self!r}. Keep the value "
                "first with store.put(value), which returns its digest."
            )
        self._write_ref(name, path, digest)

    def _write_ref(self, name, path, digest):
        parts = name.split("/")
        self._folder(("tmp",))  # still a folder of this store, not a link out
        try:
            self.backend.replace(("names", *parts), digest.encode())
        except FileInTheWay as e:
            taken = name_of(e.filename or path.parent, self._names)
            if taken.startswith("."):  # names/ itself is a file
                raise DamagedError(
                    f"cannot keep the name {name!r}: {str(self._names)!r} is a file, where the "
                    "store's folder of names belongs. Move that file away."
                ) from None
            raise SomatizeValueError(
                f"cannot keep the name {name!r}: {taken!r} is already a name, and a name cannot "
                f"also be a folder of names. Pick another name, e.g. {name.replace('/', '-')!r}"
            ) from None
        except Refused as e:
            raise DamagedError(
                f"cannot keep the name {name!r}: a folder on its way under {str(self._names)!r} "
                f"is {e}. Remove it from the store (the store never writes through a link)."
            ) from None
        except IsADirectoryError:
            raise SomatizeValueError(
                f"cannot keep the name {name!r}: it is a folder of names ({name}/…). Pick another "
                f"name, e.g. {name + '-value'!r}"
            ) from None

    # ---- values ----------------------------------------------------------------

    def keep(self, name, value):
        """Keep ``value`` under ``name`` (in NFC); returns its digest ``"sha256:…"``."""
        self._refuse_if_readonly(f"keep({name!r:.300}, …)")
        name = normal(name)
        path = self._ref_path(name)
        digest = self.put(value)
        self._healing(lambda: self._write_ref(name, path, digest), f"keep({name!r}, …)")
        return digest

    def put(self, value):
        """Keep ``value`` without a name; returns its digest."""
        self._refuse_if_readonly("put(…)")
        parts = split(value)

        def write():
            self._folder(("tmp",))  # still a folder of this store, not a link out
            return self._writer.put(parts)

        return self._healing(write, "put(…)")

    def _healing(self, write, call):
        """Run ``write``; where the store's folders were deleted under it, make
        them again and run it once more (writing is idempotent)."""
        for attempt in (1, 2):
            try:
                return write()
            except FileNotFoundError as e:
                if attempt == 2:
                    raise DamagedError(
                        f"{call}: {e.filename!r} vanished while writing into {self!r}, twice; "
                        "something deletes the store's folders as it writes. Stop it, then keep again."
                    ) from None
                self._open()
            except Refused as e:
                raise DamagedError(
                    f"{call}: a folder of {self!r} is {e}. Remove it from the store (the store "
                    "never writes through a link); `somatize check` lists what does not belong."
                ) from None
            except OSError as e:
                if e.errno == errno.ENAMETOOLONG:
                    raise SomatizeValueError(
                        f"{call}: the name is too long for this filesystem ({e.strerror}); shorten it "
                        "(each part between '/' at most 255 bytes, the whole at most 1024)"
                    ) from None
                raise

    def digest_of(self, value):
        """The digest ``put(value)`` would return; writes nothing."""
        return digest_of(value)

    def recall(self, name_or_digest, repeated_limit=REPEATED_LIMIT):
        """The value kept under a name, or under a digest ``"sha256:…"``.

        ``repeated_limit``: the most bytes that references to a leaf already
        referenced may add (a value holding one 1 MB array 3 times adds 2 MB;
        each reference is the same array, never a copy). Past it the recall
        is refused before any leaf is read: a store handed to you could
        hold a reference bomb. ``None``: no limit."""
        key = name_or_digest
        if repeated_limit is not None and (type(repeated_limit) is not int or repeated_limit < 0):
            raise SomatizeTypeError(
                f"recall(repeated_limit={repeated_limit!r:.60}) takes a number of bytes (an int >= 0) "
                "or None for no limit, like repeated_limit=4 << 30"
            )
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
            if not self._has_object(digest, lstat_only=True):
                raise SomatizeKeyError(f"no object {digest} in {self!r}; store.names() lists what is kept")
        else:
            self._ref_path(key)
            digest, name = self.lookup(key), normal(key)
            if digest is None:
                raise SomatizeKeyError(self._unknown(name))
        codec, meta, buffers = self._read(digest, name)
        if codec != TREE:
            return self._decode(codec, meta, buffers, self._what(digest, name))
        if not isinstance(meta, dict) or "tree" not in meta:
            raise DamagedError(f"{self._what(digest, name)} is damaged: a manifest without a tree. {_FIX}")
        what = self._what(digest, name)
        if repeated_limit is not None:
            self._refuse_repeats(meta["tree"], key, what, repeated_limit)
        leaves = {}  # digest -> value: a leaf referenced again is not read again

        def fetch(leaf):
            if leaf not in leaves:
                leaves[leaf] = self._recall_leaf(leaf, digest, name)
            return leaves[leaf]

        try:
            return build(meta["tree"], fetch, lambda c, m, b: self._decode(c, m, b, what))
        except Damaged as e:
            raise DamagedError(f"{what} is damaged: {e}. {_FIX}") from None

    def _refuse_repeats(self, tree, key, what, limit):
        """Raise when the references of ``tree`` to leaves it already
        references would add more than ``limit`` bytes: counted from the tree
        and one lstat a leaf, before any leaf is read."""
        counts = {}
        for leaf in references(tree):
            if type(leaf) is str:  # anything else: build says it is damaged
                counts[leaf] = counts.get(leaf, 0) + 1
        repeated, present, refs, leaves = 0, 0, 0, 0
        for leaf, n in counts.items():
            if n == 1 or not DIGEST.fullmatch(leaf):
                continue  # a leaf referenced once adds only the bytes present
            try:
                size = self.backend.size(("objects", leaf[7:9], leaf[9:]))
            except BucketError:
                raise
            except (OSError, Refused):
                continue  # not a file: reading it says what is wrong
            if size is None:
                continue  # missing: reading it says so
            repeated += (n - 1) * size
            present, refs, leaves = present + size, refs + n, leaves + 1
        if repeated > limit:
            raise SomatizeValueError(
                f"{what} was not recalled: it references {leaves:,} leaf object(s) of {_gb(present)} "
                f"{refs:,} times, which would hand back {_gb(present + repeated)}; the repeats add "
                f"{_gb(repeated)}, more than repeated_limit={limit:,} bytes. Each repeat would be the "
                "same value, not a copy, but whatever copies the value would hold it all: a store "
                "someone handed you may hold such a reference bomb. If you trust this store, raise "
                f"the limit: store.recall({key!r}, repeated_limit={_above(repeated)})"
            )

    def _recall_leaf(self, leaf, manifest, name):
        if not DIGEST.fullmatch(leaf):
            raise Damaged(f"it references {leaf!r:.80}, which is not a digest")
        codec, meta, buffers = self._read(leaf, name, part_of=manifest)
        if codec == TREE:
            raise Damaged(f"it references another manifest {leaf}")
        return self._decode(codec, meta, buffers, self._what(leaf, name, manifest))

    def _decode(self, codec_name, meta, buffers, what):
        """A codec's decode, its failure told apart: damage, or the codec's own."""
        if not isinstance(codec_name, str):
            raise DamagedError(f"{what} is damaged: it names no codec. {_FIX}")
        try:
            codec = codec_named(codec_name)
        except SomatizeValueError as e:
            raise SomatizeValueError(f"{what} cannot be read: {e}") from None
        try:
            return codec.decode(meta, buffers)
        except Exception as e:
            if getattr(codec, "raises_on_damage", False):
                raise DamagedError(f"{what} is damaged: {e}. {_FIX}") from e
            raise CodecError(
                f"the codec named {codec_name!r} raised {type(e).__name__} while decoding {what}: "
                f"{e}. The object's bytes are whole (they match their checksum): the fault is "
                "in that codec's decode, not in the store. Fix its decode (or register the "
                "codec that wrote the object) and recall again; the store needs no repair."
            ) from e

    def _unknown(self, name):
        known = self.names()
        if len(known) > AMONG:  # close_names compares the first AMONG: those near the name first
            head = name.split("/")[0]
            known = [n for n in known if n.split("/")[0] == head] or known
        close = close_names(name, known, n=5)
        hint = f" Close names: {', '.join(map(repr, close))}." if close else ""
        return f"no name {name!r} in {self!r}.{hint} store.names() lists every name."

    def _what(self, digest, name, part_of=None):
        what = f"object {digest} ({self._object_path(digest)})"
        if part_of:
            what += f", a part of {part_of}"
        return what + (f", kept as {name!r}," if name else "")

    def _read(self, digest, name, part_of=None):
        try:
            buf = self.backend.read(("objects", digest[7:9], digest[9:]), head=check_head)
        except Damaged as e:
            raise DamagedError(f"{self._what(digest, name, part_of)} is damaged: {e}. {_FIX}") from None
        except (FileNotFoundError, NotADirectoryError):
            raise DamagedError(
                f"{self._what(digest, name, part_of)} is missing from the store. {_FIX}"
            ) from None
        except Refused as e:
            raise DamagedError(
                f"{self._what(digest, name, part_of)} is {e}, not an object the store wrote "
                f"(nothing is followed or read there). {_FIX}"
            ) from None
        except BucketError:
            raise
        except OSError as e:
            raise DamagedError(
                f"{self._what(digest, name, part_of)} cannot be read ({e.strerror}). {_FIX}"
            ) from None
        try:
            parsed = parse(buf, digest)
            # An object under 1 MiB is re-hashed too: microseconds, and proof
            # against more than accidents (see the module docstring); one from
            # a bucket always (it was downloaded whole, and a bucket is shared).
            if (len(buf) < MAP_AT or self.bucket is not None) and digest_in(buf) != digest:
                raise NotThisObject("the file does not hash to its name")
        except NotThisObject as e:
            raise DamagedError(
                f"{self._what(digest, name, part_of)} holds another object's bytes ({e}). {_FIX}"
            ) from None
        except Damaged as e:
            raise DamagedError(f"{self._what(digest, name, part_of)} is damaged: {e}. {_FIX}") from None
        return parsed

    def _object_path(self, digest):
        """Where the object lies: its path (a ``Path``), or in a bucket its URL."""
        return self._writer.path_of(digest) if self.bucket is None else self.backend.where(parts_of(digest))

    def _has_object(self, digest, lstat_only=False):
        """An object file is there (a regular file, reached without a link;
        ``lstat_only``: anything by its name, which reading it then names)."""
        try:
            return self.backend.size(("objects", digest[7:9], digest[9:])) is not None
        except BucketError:
            raise
        except Refused as e:
            return lstat_only and e.part is None  # no folder on the way is one: no such object
        except OSError:
            return False

    # ---- checking --------------------------------------------------------------

    def check(self):
        """Every problem in the store, one line each naming the path; [] when sound.

        Re-hashes every object with sha256, checks that every manifest's parts
        and every name's object exist, and lists whatever is not what the
        store writes (links, FIFOs, devices, stray files). Files in tmp/ are
        ignored: they are writes a crash interrupted, never visible under a
        name. Never raises for what it finds on disk."""
        return _check(self)



def _gb(n):
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


def _above(n):
    """A limit written as a person would, just above ``n`` bytes: ``8 << 30``."""
    return f"{-(-n >> 30)} << 30"


_FIX = (
    "Run store.check() (or `somatize check`) to list every damaged file; delete those files "
    "and keep their values again to repair the store"
)
