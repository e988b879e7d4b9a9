"""The bytes of one run's record: framed fact blocks, their index, the series.

The rule kept here: every byte is appended, never rewritten, and each append is
one ``write()`` call; a reader trusts a block only when its checksum says it
is whole, so a torn tail is recognised and never read as data.

    block  = header | payload | checksum
    header = b"SMZB", u32 payload length, u32 fact count,
             i64 first forward, i64 last forward            (little endian)
    payload  = orjson of [[forward, [fact, ...]], ...]
    checksum = xxh3_64 of header + payload, u64

    index.bin         = (first, last, offset, length) int64 per block
    series/<name>.bin = (forward int64, value float64) per record
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np
import orjson
import xxhash

MAGIC = b"SMZB"
HEADER = struct.Struct("<4sIIqq")
CHECKSUM = struct.Struct("<Q")
FRAME = HEADER.size + CHECKSUM.size
BLOCK_FACTS = 512  # small enough that one forward decodes in well under 1 ms
INDEX = np.dtype([("first", "<i8"), ("last", "<i8"), ("offset", "<i8"), ("length", "<i8")])
POINT = np.dtype([("forward", "<i8"), ("value", "<f8")])

_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _loose(value):
    # A fact field orjson cannot encode is kept as its text rather than failing
    # a whole flush on the background thread, far from the code that made it.
    return str(value)


def encode_blocks(groups) -> tuple[bytes, list[tuple[int, int, int, int]]]:
    """``groups``: [(forward, [fact, ...]), ...] in forward order. Returns the
    framed bytes and one (first, last, offset-within, length) row per block."""
    out = bytearray()
    rows = []
    chunk: list = []
    size = 0
    for forward, facts in groups:
        start = 0
        while start < len(facts):
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
    payload = orjson.dumps(chunk, default=_loose, option=_DUMPS_OPTIONS)
    head = HEADER.pack(MAGIC, len(payload), count, chunk[0][0], chunk[-1][0])
    offset = len(out)
    out += head
    out += payload
    out += CHECKSUM.pack(xxhash.xxh3_64_intdigest(head + payload))
    return (chunk[0][0], chunk[-1][0], offset, len(out) - offset)


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
    return orjson.loads(payload)


def scan(data, offset: int, verify: bool = True):
    """Yield (first, last, count, offset, length) for each whole block from
    ``offset``; stop at the end, or raise Torn at the first that is not whole."""
    while offset < len(data):
        first, last, count, length, _ = read_block(data, offset, verify)
        yield first, last, count, offset, length
        offset += length


def read_index(path: Path) -> np.ndarray:
    """The index, less a partial trailing entry (an append cut by a kill)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return np.empty(0, INDEX)
    whole = len(raw) - len(raw) % INDEX.itemsize
    return np.frombuffer(raw[:whole], INDEX)


def index_bytes(rows, base: int) -> bytes:
    table = np.array([(f, l, base + o, n) for f, l, o, n in rows], INDEX)
    return table.tobytes()


def series_file(folder: Path, name: str) -> Path:
    # Names are free text (a fact name, a node name); the file name must not be.
    return folder / (quote(name, safe="") + ".bin")


def fits_a_file(name: str) -> bool:
    """Whether a series of this name can have a file (names are at most 255
    bytes on the file systems we run on; quoting can triple a name)."""
    return len(quote(name, safe="")) + 4 <= 255


def series_names(folder: Path) -> list[str]:
    try:
        files = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(unquote(f[:-4]) for f in files if f.endswith(".bin"))


def read_series(path: Path, limit: int | None = None) -> np.ndarray:
    """Points of one series; a partial trailing record is ignored."""
    try:
        with open(path, "rb") as f:
            raw = f.read() if limit is None else f.read(limit)
    except FileNotFoundError:
        return np.empty(0, POINT)
    whole = len(raw) - len(raw) % POINT.itemsize
    return np.frombuffer(raw[:whole], POINT)


def points_bytes(forwards: list, values: list) -> bytes:
    table = np.empty(len(forwards), POINT)
    table["forward"] = forwards
    table["value"] = values
    return table.tobytes()
