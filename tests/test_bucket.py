"""The bucket client (somatize/_base/bucket.py): one conformance suite run
against ``memory://`` and a real S3 server on 127.0.0.1 (moto, tests/buckets.py),
and the faults a network brings, made by a real HTTP proxy in front of that
server (tests/buckets.Faulty: 503s, answers that come late or never)."""

import multiprocessing
import os
import sys
import threading

import pytest
from buckets import SECRET_KEY, Faulty

import somatize
from somatize._base.bucket import Bucket, is_url, key_parts

_memory_names = iter(range(10**9))


@pytest.fixture(params=["memory", "s3"])
def url(request):
    """A fresh bucket prefix: in this process's memory, or on the S3 server."""
    if request.param == "memory":
        return f"memory://conformance-{next(_memory_names)}/store"
    return request.getfixturevalue("s3_url")


def test_create_if_absent_has_exactly_one_winner_among_racing_writers(url):
    bucket = Bucket(url)
    won, barrier = [], threading.Barrier(8)

    def write(i):
        barrier.wait()
        if bucket.create("runs/r/seg/0000000000", f"writer {i}".encode()):
            won.append(i)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(won) == 1
    assert bucket.get("runs/r/seg/0000000000", 100) == f"writer {won[0]}".encode()
    assert bucket.create("runs/r/seg/0000000000", b"again") is False  # nothing written
    assert bucket.get("runs/r/seg/0000000000", 100) == f"writer {won[0]}".encode()


def test_replace_if_with_a_stale_etag_is_fenced_and_writes_nothing(url):
    bucket = Bucket(url)
    first = bucket.replace_if("runs/r/head.json", b"v1", None)
    assert bucket.head("runs/r/head.json") == (2, first)
    second = bucket.replace_if("runs/r/head.json", b"v2", first)
    assert second != first
    with pytest.raises(somatize.Fenced) as fenced:
        bucket.replace_if("runs/r/head.json", b"zombie", first)  # the etag it read is stale
    assert fenced.value.key == "runs/r/head.json" and url in str(fenced.value)
    with pytest.raises(somatize.Fenced):
        bucket.replace_if("runs/r/head.json", b"another first", None)  # made already
    assert bucket.get("runs/r/head.json", 10) == b"v2"
    bucket.delete("runs/r/head.json")
    with pytest.raises(somatize.Fenced):
        bucket.replace_if("runs/r/head.json", b"v3", second)  # removed since
    assert bucket.head("runs/r/head.json") is None


def test_get_if_changed_answers_none_while_unchanged_and_the_new_bytes_after(url):
    bucket = Bucket(url)
    etag = bucket.put("names/x", b"one")
    data, tag = bucket.get_if_changed("names/x", None, 100)
    assert (data, tag) == (b"one", etag)
    received = bucket.received
    assert bucket.get_if_changed("names/x", etag, 100) is None
    assert bucket.received == received  # a 304 sends no body
    new = bucket.put("names/x", b"two")
    assert bucket.get_if_changed("names/x", etag, 100) == (b"two", new)
    with pytest.raises(FileNotFoundError):
        bucket.get_if_changed("names/none", etag, 100)


def test_reads_are_bounded_by_their_limit_before_a_byte_is_read(url):
    bucket = Bucket(url)
    bucket.put("objects/ab/big", b"x" * 10_000)
    received = bucket.received
    with pytest.raises(somatize.DamagedError) as refused:
        bucket.get("objects/ab/big", 100)
    assert f"{url}/objects/ab/big" in str(refused.value) and "10,000 bytes" in str(refused.value)
    assert bucket.received == received
    assert bucket.get("objects/ab/big", 10_000) == b"x" * 10_000
    with pytest.raises(FileNotFoundError):
        bucket.get("objects/ab/none", 100)
    assert bucket.head("objects/ab/none") is None


@pytest.mark.parametrize("key", ["../x", "a/../../x", "a//b", "/a", "a/", "", "./a", "a\\b", "a\x00b"])
def test_keys_that_would_leave_the_prefix_are_refused(url, key):
    bucket = Bucket(url)
    for call in (lambda: bucket.get(key, 10), lambda: bucket.create(key, b"x"), lambda: bucket.put(key, b"x"),
                 lambda: bucket.head(key), lambda: bucket.delete(key)):
        with pytest.raises(somatize.SomatizeValueError, match="bucket key"):
            call()
    assert bucket.requests == {}  # refused before any request


def test_a_listing_holds_only_keys_below_the_prefix(url):
    outer = Bucket(url.rsplit("/", 1)[0])  # the bucket's root, above the prefix
    outer.put("storeroom/x", b"a sibling whose name starts as the prefix does")
    outer.put("other/y", b"y")
    bucket = Bucket(url)
    bucket.put("objects/ab/cd", b"12")
    bucket.put("names/a/b", b"123")
    assert bucket.list() == [("names/a/b", 3), ("objects/ab/cd", 2)]
    assert bucket.list("names") == [("names/a/b", 3)]
    assert bucket.list("runs") == []
    assert bucket.folders() == (["names", "objects"], [])
    assert bucket.folders("names/a") == ([], [("b", 3)])
    assert ("store/objects/ab/cd", 2) in outer.list()


def test_memory_buckets_are_shared_by_name_in_a_process():
    a, b = Bucket("memory://shared-by-name/p"), Bucket("memory://shared-by-name/p")
    assert a.create("k", b"1") and not b.create("k", b"2")
    assert Bucket("memory://shared-by-name/q").head("k") is None
    assert Bucket("memory://another-name/p").head("k") is None


def test_a_url_never_carries_or_shows_credentials(s3_url):
    for bad in ["s3://key:secret@bucket/p", "s3://bucket/p?secret=1", "s3://key@bucket/p"]:
        with pytest.raises(somatize.SomatizeValueError, match="environment") as refused:
            Bucket(bad)
        assert "secret" not in str(refused.value).split("(")[0] or "secret=" not in str(refused.value)
        assert "key:secret" not in str(refused.value)
    for bad in ["http://x/y", "s3://", "s3:///p", "file:///tmp"]:
        with pytest.raises(somatize.SomatizeValueError):
            Bucket(bad)
    bucket = Bucket(s3_url + "/")
    assert repr(bucket) == f"Bucket({s3_url!r})" and bucket.url == s3_url
    assert SECRET_KEY not in repr(bucket) and SECRET_KEY not in repr(vars(bucket))
    assert is_url(s3_url) and is_url("memory://x") and not is_url("/tmp/s3://x") and not is_url(None)
    assert key_parts(("a", "b")) == key_parts("a/b") == ("a", "b")


def test_a_missing_obstore_is_the_cloud_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "obstore", None)
    with pytest.raises(somatize.MissingExtra, match=r'somatize\[cloud\]') as missing:
        Bucket("memory://x")
    assert missing.value.name == "obstore"


def test_503s_are_retried_with_backoff_then_answered(s3_url, moto_endpoint, monkeypatch):
    waits = []
    with Faulty(moto_endpoint, fail=2) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        bucket = Bucket(s3_url, attempts=4, backoff=0.5, sleep=waits.append)
        assert bucket.create("objects/ab/cd", b"bytes") is True
    assert len(proxy.seen) == 3 and [m for m, _ in proxy.seen] == ["PUT"] * 3
    assert len(waits) == 2 and 0.25 <= waits[0] <= 0.5 and 0.5 <= waits[1] <= 1.0  # doubled, jittered
    assert bucket.requests == {"PUT": 3}
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    assert Bucket(s3_url).get("objects/ab/cd", 10) == b"bytes"


def test_a_bucket_that_keeps_answering_503_is_a_clear_error_after_bounded_attempts(s3_url, moto_endpoint, monkeypatch):
    waits = []
    with Faulty(moto_endpoint, fail=10**6) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        bucket = Bucket(s3_url, attempts=3, backoff=1.0, backoff_cap=1.5, sleep=waits.append)
        with pytest.raises(somatize.BucketError) as failed:
            bucket.get("names/x", 100)
    assert len(proxy.seen) == 3 and len(waits) == 2 and max(waits) <= 1.5
    error = failed.value
    assert error.status == 503 and error.url == s3_url and error.key == "names/x"
    assert f"{s3_url}/names/x" in str(error) and "3 times" in str(error) and "attempts=" in str(error)
    assert isinstance(error, OSError) and SECRET_KEY not in str(error)


def test_a_refusal_that_cannot_pass_is_not_retried(s3_url, moto_endpoint, monkeypatch):
    with Faulty(moto_endpoint, fail=10**6, status=403) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        bucket = Bucket(s3_url, attempts=5, sleep=lambda s: None)
        with pytest.raises(somatize.BucketError, match="credentials") as refused:
            bucket.put("names/x", b"x")
    assert len(proxy.seen) == 1 and SECRET_KEY not in str(refused.value)


def test_a_slow_answer_is_bounded_by_the_timeout_then_retried(s3_url, moto_endpoint, monkeypatch):
    with Faulty(moto_endpoint, stall=1, stall_s=30) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        bucket = Bucket(s3_url, attempts=2, timeout=0.3, sleep=lambda s: None)
        assert bucket.put("names/x", b"x")
        assert bucket.get("names/x", 10) == b"x"
    assert [m for m, _ in proxy.seen] == ["PUT", "PUT", "GET"]
    with Faulty(moto_endpoint, stall=10**6, stall_s=30) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        with pytest.raises(somatize.BucketError, match="2 times"):
            Bucket(s3_url, attempts=2, timeout=0.3, sleep=lambda s: None).get("names/x", 10)
    assert len(proxy.seen) == 2


def test_a_conditional_write_whose_answer_was_lost_is_known_by_its_own_bytes(s3_url, moto_endpoint, monkeypatch):
    """The first PUT lands and its answer never comes; the retry meets a 412,
    reads the key back, finds its own bytes: written, not fenced."""
    bucket = Bucket(s3_url)
    etag = bucket.replace_if("runs/r/head.json", b'{"seq": 1, "writer": "a"}', None)
    with Faulty(moto_endpoint, lose=1, stall_s=30) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        slow = Bucket(s3_url, attempts=3, timeout=0.5, sleep=lambda s: None)
        assert slow.create("runs/r/seg/0000000000", b"segment of a") is True
    assert [m for m, _ in proxy.seen] == ["PUT", "PUT", "GET"]
    with Faulty(moto_endpoint, lose=1, stall_s=30) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        slow = Bucket(s3_url, attempts=3, timeout=0.5, sleep=lambda s: None)
        new = slow.replace_if("runs/r/head.json", b'{"seq": 2, "writer": "a"}', etag)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    assert bucket.head("runs/r/head.json")[1] == new != etag
    with pytest.raises(somatize.Fenced):  # another writer's bytes there: fenced, as without a loss
        bucket.replace_if("runs/r/head.json", b'{"seq": 2, "writer": "b"}', etag)


def _child_writes(url, queue):
    try:
        queue.put(_BUCKET.create("from/child", str(os.getpid()).encode()))
    except BaseException as e:  # noqa: BLE001 - said to the parent
        queue.put(e)


def _spawned_writes(url, environ, queue):
    os.environ.update(environ)
    queue.put(Bucket(url).create("from/spawned", b"spawned"))


_BUCKET = None


def test_a_forked_child_is_refused_a_bucket_clearly_and_a_spawned_one_reaches_it(s3_url):
    """obstore's runtime does not cross a fork: a request from the child would
    wait forever, so the child gets our error at once; a spawned child works."""
    global _BUCKET
    _BUCKET = Bucket(s3_url)
    _BUCKET.put("before/fork", b"x")  # obstore's runtime started here
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_writes, args=(s3_url, queue))
    child.start()
    got = queue.get(timeout=60)
    child.join(60)
    assert isinstance(got, somatize.BucketError) and "spawn" in str(got) and s3_url in str(got)
    assert _BUCKET.head("from/child") is None
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    environ = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    child = spawn.Process(target=_spawned_writes, args=(s3_url, environ, queue))
    child.start()
    assert queue.get(timeout=120) is True
    child.join(60)
    assert _BUCKET.get("from/spawned", 20) == b"spawned"
    assert _BUCKET.put("after/fork", b"y")  # and the parent's client still works


def test_a_listing_with_tags_gives_the_etag_a_get_would(url):
    bucket = Bucket(url)
    a = bucket.put("heads/a.json", b"{}")
    bucket.create("heads/b.json", b"[]")
    b = bucket.head("heads/b.json")[1]
    assert bucket.list("heads", tags=True) == [("heads/a.json", 2, a), ("heads/b.json", 2, b)]
    assert bucket.get_if_changed("heads/a.json", a, 10) is None
