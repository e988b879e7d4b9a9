"""A run in a bucket, as bytes: its segments and its head.

The rule kept here: a segment is read only once it proves itself. A run in
a bucket is a row of immutable segments, ``runs/<run>/seg/<n:010d>``, each
what its writer's local copy of the run committed since the one before;
and one small head, ``heads/<run>.json``, replaced at each segment, saying
how many there are. Both are hostile input: read here strictly, every
field's type and every size bounded by the bytes present, a file named only
as a run's files are named, and ``Broken`` (saying which) for anything else.

A segment::

    MAGIC  b"SMZSEG1\\n"
    u32    the header's length (little-endian), then the header (JSON):
           {"run", "n", "writer", "entries": [[file, offset, length], ...],
            "summary": the summary's length (0: none in this segment),
            "files": {file: [size, xxh3]} (each file after this segment),
            "body": the xxh3-128 of the body, hex}
    body   each entry's bytes in turn, then the summary.json bytes

An entry says ``file := file[:offset] + bytes``: an append where ``offset`` is
the file's size, a file cut and written again (a rewound run) where it is
less; never past the file's end. ``file`` is ``facts.log``, ``index.bin`` or
``series/<name>.bin`` (the local names, ``_log.series_file_name``).

A head (JSON): {"format", "run", "writer", "seq", "segments", "state",
"updated", "files", "summary"}: ``writer`` and ``seq`` make every head its
writer replaces of other bytes than the one before (a write whose answer was
lost is known by its bytes); ``updated`` (the writer's clock) is how a
reader tells a writer that stopped (``_mirror.STALE_S``).
"""

from __future__ import annotations

import struct
from urllib.parse import quote, unquote

import orjson
import xxhash

from ._runs import INDEX, LOG, SERIES
from ._summary import MAX_BYTES, STATES

MAGIC = b"SMZSEG1\n"
_LENGTH = struct.Struct("<I")
HEADER_LIMIT = 1 << 22  # bytes of a segment's header: a few hundred thousand series files
SEGMENT_BYTES = 1 << 24  # bytes of files a segment carries at most (a larger commit goes in several)
SEGMENT_LIMIT = SEGMENT_BYTES + MAX_BYTES + HEADER_LIMIT + 64  # the most a reader fetches of one segment
HEAD_LIMIT = MAX_BYTES + (1 << 20)  # a head holds a summary and the files' sizes
HEAD_FORMAT = 1
NUMBER = 10  # digits of a segment's number in its key
SEGMENTS_LIMIT = 10**NUMBER - 1


class Broken(Exception):
    """A segment or head that is not one a writer of ours made; the message says which part."""


def segment_key(run: str, n: int) -> str:
    return f"runs/{run}/seg/{n:0{NUMBER}d}"


def head_key(run: str) -> str:
    return f"heads/{run}.json"


def run_of_head(key: str) -> str | None:
    """The run a key of ``heads/`` is the head of (None: no head's name)."""
    if key.startswith("heads/") and key.endswith(".json") and key.count("/") == 1:
        return key[len("heads/"):-len(".json")] or None
    return None


def file_ok(name) -> bool:
    """Whether ``name`` names a run's file as a segment may: the log, the
    index, or a series by its quoted name (one part, as the Recorder names it)."""
    if name in (LOG, INDEX):
        return True
    if not isinstance(name, str) or not name.startswith(SERIES + "/") or not name.endswith(".bin"):
        return False
    quoted = name[len(SERIES) + 1:-4]
    return bool(quoted) and len(quoted) + 4 <= 255 and quote(unquote(quoted), safe="") == quoted


def encode(run, n, writer, entries, summary, files) -> bytes:
    """Segment ``n`` of ``run``: ``entries`` ``[(file, offset, bytes)]``,
    ``summary`` (bytes, or b"" for none), ``files`` ``{file: [size, xxh3]}``."""
    body = [data for _, _, data in entries] + [summary]
    h = xxhash.xxh3_128()
    for part in body:
        h.update(part)
    header = orjson.dumps({
        "run": run, "n": n, "writer": writer,
        "entries": [[name, offset, len(data)] for name, offset, data in entries],
        "summary": len(summary), "files": files, "body": h.hexdigest(),
    })
    return b"".join([MAGIC, _LENGTH.pack(len(header)), header, *body])


class Segment:
    """A segment read back: ``header`` (checked), ``entries`` ``[(file,
    offset, memoryview)]``, ``summary`` (bytes, b"" for none)."""

    __slots__ = ("n", "writer", "entries", "summary", "files")

    def __init__(self, n, writer, entries, summary, files):
        self.n, self.writer, self.entries, self.summary, self.files = n, writer, entries, summary, files


def decode(data: bytes, run: str, n: int) -> Segment:
    """Segment ``n`` of ``run`` from its bytes; ``Broken`` saying what does
    not read (a wrong run or number, a size past the bytes present, a body
    whose hash is not the header's, a file no run has)."""
    if len(data) < len(MAGIC) + _LENGTH.size or data[:len(MAGIC)] != MAGIC:
        raise Broken("does not begin as a segment does")
    start = len(MAGIC) + _LENGTH.size
    (length,) = _LENGTH.unpack_from(data, len(MAGIC))
    if length > HEADER_LIMIT or start + length > len(data):
        raise Broken(f"says its header holds {length} bytes, past the {len(data) - start} there")
    try:
        header = orjson.loads(data[start:start + length])
    except orjson.JSONDecodeError as e:
        raise Broken(f"has a header that is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise Broken("has a header that is not a JSON object")
    if header.get("run") != run or header.get("n") != n or header.get("n").__class__ is not int:
        raise Broken(f"says it is segment {header.get('n')!r:.20} of run {header.get('run')!r:.80}, "
                     f"not segment {n} of {run!r}")
    writer = header.get("writer")
    if not isinstance(writer, str) or not 0 < len(writer) <= 64:
        raise Broken("names no writer")
    entries, summary_length = header.get("entries"), header.get("summary")
    if not isinstance(entries, list) or not _count(summary_length) or summary_length > MAX_BYTES:
        raise Broken("has no list of entries, or a summary length that is not one")
    files = files_of(header.get("files"))
    body = memoryview(data)[start + length:]
    at, out = 0, []
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 3 and file_ok(entry[0])
                and _count(entry[1]) and _count(entry[2])):
            raise Broken(f"has an entry that is not [file, offset, length] of a run's file: {entry!r:.120}")
        name, offset, size = entry
        if at + size > len(body):
            raise Broken(f"says {name} holds {size} bytes, past the end of its body")
        out.append((name, offset, body[at:at + size]))
        at += size
    if at + summary_length != len(body):
        raise Broken(f"has a body of {len(body)} bytes; its header counts {at + summary_length}")
    want = header.get("body")
    if not isinstance(want, str) or xxhash.xxh3_128_hexdigest(body) != want:
        raise Broken("has a body whose hash is not the one its header says (damaged or cut)")
    return Segment(n, writer, out, bytes(body[at:]), files)


def files_of(files) -> dict:
    """``{file: [size, xxh3]}`` read strictly (a segment's, a head's)."""
    if not isinstance(files, dict):
        raise Broken("has no files' sizes")
    for name, v in files.items():
        if not (file_ok(name) and isinstance(v, list) and len(v) == 2 and _count(v[0]) and _count(v[1])
                and v[0] < 1 << 62 and v[1] < 1 << 64):
            raise Broken(f"says of a file {name!r:.80} what is not [size, xxh3]: {v!r:.80}")
    return files


def encode_head(run, writer, seq, segments, state, updated, files, summary) -> bytes:
    return orjson.dumps({"format": HEAD_FORMAT, "run": run, "writer": writer, "seq": seq, "segments": segments,
                         "state": state, "updated": updated, "files": files, "summary": summary})


def decode_head(data: bytes, run: str) -> dict:
    """A head read strictly; ``Broken`` saying which field is not what it must be."""
    try:
        head = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise Broken(f"is not JSON ({e})") from None
    if not isinstance(head, dict) or head.get("format") != HEAD_FORMAT:
        raise Broken(f"is not a head of format {HEAD_FORMAT}")
    if head.get("run") != run:
        raise Broken(f"says it is the head of run {head.get('run')!r:.80}, not of {run!r}")
    checks = (("writer", lambda v: isinstance(v, str) and 0 < len(v) <= 64, "a writer's id"),
              ("seq", _count, "a whole number"),
              ("segments", lambda v: _count(v) and v <= SEGMENTS_LIMIT, "a count of segments"),
              ("state", lambda v: v in STATES, " or ".join(STATES)),
              ("updated", lambda v: v.__class__ in (int, float) and 0 <= v < 1e11, "seconds since 1970"),
              ("summary", lambda v: v is None or isinstance(v, dict), "a summary"))
    for field, check, what in checks:
        if not check(head.get(field)):
            raise Broken(f"has a {field} that is not {what}: {head.get(field)!r:.60}")
    head["files"] = files_of(head.get("files"))
    return head


def _count(v) -> bool:
    return v.__class__ is int and v >= 0
