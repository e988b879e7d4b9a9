"""Objects: how a value becomes immutable, self-checking bytes, and back.

The rule kept here: an object's bytes say what they are and prove they are
whole. Decoding runs no code named by the data: only a codec registered under
the name the header gives, or the tree format below, which is plain JSON.

Object format (version 2), all integers little-endian::

    offset 0     b"SMZ2"
    offset 4     u32  H, the header's length
    offset 8     header, JSON: {"codec": name, "meta": {...}, "sizes": [n0, n1, ...]}
                 zero padding up to a multiple of 64
                 buffer 0, zero padding up to a multiple of 64, buffer 1, ...
    then 16      xxh3_128 of every byte before it (the checksum)
    last 32      sha256 of every byte before it: the object's own digest

Buffers start 64-byte aligned (relative to the file), so arrays decoded in
place are aligned. The checksum lets a reader reject damage or truncation at
memory speed; the digest of an object is ``sha256:`` + sha256 of all its
bytes but the last 32, which repeat it, so ``check`` can re-hash a file
against its name and a reader can tell, for free, that the bytes under a name
are that object's and not another's (a whole file copied over another passes
its own checksum). Version 1 (``SMZ1``) had no last 32 bytes: it is still
read, and its identity proven by re-hashing it whole.

A header is bounded by what the file holds: its length, its buffer count
(at most ``MAX_BUFFERS``) and their sizes are checked against the file's
size before a buffer is looked at.

Structured values (None, bool, int, float, str, list, tuple, dict with str
keys, nested) are kept part by part: every leaf whose buffers exceed
``INLINE_MAX`` bytes becomes an object of its own, and the structure becomes a
manifest object, codec ``somatize/tree``, whose meta is ``{"tree": node}``.
A node is a JSON scalar (None, bool, str, an int within 64 bits, a finite
float) or a list tagged by its first item::

    ["l", item, ...]             list
    ["t", item, ...]             tuple
    ["d", key, value, ...]       dict, keys are str, order kept
    ["i", "123…"]                int beyond 64 bits, in decimal
    ["f", "nan" | "inf" | "-inf"]
    ["r", "sha256:…"]            a leaf kept as its own object
    ["b", codec, meta, [base64 buffer, ...]]   a small leaf, inline

So two structures that share a large array share its object, and a manifest
never references another manifest (no cycles can be written, none are read).
Subclasses of dict, list, tuple, int, float and str come back as the base type.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import struct

import orjson
import xxhash

from .._base.codecs import codec_for, how_to_register
from .._base.errors import SomatizeTypeError, SomatizeValueError
from .._base.values import Data, Opaque

MAGIC = b"SMZ2"
MAGIC_V1 = b"SMZ1"  # no digest at the end; read, never written
ALIGN = 64
TRAILER = 16
TAG = 32  # the digest, repeated at the end
MAX_BUFFERS = 1 << 16  # per object; a codec writes a few
TREE = "somatize/tree"
INLINE_MAX = 256  # a leaf this small costs more as a file than as base64
MAX_DEPTH = 200  # JSON (orjson) writes at most 255 levels
_TOO_DEEP = (
    f"the value is nested more than {MAX_DEPTH} levels deep, too deep to keep; flatten it, "
    "or keep its deep parts under names of their own"
)
_ZEROS = bytes(ALIGN)
_CHUNK = 1 << 20  # fits in L2: the second hash reads it from cache
_INT64 = (-(2**63), 2**63)


class Damaged(Exception):
    """Bytes that are not a whole object; the store names the file and the name."""


class NotThisObject(Damaged):
    """Whole bytes, but another object's: a file copied over another."""


def _padding(n):
    return -n % ALIGN


def _byte_view(buffer):
    view = memoryview(buffer)
    if view.format == "B" and view.ndim == 1:
        return view
    if not view.c_contiguous:
        view = memoryview(view.tobytes())  # a codec handed a strided view: copy once
    return view.cast("B")


def _to_json(obj):
    if isinstance(obj, Encoded):
        return obj.digest  # a leaf inside a manifest, hashed once its bytes are final
    raise TypeError


class Encoded:
    """An object ready to write: ``parts`` concatenated are its bytes.

    The buffers are the codec's own memory, never copied; ``digest`` is
    computed on first use (or by a writer hashing while it writes)."""

    __slots__ = ("codec", "parts", "size", "_digest")

    def __init__(self, codec, meta, buffers):
        views = [_byte_view(b) for b in buffers]
        try:
            header = orjson.dumps(
                {"codec": codec, "meta": meta, "sizes": [v.nbytes for v in views]}, default=_to_json
            )
        except orjson.JSONEncodeError as e:
            raise SomatizeValueError(
                f"the codec {codec!r} returned meta that is not JSON ({e}); a codec's "
                "meta must be made of dicts, lists, str, finite floats and 64-bit ints"
            ) from None
        head = MAGIC + struct.pack("<I", len(header)) + header
        parts = [head + _ZEROS[: _padding(len(head))]]
        for v in views:
            parts.append(v)
            if _padding(v.nbytes):
                parts.append(_ZEROS[: _padding(v.nbytes)])
        self.codec = codec
        self.parts = parts  # the trailer is appended by seal()
        self.size = sum(memoryview(p).nbytes for p in parts) + TRAILER + TAG
        self._digest = None

    def seal(self):
        """Checksum and digest in one sweep over the bytes: each chunk is
        handed to xxh3 and sha256 while it is in the CPU's cache, so a big
        buffer is read from memory once (the trailer's checksum is part of
        what the digest covers, so both must be known before the digest)."""
        if self._digest is not None:
            return self._digest
        check, h = xxhash.xxh3_128(), hashlib.sha256()
        for p in self.parts:
            view = memoryview(p)
            for at in range(0, view.nbytes, _CHUNK):
                chunk = view[at : at + _CHUNK]
                check.update(chunk)
                h.update(chunk)
        trailer = check.digest()
        h.update(trailer)
        tag = h.digest()
        self.parts += [trailer, tag]
        self._digest = "sha256:" + tag.hex()
        return self._digest

    hash = seal

    @property
    def digest(self):
        return self._digest or self.hash()


def parse(buf, digest=None):
    """``(codec, meta, buffers)`` from an object's bytes, verified; raises ``Damaged``.

    With ``digest``, also proves the bytes are that object's (``NotThisObject``
    if not). The header is checked against the bytes present before anything
    it declares is looked at. The buffers are views into ``buf`` (no copy)."""
    view = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
    size = view.nbytes
    magic, length, body = _frame(view[:8], size)
    codec, meta, sizes, ends = _layout(view[8 : 8 + length], length, body)
    if digest is not None:
        if magic == MAGIC:
            if bytes(view[body + TRAILER :]) != bytes.fromhex(digest[7:]):
                raise NotThisObject(f"it holds the bytes of object sha256:{bytes(view[body + TRAILER:]).hex()}")
        elif "sha256:" + hashlib.sha256(view).hexdigest() != digest:  # version 1: no digest inside
            raise NotThisObject("it holds another object's bytes: the file does not hash to its name")
    if xxhash.xxh3_128(view[:body]).digest() != view[body : body + TRAILER]:
        raise Damaged("its bytes do not match their checksum: damaged or truncated")
    return codec, meta, [view[at : at + n] for at, n in zip(ends, sizes)]


def check_head(fd, size):
    """Raise ``Damaged`` unless the object file open as ``fd`` holds the
    ``size`` bytes its header declares: read before a file is mapped, so a
    huge or sparse file is refused without being read."""
    first = os.pread(fd, 8, 0)
    _, length, body = _frame(first, size)
    _layout(os.pread(fd, length, 8), length, body)


def _frame(first, size):
    """``(magic, header length, where the checksum starts)`` from the first 8 bytes."""
    magic = bytes(first[:4])
    if size >= 4 and magic not in (MAGIC, MAGIC_V1):
        raise Damaged("not a somatize object (its first bytes are not SMZ2)")
    tail = TRAILER + (TAG if magic == MAGIC else 0)
    if size < 8 + tail:
        raise Damaged(f"truncated: {size} bytes, shorter than any object")
    (length,) = struct.unpack("<I", first[4:8])
    body = size - tail
    if 8 + length > body:
        raise Damaged(f"its header says it is {length:,} bytes long; the file holds {size:,}")
    return magic, length, body


def _layout(header, length, body):
    """``(codec, meta, sizes, offsets)`` from the header, checked to describe
    exactly ``body`` bytes (every count and size bounded by them)."""
    try:
        header = orjson.loads(header)
        codec, meta, sizes = header["codec"], header["meta"], header["sizes"]
        if not isinstance(codec, str) or not isinstance(sizes, list):
            raise TypeError
        if len(sizes) > MAX_BUFFERS:
            raise Damaged(f"its header declares {len(sizes):,} buffers; an object holds at most {MAX_BUFFERS:,}")
        if not all(type(n) is int and 0 <= n <= body for n in sizes):
            raise TypeError
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise Damaged("its header is not an object header") from None
    offset = 8 + length + _padding(8 + length)
    ends = []
    for n in sizes:  # Python ints: no sum overflows
        ends.append(offset)
        offset += n + _padding(n)
        if offset > body:
            break
    if offset != body:
        raise Damaged(f"its header describes {'more than ' if offset > body else ''}{offset:,} bytes "
                      f"before the checksum; the file holds {body:,}")
    return codec, meta, sizes, ends


def digest_in(buf):
    """The digest the bytes of an object hash to (for ``check``)."""
    view = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
    whole = view if bytes(view[:4]) != MAGIC else view[: max(0, view.nbytes - TAG)]
    return "sha256:" + hashlib.sha256(whole).hexdigest()


# ---- structured values -------------------------------------------------------


def _where(path):
    return "value" + "".join(f"[{p!r}]" for p in path)


class Split:
    """A value cut into objects: the ``leaves`` (each once) to write first,
    then ``top()``, the object that stands for the value.

    ``top()`` is built on demand because a manifest names its leaves by
    digest: a writer hashes each large leaf while writing it, so asking for
    the manifest first would hash every leaf twice over."""

    __slots__ = ("leaves", "_tree", "_top")

    def __init__(self, leaves, tree=None, top=None):
        self.leaves, self._tree, self._top = leaves, tree, top

    def top(self):
        if self._top is None:
            self._top = Encoded(TREE, {"tree": self._tree}, [])
        return self._top


def split(value):
    """``value`` as objects (see ``Split``); nothing is hashed yet."""
    value = _unwrapped(value, ())
    if not isinstance(value, (dict, list, tuple, str, int, float, type(None))):
        codec = codec_for(value)
        if codec is None:
            raise SomatizeTypeError(how_to_register(value))
        meta, buffers = codec.encode(value)
        return Split([], top=Encoded(codec.name, meta, buffers))
    leaves = {}
    tree = _node(value, (), leaves, set())
    return Split([leaf for _, leaf in leaves.values()], tree=tree)


def _node(v, path, leaves, open_):
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if _INT64[0] <= v < _INT64[1] else ["i", _decimal(v, path)]
    if t is float:
        return v if math.isfinite(v) else ["f", repr(v)]
    if t in (list, tuple, dict):
        return _container(v, t, path, leaves, open_)
    if t is Data or t is Opaque:
        return _node(_unwrapped(v, path), path, leaves, open_)
    codec = codec_for(v)
    if codec is not None:
        return _leaf(codec, v, leaves)
    for base in (dict, list, tuple):
        if isinstance(v, base):
            return _container(v, base, path, leaves, open_)
    for base in (bool, int, float, str):
        if isinstance(v, base):
            return _node(base(v), path, leaves, open_)
    raise SomatizeTypeError(f"{_where(path)}: {how_to_register(v)}")


def _unwrapped(v, path):
    """``Data(v)`` is kept as its data; ``Opaque(v)`` cannot be kept at all."""
    if type(v) is Opaque:
        raise SomatizeTypeError(
            f"{_where(path)} is an Opaque: it stays in this process and is never kept. Keep the "
            "data instead: store.keep(name, Data(x)) or the bare value"
        )
    if type(v) is Data:
        codec = codec_for(v.value)
        as_data = getattr(codec, "as_data", None)
        return as_data(v.value) if as_data is not None else v.value
    return v


def _container(v, kind, path, leaves, open_):
    if len(path) >= MAX_DEPTH:
        raise SomatizeValueError(_TOO_DEEP)
    if id(v) in open_:
        raise SomatizeValueError(
            f"{_where(path)} contains itself; a kept value must be a tree, not a cycle"
        )
    open_.add(id(v))
    try:
        if kind is dict:
            node = ["d"]
            for k, item in v.items():
                if type(k) is not str:
                    raise SomatizeTypeError(
                        f"{_where(path)} has the key {k!r} ({type(k).__name__}); kept dicts "
                        f"need str keys: write {{str(k): v for k, v in d.items()}}"
                    )
                node += [k, _node(item, path + (k,), leaves, open_)]
            return node
        node = ["l" if kind is list else "t"]
        node += [_node(item, path + (i,), leaves, open_) for i, item in enumerate(v)]
        return node
    finally:
        open_.discard(id(v))


def _decimal(v, path):
    try:
        return str(v)
    except ValueError:
        raise SomatizeValueError(
            f"{_where(path)} is an int too long to write in decimal; keep it as bytes "
            "(v.to_bytes(...)) instead"
        ) from None


def _leaf(codec, v, leaves):
    meta, buffers = codec.encode(v)
    views = [_byte_view(b) for b in buffers]
    if sum(b.nbytes for b in views) <= INLINE_MAX:
        return ["b", codec.name, meta, [base64.b64encode(b).decode() for b in views]]
    leaf = Encoded(codec.name, meta, views)
    # The same object twice in one value is one leaf (equal content, one
    # file). The object is held beside its leaf: ``v`` may be a temporary
    # (what Data(t) unwraps to), and a freed object's id is soon reused.
    return ["r", leaves.setdefault(id(v), (v, leaf))[1]]


def build(tree, fetch, decode, depth=0):
    """The value a manifest's tree stands for; ``fetch(digest)`` gives a leaf,
    ``decode(codec, meta, buffers)`` decodes an inline one."""
    if depth > MAX_DEPTH:  # never written by keep; a hostile manifest must not recurse away
        raise Damaged(f"its tree is nested more than {MAX_DEPTH} levels deep")
    if not isinstance(tree, list):
        if tree is None or isinstance(tree, (bool, int, float, str)):
            return tree
        raise Damaged(f"its tree holds {type(tree).__name__}")
    if not tree or not isinstance(tree[0], str):
        raise Damaged("its tree holds an untagged list")
    tag, rest = tree[0], tree[1:]
    if tag == "l":
        return [build(x, fetch, decode, depth + 1) for x in rest]
    if tag == "t":
        return tuple(build(x, fetch, decode, depth + 1) for x in rest)
    if tag == "d" and len(rest) % 2 == 0 and all(type(k) is str for k in rest[::2]):
        return {k: build(x, fetch, decode, depth + 1) for k, x in zip(rest[::2], rest[1::2])}
    if tag == "i" and len(rest) == 1 and type(rest[0]) is str:
        try:
            return int(rest[0])
        except ValueError:  # not decimal, or more digits than Python converts
            raise Damaged(f"its tree holds an int that is not one ({rest[0]!r:.40})") from None
    if tag == "f" and rest in (["nan"], ["inf"], ["-inf"]):
        return float(rest[0])
    if tag == "r" and len(rest) == 1 and type(rest[0]) is str:
        return fetch(rest[0])
    if tag == "b" and len(rest) == 3 and type(rest[0]) is str and isinstance(rest[2], list):
        name, meta, encoded = rest
        try:
            buffers = [memoryview(bytearray(base64.b64decode(s, validate=True))) for s in encoded]
        except (ValueError, TypeError):
            raise Damaged("its tree holds an inline leaf that is not base64") from None
        return decode(name, meta, buffers)
    raise Damaged(f"its tree holds an unknown node tagged {tag!r:.40}")


def references(tree):
    """Every leaf digest a manifest's tree references (for ``check``)."""
    found = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list) and node:
            if node[0] == "r" and len(node) == 2:
                found.append(node[1])
            elif node[0] in ("l", "t", "d"):
                stack.extend(node[1:])
    return found
