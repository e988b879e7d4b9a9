"""A run's summary: what ``summary.json`` holds, read strictly, and how facts
fold into it.

The rule kept here: a summary read from disk is trusted only after every
field has the type it must have and every count fits the bytes present (a
run has no more facts than its log has bytes, no more forwards than facts);
anything else is ``Broken``, which a listing shows as a damaged run and a
query raises as ``DamagedError``. The summary is the root of the record's
integrity: it names the bytes of each file a completed flush wrote and the
xxh3 checksum of the index and of each series over those bytes.

    {"format": 2, "run", "state": "running"|"finished"|"interrupted",
     "started", "updated", "pid", "host",
     "forwards", "facts", "log_bytes",
     "index": [bytes, xxh3], "series": {name: [bytes, xxh3]},
     "summarising": {name: {"count", "first", "last", "min", "max"}},
     "nodes": {node: {"ran", "recalled", "kept", "total_us", "max_us"}}}
"""

from __future__ import annotations

import xxhash

FORMAT = 2
TOOK = "finished/took_us"  # the series of whole-forward times
STATES = ("running", "finished", "interrupted")
MAX_BYTES = 1 << 24  # a summary larger than this is not one we wrote
POINT_BYTES = 16  # a series record: forward int64, value float64 (_log.POINT)
_NODE_KINDS = frozenset(("ran", "recalled", "kept"))
_NODE_FIELDS = ("ran", "recalled", "kept", "total_us", "max_us")
_STAT_FIELDS = ("count", "first", "last", "min", "max")


class Broken(Exception):
    """A summary that is not one a Recorder wrote; the message says which field."""


def new(run: str, now: float) -> dict:
    return {
        "format": FORMAT,
        "run": run,
        "state": "running",
        "started": now,
        "updated": now,
        "pid": 0,
        "host": "",
        "forwards": 0,
        "facts": 0,
        "log_bytes": 0,
        "index": [0, xxhash.xxh3_64_intdigest(b"")],
        "series": {},
        "summarising": {},
        "nodes": {},
    }


def _number(v) -> bool:
    return (v.__class__ is int or v.__class__ is float) and v.__class__ is not bool


def _count(v) -> bool:
    return v.__class__ is int and v >= 0


def _size_sum(v) -> bool:
    return isinstance(v, list) and len(v) == 2 and _count(v[0]) and (v[1] is None or (_count(v[1]) and v[1] < 1 << 64))


def parse(raw: bytes) -> dict:
    """The summary in ``raw``, checked field by field; raises ``Broken``.
    Every count is bounded by ``log_bytes`` (a fact takes at least a byte of
    the log, a forward at least a fact); a reader that allocates by a count
    first checks that the log holds ``log_bytes`` (``_queries``)."""
    import orjson

    try:
        s = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise Broken(f"is not JSON ({e})") from None
    if not isinstance(s, dict):
        raise Broken(f"is a JSON {type(s).__name__}, not an object")
    if s.get("format") == 1:  # before checksums: counts only, nothing to verify with
        s["format"] = FORMAT
        s["index"] = [None, None]
        series = s.get("series")
        if isinstance(series, dict):
            s["series"] = {k: [v, None] for k, v in series.items()}
    fmt = s.get("format")
    if fmt != FORMAT:
        raise Broken(f"has format {fmt!r:.20}; this somatize reads format {FORMAT}")

    def need(field, ok, what):
        if field not in s or not ok(s[field]):
            raise Broken(f"field {field!r} must be {what}, it holds {s.get(field)!r:.60}")

    need("run", lambda v: isinstance(v, str), "a str")
    need("state", lambda v: v in STATES, " or ".join(STATES))
    for field in ("started", "updated"):
        need(field, _number, "a number (seconds since 1970)")
    need("pid", _count, "a whole number")
    need("host", lambda v: isinstance(v, str), "a str")
    need("log_bytes", lambda v: _count(v) and v < 1 << 62, "a whole number of bytes")
    need("facts", lambda v: _count(v) and v <= s["log_bytes"], "a whole number at most log_bytes")
    need("forwards", lambda v: _count(v) and v <= s["facts"], "a whole number at most facts")
    if s["index"] != [None, None]:
        need("index", _size_sum, "[bytes, xxh3]")
        if s["index"][0] > s["log_bytes"]:  # a 32-byte entry per block of 28+ bytes
            raise Broken(f"field 'index' counts {s['index'][0]} bytes of index for a {s['log_bytes']}-byte log")
    need("series", lambda v: isinstance(v, dict) and all(isinstance(k, str) and _size_sum(x) for k, x in v.items()),
         "{name: [bytes, xxh3]}")
    limit = (s["facts"] + 1) * POINT_BYTES
    for name, (size, _sum) in s["series"].items():
        if size > limit or size % POINT_BYTES:
            raise Broken(f"series {name!r} counts {size} bytes, more than {s['facts']} facts can make")
    need("summarising", lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, dict) and _count(x.get("count"))
        and all(x.get(f) is None or _number(x.get(f)) for f in _STAT_FIELDS[1:]) for k, x in v.items()),
        "{name: {count, first, last, min, max}}")
    need("nodes", lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, dict) and all(_count(x.get(f)) for f in _NODE_FIELDS[:3])
        and all(_number(x.get(f)) for f in _NODE_FIELDS[3:]) for k, x in v.items()),
        "{node: {ran, recalled, kept, total_us, max_us}}")
    return s


def summarise(groups, summary: dict, points: dict) -> int:
    """Fold ``groups`` ([(forward, [facts])]) into ``summary`` (counts per
    node, summarised facts) and their numbers into ``points`` ({series: ([forwards],
    [values])}). Returns how many facts there were. Pure but for its arguments:
    a flush folds into the Recorder's summary, a query into a copy."""
    import numpy as np  # here, not above: listing runs reads summaries without numpy

    from ._log import fits_a_file
    nodes = summary["nodes"]
    stats = summary["summarising"]
    numbers = (int, float, np.integer, np.floating)
    took_by: dict = {}  # node -> kind -> [took_us]: summed in C below
    node_kinds = _NODE_KINDS
    count = 0
    for forward, facts in groups:
        count += len(facts)
        for fact in facts:
            try:
                kind = fact.get("fact")
            except AttributeError:  # not a dict: kept in the log, nothing to summarise
                continue
            if kind in node_kinds:
                node = fact.get("node")
                try:
                    took_by[node][kind].append(fact.get("took_us"))
                except KeyError:
                    took_by[node] = {"ran": [], "recalled": [], "kept": []}
                    took_by[node][kind].append(fact.get("took_us"))
                except TypeError:  # an unhashable node: kept in the log only
                    pass
                continue
            if kind == "finished":
                name, value = TOOK, fact.get("took_us")
            else:
                value = fact.get("value")
                if value is None:
                    continue
                node = fact.get("node")
                name = kind if node is None else f"{kind}/{node}"
            if value.__class__ is not float and value.__class__ is not int and (
                type(value) is bool or not isinstance(value, numbers)
            ):
                continue
            try:
                pair = points[name]
            except KeyError:
                if not isinstance(name, str) or not fits_a_file(name):
                    continue  # too long to name a series file: in the log only
                pair = points[name] = ([], [])
            except TypeError:
                continue
            pair[0].append(forward)
            pair[1].append(value)
            if kind in stats:
                try:
                    _fold(stats[kind], float(value))
                except OverflowError:  # an int past float: in the log only
                    pass
    for node, per in took_by.items():
        agg = nodes.get(str(node))
        if agg is None:
            agg = nodes[str(node)] = {"ran": 0, "recalled": 0, "kept": 0, "total_us": 0, "max_us": 0}
        for kind, took in per.items():
            if not took:
                continue
            agg[kind] += len(took)
            try:
                total, most = sum(took), max(took)
            except TypeError:  # a took_us that is not a number is counted, not timed
                took = [t for t in took if type(t) is not bool and isinstance(t, numbers)] or [0]
                total, most = sum(took), max(took)
            if not _number(total):  # numpy numbers: kept as Python ones
                total, most = float(total), float(most)
            agg["total_us"] += total
            if kind != "kept" and most > agg["max_us"]:
                agg["max_us"] = most
    return count


def _fold(s, value):
    if s["count"] == 0:
        s["first"] = s["min"] = s["max"] = value
    elif value < s["min"]:
        s["min"] = value
    elif value > s["max"]:
        s["max"] = value
    s["count"] += 1
    s["last"] = value


def points_bytes(forwards: list, values: list) -> bytes:
    """Series records; a value too large for a float64 becomes ±inf."""
    from . import _log

    try:
        return _log.points_bytes(forwards, values)
    except (OverflowError, TypeError, ValueError):
        return _log.points_bytes(forwards, [_as_float(v) for v in values])


def _as_float(v) -> float:
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")
