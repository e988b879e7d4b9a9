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
     "cause" (only when interrupted: why, as far as the process could tell),
     "started", "updated", "pid", "host",
     "forwards", "facts", "log_bytes",
     "index": [bytes, xxh3], "series": {name: [bytes, xxh3]},
     "summarising": {name: {"count", "first", "last", "min", "max"}},
     "nodes": {node: {"ran", "recalled", "kept", "total_us", "max_us"}},
     "config": {key: JSON value}}

``config`` is the run's configuration as ``Recorder(..., config=...)`` was
given it (``config_json`` checks it is JSON-like); a summary written before
runs had one reads as ``{}``.

A summarised fact (``_fold``): ``count`` is how many values it was given,
NaN included (the Trainer's steps are the count of its losses); ``first``
and ``last`` are the first and the last, whatever they are; ``min`` and
``max`` are over the values that are not NaN, and None while there is none.
JSON has no word for NaN or an infinity, so ``dumps`` writes them as the
strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` and ``parse`` reads them
back as floats: a value is never written as null, which says "none yet".
"""

from __future__ import annotations

FORMAT = 2
TOOK = "finished/took_us"  # the series of whole-forward times
STATES = ("running", "finished", "interrupted")
CAUSE_LIMIT = 300  # characters of a cause kept: the exception's type and the start of its message
EXITED = "its process exited without close() (a with block, or close(), marks a run finished)"
LOST = "its process ended without closing it (killed: kill -9, SIGTERM, out of memory; or the machine stopped)"
MAX_BYTES = 1 << 24  # a summary larger than this is not one we wrote
POINT_BYTES = 16  # a series record: forward int64, value float64 (_log.POINT)
_NODE_KINDS = frozenset(("ran", "recalled", "kept"))


class Broken(Exception):
    """A summary that is not one a Recorder wrote; the message says which field."""


def new(run: str, now: float) -> dict:
    import xxhash  # here: listing runs never needs it

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
        "config": {},
    }


def cause_of(error: BaseException) -> str:
    """Why a run was interrupted, said of the exception that ended it: its
    type, then the start of its message (KeyboardInterrupt names its signal)."""
    if isinstance(error, KeyboardInterrupt):
        return "KeyboardInterrupt (ctrl-C or SIGINT)"
    text = str(error).strip()
    said = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return said if len(said) <= CAUSE_LIMIT else said[: CAUSE_LIMIT - 1] + "…"


def _number(v) -> bool:
    return (v.__class__ is int or v.__class__ is float) and v.__class__ is not bool


_NOT_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_STAT_FIELDS = ("first", "last", "min", "max")


def _stat_value(v):
    """A summarised fact's value as read: a number, None, or a float that
    JSON has no word for, written as ``_NOT_FINITE`` says; ``_MISSING``
    for anything else."""
    if v is None or v.__class__ is float or v.__class__ is int:
        return v
    if v.__class__ is str:
        return _NOT_FINITE.get(v, _MISSING)
    return _MISSING


def stat_json(v):
    """A summarised fact's value as JSON holds it (the inverse of ``_stat_value``)."""
    if v.__class__ is float and v - v != 0:
        return "NaN" if v != v else "Infinity" if v > 0 else "-Infinity"
    return v


def dumps(summary: dict) -> bytes:
    """``summary`` as the bytes of ``summary.json``: the summarised facts'
    values that are NaN or infinite written as ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"`` (orjson would write null)."""
    import orjson

    stats = summary["summarising"]
    if any(stat_json(v) is not v for stat in stats.values() for v in stat.values()):
        summary = {**summary, "summarising": {name: {f: stat_json(v) for f, v in stat.items()}
                                              for name, stat in stats.items()}}
    return orjson.dumps(summary, option=orjson.OPT_SERIALIZE_NUMPY)


def _count(v) -> bool:
    return v.__class__ is int and v >= 0


def _size_sum(v) -> bool:
    return isinstance(v, list) and len(v) == 2 and _count(v[0]) and (v[1] is None or (_count(v[1]) and v[1] < 1 << 64))


_MISSING = object()
_FIELDS = (  # (field, check, what it must be)
    ("run", lambda v: isinstance(v, str), "a str"),
    ("state", lambda v: v in STATES, " or ".join(STATES)),
    ("started", lambda v: _number(v) and 0 <= v < 1e11, "a number of seconds since 1970"),
    ("updated", lambda v: _number(v) and 0 <= v < 1e11, "a number of seconds since 1970"),
    ("pid", _count, "a whole number"),
    ("host", lambda v: isinstance(v, str), "a str"),
    ("log_bytes", lambda v: _count(v) and v < 1 << 62, "a whole number of bytes"),
    ("facts", _count, "a whole number"),
    ("forwards", _count, "a whole number"),
    ("index", lambda v: isinstance(v, list), "[bytes, xxh3]"),
    ("series", lambda v: isinstance(v, dict), "{name: [bytes, xxh3]}"),
    ("summarising", lambda v: isinstance(v, dict), "{name: {count, first, last, min, max}}"),
    ("nodes", lambda v: isinstance(v, dict), "{node: {ran, recalled, kept, total_us, max_us}}"),
    ("config", lambda v: isinstance(v, dict), "a JSON object (the run's config=)"),
)


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
    s.setdefault("config", {})  # written before runs had a config
    if fmt != FORMAT:
        raise Broken(f"has format {fmt!r:.20}; this somatize reads format {FORMAT}")

    for field, ok, what in _FIELDS:
        if not ok(s.get(field, _MISSING)):
            raise Broken(f"field {field!r} must be {what}, it holds {s.get(field, 'nothing')!r:.60}")
    if not isinstance(s.get("cause", ""), str):
        raise Broken(f"field 'cause' must be a str, it holds {s['cause']!r:.60}")
    log_bytes, facts = s["log_bytes"], s["facts"]
    if facts > log_bytes or s["forwards"] > facts:  # a fact takes a byte or more, a forward a fact or more
        raise Broken(f"counts {s['forwards']} forwards and {facts} facts in a {log_bytes}-byte log: "
                     f"not counts a Recorder wrote")
    if s["index"] != [None, None]:
        if not _size_sum(s["index"]):
            raise Broken(f"field 'index' must be [bytes, xxh3], it holds {s['index']!r:.60}")
        if s["index"][0] > log_bytes:  # a 32-byte entry per block of 34 bytes or more
            raise Broken(f"field 'index' counts {s['index'][0]} bytes of index for a {log_bytes}-byte log")
    limit = (facts + 1) * POINT_BYTES
    for name, pair in s["series"].items():
        if not _size_sum(pair):
            raise Broken(f"field 'series' must be {{name: [bytes, xxh3]}}, it holds {pair!r:.60} for {name!r:.60}")
        if pair[0] > limit or pair[0] % POINT_BYTES:
            raise Broken(f"series {name!r:.60} counts {pair[0]} bytes, more than {facts} facts can make")
    for name, x in s["summarising"].items():
        values = [_stat_value(x.get(f)) for f in _STAT_FIELDS] if isinstance(x, dict) else [_MISSING]
        if not isinstance(x, dict) or not _count(x.get("count")) or _MISSING in values:
            raise Broken("field 'summarising' must be {name: {count, first, last, min, max}}, "
                         f"it holds {x!r:.60} for {name!r:.60}")
        x.update(zip(_STAT_FIELDS, values))
    for node, x in s["nodes"].items():
        if not isinstance(x, dict) or not (_count(x.get("ran")) and _count(x.get("recalled")) and _count(x.get("kept"))
                                           and _number(x.get("total_us")) and _number(x.get("max_us"))):
            raise Broken("field 'nodes' must be {node: {ran, recalled, kept, total_us, max_us}}, "
                         f"it holds {x!r:.60} for {node!r:.60}")
    return s


CONFIG_DEPTH = 32  # nesting levels of a config; deeper is not a configuration


def config_json(config) -> dict:
    """``config`` as the JSON object summary.json keeps: a dict with str keys
    whose values are None, bool, int (64 bits), finite float, str, or lists,
    tuples and dicts of these (tuples become lists; numpy scalars become
    Python numbers). Anything else raises ``SomatizeTypeError`` naming the
    key, so the record never holds a value it cannot give back."""
    from .._base.errors import SomatizeTypeError

    if not isinstance(config, dict):
        raise SomatizeTypeError(
            f"config= takes a dict of JSON-like values, like config={{'lr': 0.01, 'layers': [64, 64]}}; "
            f"got a {type(config).__name__}"
        )

    def plain(v, where, depth):
        if v is None or v.__class__ in (bool, str):
            return v
        if v.__class__ is int:
            if not -(1 << 63) <= v < 1 << 64:
                raise SomatizeTypeError(f"{where} = {v} does not fit 64 bits, so JSON readers would round it; "
                                        f"write it as a str or a float")
            return v
        if v.__class__ is float:
            if v - v != 0:
                raise SomatizeTypeError(f"{where} is {v}, which JSON cannot hold; write None or a str instead")
            return v
        if depth >= CONFIG_DEPTH:
            raise SomatizeTypeError(f"{where} nests deeper than {CONFIG_DEPTH} levels: flatten the config")
        if isinstance(v, dict):
            out = {}
            for k, item in v.items():
                if not isinstance(k, str):
                    raise SomatizeTypeError(f"{where} has the key {k!r:.40} ({type(k).__name__}): a config's "
                                            f"keys are str, as JSON's are; write {str(k)!r:.40}")
                out[k] = plain(item, f"{where}[{k!r}]", depth + 1)
            return out
        if isinstance(v, (list, tuple)):
            return [plain(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(v)]
        if type(v).__module__ == "numpy" and getattr(v, "shape", None) == ():  # np.float64(0.1): a number
            return plain(v.item(), where, depth)
        if isinstance(v, (bool, int, float, str)):  # a subclass (an IntEnum): as its plain value
            return plain((bool if isinstance(v, bool) else int if isinstance(v, int)
                          else float if isinstance(v, float) else str)(v), where, depth)
        raise SomatizeTypeError(
            f"{where} is a {type(v).__name__}: a run's config holds JSON-like values (None, bool, int, "
            f"float, str, and lists and dicts of them). Write a plain value there, e.g. float(x), str(x) "
            f"or x.tolist()"
        )

    return plain(config, "config", 0)


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
                if node is None:  # a parameter group's fact beyond the first (lr): <fact>/group<i>
                    group = fact.get("group")
                    if group is not None:
                        name = f"{kind}/group{group}"
                    else:  # a rank's own fact (rank_us): <fact>/rank<i>
                        rank = fact.get("rank")
                        name = kind if rank is None else f"{kind}/rank{rank}"
                else:
                    name = f"{kind}/{node}"
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
            if total - total != 0 or most - most != 0:  # inf or NaN: JSON has no word for it
                continue
            agg["total_us"] = _fits(agg["total_us"] + total)
            if kind != "kept" and most > agg["max_us"]:
                agg["max_us"] = _fits(most)
    return count


def _fits(n):
    """``n`` as JSON can hold it: an int past 64 bits becomes a float."""
    return float(n) if n.__class__ is int and not -(1 << 63) <= n < 1 << 63 else n


def _fold(s, value):
    """One more value of a summarised fact: ``count``, ``first`` and ``last``
    take every value, NaN too; ``min`` and ``max`` take those that are not
    NaN (None while there is none), so a NaN moves neither, wherever it fell."""
    if s["count"] == 0:
        s["first"] = value
    s["count"] += 1
    s["last"] = value
    if value != value:
        return
    if s["min"] is None or value < s["min"]:
        s["min"] = value
    if s["max"] is None or value > s["max"]:
        s["max"] = value
