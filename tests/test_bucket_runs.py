"""A run in a bucket (issue 33): its segments and head as bytes, read
strictly; a Recorder writing ``Store("s3://…")`` through its local copy and
uploader; readers reading it through the mirror; each fault a test, against
moto's S3 server on 127.0.0.1 (tests/buckets.py). Nothing here waits on a
clock: a writer's staleness is judged on a clock the test sets, a request
held back is held by a proxy until the test lets it go, and a poll for
another process's fact stops at a count of polls."""

import orjson
import pytest
import xxhash

from somatize.record import _segments
from somatize.record._segments import Broken


def a_segment(run="r", n=3, summary=b'{"x": 1}'):
    log, index = b"L" * 100, b"I" * 32
    files = {"facts.log": [100, xxhash.xxh3_64_intdigest(log)], "index.bin": [32, xxhash.xxh3_64_intdigest(index)]}
    return _segments.encode(run, n, "w1", [("facts.log", 0, log), ("index.bin", 0, index)], summary, files)


def test_a_segment_reads_back_as_written():
    seg = _segments.decode(a_segment(), "r", 3)
    assert [(f, o, bytes(d)) for f, o, d in seg.entries] == [("facts.log", 0, b"L" * 100), ("index.bin", 0, b"I" * 32)]
    assert seg.summary == b'{"x": 1}' and seg.writer == "w1" and seg.n == 3
    assert seg.files["facts.log"][0] == 100


def _header_changed(change):
    data = a_segment()
    start = len(_segments.MAGIC) + 4
    length = int.from_bytes(data[len(_segments.MAGIC):start], "little")
    header = orjson.loads(data[start:start + length])
    change(header)
    new = orjson.dumps(header)
    return data[:len(_segments.MAGIC)] + len(new).to_bytes(4, "little") + new + data[start + length:]


BROKEN = {
    "not a segment": (lambda: b"GIF89a" + a_segment()[6:], "does not begin"),
    "cut short": (lambda: a_segment()[:-5], "body"),
    "a byte flipped in the body": (lambda: a_segment()[:-12] + b"X" + a_segment()[-11:], "hash"),
    "another run's": (lambda: a_segment(run="other"), "not segment 3 of 'r'"),
    "another number": (lambda: a_segment(n=4), "not segment 3"),
    "a header past the end": (lambda: _segments.MAGIC + (10**6).to_bytes(4, "little") + b"{}", "past the"),
    "a file outside the run": (lambda: _header_changed(lambda h: h["entries"][0].__setitem__(0, "../../x")),
                               r"not \[file, offset, length\]"),
    "a series file with a slash": (lambda: _header_changed(lambda h: h["entries"][0].__setitem__(0, "series/a/b.bin")),
                                   r"not \[file, offset, length\]"),
    "a length past the body": (lambda: _header_changed(lambda h: h["entries"][0].__setitem__(2, 10**9)),
                               "past the end"),
    "a negative offset": (lambda: _header_changed(lambda h: h["entries"][0].__setitem__(1, -1)),
                          r"not \[file, offset, length\]"),
    "a size that is a string": (lambda: _header_changed(lambda h: h["files"].__setitem__("index.bin", ["32", 1])),
                                r"not \[size, xxh3\]"),
    "no writer": (lambda: _header_changed(lambda h: h.pop("writer")), "names no writer"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_segment_that_is_not_one_of_ours_is_refused_saying_what(case):
    make, said = BROKEN[case]
    with pytest.raises(Broken, match=said):
        _segments.decode(make(), "r", 3)


def test_a_head_reads_back_and_a_wrong_one_is_refused():
    raw = _segments.encode_head("r", "w1", 7, 3, "running", 1.7e9, {"facts.log": [10, 5]}, {"state": "running"})
    head = _segments.decode_head(raw, "r")
    assert (head["writer"], head["seq"], head["segments"], head["state"]) == ("w1", 7, 3, "running")
    with pytest.raises(Broken, match="not of 'other'"):
        _segments.decode_head(raw, "other")
    for field, value, said in (("segments", -1, "segments"), ("state", "done", "state"), ("seq", 1.5, "seq"),
                               ("files", {"../x": [1, 1]}, "a file"), ("updated", "now", "updated")):
        bad = orjson.loads(raw)
        bad[field] = value
        with pytest.raises(Broken, match=said):
            _segments.decode_head(orjson.dumps(bad), "r")
    with pytest.raises(Broken, match="not JSON"):
        _segments.decode_head(b"{", "r")


def test_a_heads_key_names_its_run_and_nothing_else():
    assert _segments.run_of_head("heads/a-run.json") == "a-run"
    assert _segments.run_of_head("heads/x/y.json") is None
    assert _segments.run_of_head("heads/.json") is None
    assert _segments.run_of_head("runs/a/seg/0000000000") is None
    assert _segments.segment_key("a", 12) == "runs/a/seg/0000000012"
