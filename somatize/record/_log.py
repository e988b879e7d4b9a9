"""The bytes of one run's record: framed fact blocks, their index, the series,
and the one reader of a log's tail (queries, recovery and check share it).

The rule kept here: every byte is appended, never rewritten, and each append is
one ``write()`` call; a reader trusts a block only when its checksum says it
is whole, so a torn tail is recognised and never read as data. Every file of
a run is read through ``_files``.

    block  = header | payload | checksum
    header = b"SMZB", u32 payload length, u32 fact count,
             i64 first forward, i64 last forward            (little endian)
    payload  = orjson of [[forward, [fact, ...]], ...]
    checksum = xxh3_64 of header + payload, u64

    index.bin         = (first, last, offset, length) int64 per block
    series/<name>.bin = (forward int64, value float64) per record
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np
import orjson
import xxhash

from .._base import files
from .._base.errors import DamagedError
from . import _files

MAGIC = b"SMZB"
HEADER = struct.Struct("<4sIIqq")
CHECKSUM = struct.Struct("<Q")
FRAME = HEADER.size + CHECKSUM.size
BLOCK_FACTS = 512  # small enough that one forward decodes in well under 1 ms
INDEX = np.dtype([("first", "<i8"), ("last", "<i8"), ("offset", "<i8"), ("length", "<i8")])
POINT = np.dtype([("forward", "<i8"), ("value", "<f8")])

_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


# -- writing blocks -------------------------------------------------------------


def _loose(value):
    # A value orjson has no encoder for is kept as its text rather than failing
    # a whole flush on the background thread, far from the code that made it.
    return str(value)


def _encodable(value, depth=0):
    """``value`` with what orjson refuses whatever ``default`` says (ints past
    64 bits, nesting past 254 levels) replaced by its ``str``."""
    kind = value.__class__
    if kind is int:
        return value if -(1 << 63) <= value < (1 << 64) else str(value)
    if depth >= 200:
        return str(value) if kind in (dict, list, tuple) else value
    if kind is dict:
        return {k: _encodable(v, depth + 1) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_encodable(v, depth + 1) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):  # an int subclass
        return _encodable(int(value), depth)
    return value


# JSON has no NaN nor infinity (orjson writes null). A fact's top-level field
# that is not finite is written as null and named, with its text, under this
# key, so it reads back as itself and a reader tells "not finite" from "missing".
NON_FINITE = "~non_finite"


def _dumps(chunk) -> bytes:
    try:
        out = orjson.dumps(chunk, default=_loose, option=_DUMPS_OPTIONS)
    except (orjson.JSONEncodeError, RecursionError):
        # Rare: some fact in this block cannot be encoded even loosely. Only
        # now is each fact looked at, so the hot path pays nothing for it.
        chunk = [[fw, [_one(fact) for fact in facts]] for fw, facts in chunk]
        out = orjson.dumps(chunk, default=_loose, option=_DUMPS_OPTIONS)
    if b"null" in out:  # a None, or a value that was not finite: only then is each fact looked at
        marked = [[fw, [_mark_non_finite(fact) for fact in facts]] for fw, facts in chunk]
        out = orjson.dumps(marked, default=_loose, option=_DUMPS_OPTIONS)
    return out


def _mark_non_finite(fact):
    if not isinstance(fact, dict):
        return fact
    odd = {k: repr(v) for k, v in fact.items() if isinstance(v, float) and not math.isfinite(v)}
    return {**fact, NON_FINITE: odd} if odd else fact


def _unmark_non_finite(groups):
    for group in groups:
        for fact in group[1]:
            odd = fact.pop(NON_FINITE, None) if isinstance(fact, dict) else None
            if isinstance(odd, dict):
                for k, text in odd.items():
                    if k in fact and fact[k] is None and text in ("nan", "inf", "-inf"):
                        fact[k] = float(text)
    return groups


def _one(fact):
    try:
        orjson.dumps(fact, default=_loose, option=_DUMPS_OPTIONS)
        return fact
    except (orjson.JSONEncodeError, RecursionError):
        pass
    fixed = _encodable(fact)
    try:
        orjson.dumps(fixed, default=_loose, option=_DUMPS_OPTIONS)
        return fixed
    except (orjson.JSONEncodeError, RecursionError):
        return {"fact": str(fact.get("fact")) if isinstance(fact, dict) else "?", "unencodable": str(fact)[:10_000]}


def encode_blocks(groups) -> tuple[bytes, list[tuple[int, int, int, int]]]:
    """``groups``: [(forward, [fact, ...]), ...] in forward order. Returns the
    framed bytes and one (first, last, offset-within, length) row per block."""
    out = bytearray()
    rows = []
    chunk: list = []
    size = 0
    for forward, facts in groups:
        n = len(facts)
        if size + n < BLOCK_FACTS:  # the whole group, and the block not full yet: no copy
            if n:
                chunk.append([forward, facts])
                size += n
            continue
        start = 0
        while start < n:
            take = facts[start : start + BLOCK_FACTS - size]
            chunk.append([forward, take])
            size += len(take)
            start += len(take)
            if size >= BLOCK_FACTS:
                rows.append(_frame(out, chunk, size))
                chunk, size = [], 0
    if chunk:
        rows.append(_frame(out, chunk, size))
    return bytes(out), rows


def _frame(out: bytearray, chunk, count) -> tuple[int, int, int, int]:
    payload = _dumps(chunk)
    head = HEADER.pack(MAGIC, len(payload), count, chunk[0][0], chunk[-1][0])
    offset = len(out)
    out += head
    out += payload
    out += CHECKSUM.pack(xxhash.xxh3_64_intdigest(head + payload))
    return (chunk[0][0], chunk[-1][0], offset, len(out) - offset)


# -- reading blocks ---------------------------------------------------------------


class Torn(Exception):
    """Bytes at ``offset`` are not a whole, verified block."""

    def __init__(self, offset: int, why: str):
        super().__init__(f"byte {offset}: {why}")
        self.offset = offset
        self.why = why


def read_block(data, offset: int, verify: bool = True):
    """Parse the block at ``offset`` of ``data`` (bytes or mmap-like).
    Returns (first, last, count, length, payload bytes). Raises Torn."""
    end = len(data)
    if end - offset < FRAME:
        raise Torn(offset, f"{end - offset} bytes, too short for a block")
    magic, n, count, first, last = HEADER.unpack_from(data, offset)
    if magic != MAGIC:
        raise Torn(offset, "no block starts here")
    length = FRAME + n
    if end - offset < length:
        raise Torn(offset, f"block of {length} bytes cut after {end - offset}")
    body = bytes(data[offset : offset + HEADER.size + n])
    if verify:
        (want,) = CHECKSUM.unpack_from(data, offset + HEADER.size + n)
        if xxhash.xxh3_64_intdigest(body) != want:
            raise Torn(offset, "checksum does not match")
    return first, last, count, length, body[HEADER.size :]


def decode(payload: bytes):
    groups = orjson.loads(payload)
    if NON_FINITE.encode() in payload:
        _unmark_non_finite(groups)
    return groups


class Tail:
    """The whole blocks of a log past byte ``start``: what a flush wrote after
    the last one its summary counts (one under way, or one a kill cut short).

    ``blocks``: (first, last, count, offset, length, payload) of each whole
    block, in order; ``torn``: the offset of the first bytes that are not a
    whole block, or None; ``end``: where the whole blocks end."""

    def __init__(self, data: bytes, start: int):
        self.blocks: list = []
        self.torn = None
        offset = start
        while offset < start + len(data):
            try:
                first, last, count, length, payload = read_block(data, offset - start)
            except Torn as t:
                self.torn, self.why = offset, t.why
                break
            self.blocks.append((first, last, count, offset, length, payload))
            offset += length
        self.end = offset if self.torn is None else self.torn

    def groups(self):
        """[(forward, [facts])] of the whole blocks, in order."""
        return [tuple(g) for b in self.blocks for g in decode(b[5])]

    def entries(self) -> np.ndarray:
        return np.array([(b[0], b[1], b[3], b[4]) for b in self.blocks], INDEX)


def read_tail(log: Path, start: int, limit: int = 1 << 31) -> Tail:
    """The one reader of a log's tail (queries, recovery and check use it)."""
    data = _files.read_bytes(log, limit, start) or b""
    return Tail(data, start)


# -- index and series --------------------------------------------------------------


def index_bytes(rows, base: int) -> bytes:
    table = np.array([(f, length, base + o, n) for f, length, o, n in rows], INDEX)
    return table.tobytes()


def checksum(data) -> int:
    return xxhash.xxh3_64_intdigest(data)


def verified(path: Path, size: int, want: int | None, run: str, what: str) -> bytes:
    """The first ``size`` bytes of ``path``, which a completed flush wrote and
    whose checksum the summary holds; DamagedError if they are not those."""
    try:
        data = _files.read_bytes(path, size) or b""
    except _files.NotAFile as e:
        raise _unverified(f"run {run!r}: {e}", str(e), path) from None
    if len(data) < size:
        raise _unverified(f"run {run!r}: {what} {path.name} holds {len(data)} bytes, a completed flush wrote {size}",
                          f"it holds {len(data)} bytes, a completed flush wrote {size}", path)
    if want is not None and checksum(data) != want:
        raise _unverified(f"run {run!r}: {what} {path.name} does not match the checksum its summary holds",
                          "its bytes do not match the checksum its summary holds", path)
    return data


def _unverified(said, why, path) -> DamagedError:
    """The DamagedError of ``verified``: ``said`` and the fix; ``why``, the
    damage alone, kept on it for a caller that names the file itself."""
    e = DamagedError(f"{said}; {_fix(path)}")
    e.why = why
    return e


def _fix(path) -> str:
    return ("run `somatize check` on the store; the run's facts still read with facts(store, run) "
            f"(its log is the truth: {path.parent})")


def series_file(folder: Path, name: str) -> Path:
    return folder / series_file_name(name)


def series_file_name(name: str) -> str:
    # Names are free text (a fact name, a node name); the file name must not be.
    return quote(name, safe="") + ".bin"


def fits_a_file(name: str) -> bool:
    """Whether a series of this name can have a file (names are at most 255
    bytes on the file systems we run on; quoting can triple a name)."""
    return len(quote(name, safe="")) + 4 <= 255


def points_of(data: bytes) -> np.ndarray:
    whole = len(data) - len(data) % POINT.itemsize
    return np.frombuffer(data, POINT, whole // POINT.itemsize)


def points_bytes(forwards: list, values: list) -> bytes:
    """Series records; a value too large for a float64 becomes ±inf."""
    table = np.empty(len(forwards), POINT)
    table["forward"] = forwards
    try:
        table["value"] = values
    except (OverflowError, TypeError, ValueError):
        table["value"] = [_as_float(v) for v in values]
    return table.tobytes()


def _as_float(v) -> float:
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def series_names(folder: Path) -> list[str]:
    try:  # series/ itself is not followed either
        fs, parts = _files.located(folder)
        listed = fs.list(parts)
    except (OSError, files.Refused):
        return []
    return names_in(listed)


def names_in(listed) -> list[str]:
    """The series that the entries of a run's ``series/`` hold (``(name, kind)``)."""
    return sorted(unquote(f[:-4]) for f, _ in listed if f.endswith(".bin"))
