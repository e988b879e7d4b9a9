"""A Store in a bucket (issue 33, objects): ``Store("s3://bucket/prefix")`` on
a real S3 server on 127.0.0.1 (moto, tests/buckets.py) and ``memory://``.
Objects are created-if-absent by their content address (a 412 is the
deduplication), verified on every read (a damaged or missing object in the
bucket is our DamagedError naming its key), names are keys under names/,
the marker is SOMATIZE as on disk, and a cached node recalls from the bucket."""

import numpy as np
import pytest
from buckets import SECRET_KEY, Faulty

import somatize
from somatize import Graph, Node, Store
from somatize._base.bucket import Bucket
from somatize._store.store import as_store
from somatize.cli import main as cli_main

_names = iter(range(10**9))


@pytest.fixture(params=["memory", "s3"])
def url(request):
    if request.param == "memory":
        return f"memory://store-bucket-{next(_names)}/store"
    return request.getfixturevalue("s3_url")


def object_key(digest):
    return f"objects/{digest[7:9]}/{digest[9:]}"


def test_keep_and_recall_through_a_bucket_as_on_disk(url, tmp_path):
    value = {"w": np.arange(12.0).reshape(3, 4), "b": np.ones(3, np.float32), "epoch": 3, "tag": "x"}
    store = Store(url)
    digest = store.keep("model/weights", value)
    local = Store(tmp_path)
    assert local.keep("model/weights", value) == digest  # the same content address as on disk
    again = Store(url)  # another opener (another machine) reads what the first kept
    got = again.recall("model/weights")
    assert set(got) == set(value) and got["epoch"] == 3 and got["tag"] == "x"
    np.testing.assert_array_equal(got["w"], value["w"])
    assert got["b"].dtype == np.float32
    assert again.lookup("model/weights") == digest and again.names() == ["model/weights"]
    assert again.recall(digest)["epoch"] == 3
    assert sorted(k for k, _ in store.bucket.list("objects")) == sorted(
        "objects/" + "/".join(p.relative_to(tmp_path / "objects").parts) for p in (tmp_path / "objects").rglob("*")
        if p.is_file())
    assert store.bucket.get("SOMATIZE", 100) == b'{"format":2}'
    assert store.check() == []


def test_an_object_kept_twice_is_uploaded_once(url):
    store = Store(url)
    first = store.put(np.arange(1000))
    before = dict(store.bucket.requests)
    sent = store.bucket.sent
    assert store.put(np.arange(1000)) == first  # a 412: already there
    assert {m: n - before.get(m, 0) for m, n in store.bucket.requests.items() if n != before.get(m, 0)} == {"PUT": 1}
    big = np.arange(300_000, dtype=np.float64)  # 2.4 MB: asked first, so a copy there costs no upload
    store.put(big)
    before, sent = dict(store.bucket.requests), store.bucket.sent
    store.put(big.copy())
    assert store.bucket.sent == sent
    assert {m: n - before.get(m, 0) for m, n in store.bucket.requests.items() if n != before.get(m, 0)} == {"HEAD": 1}


def test_two_stores_keeping_at_once_write_each_object_once(s3_url):
    import threading

    value = [np.arange(100) * i for i in range(6)]
    stores = [Store(s3_url) for _ in range(4)]
    barrier, digests = threading.Barrier(4), []

    def keep(store, i):
        barrier.wait()
        digests.append(store.keep(f"k{i}", value))

    threads = [threading.Thread(target=keep, args=(s, i)) for i, s in enumerate(stores)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(set(digests)) == 1
    assert [np.asarray(a).tolist() for a in Store(s3_url).recall("k3")] == [a.tolist() for a in value]
    assert Store(s3_url).check() == []


def test_a_corrupted_object_in_the_bucket_is_damage_naming_its_key(url):
    store = Store(url)
    digest = store.keep("v", np.arange(50))
    key = object_key(digest)
    whole = store.bucket.get(key, 1 << 20)
    flipped = bytearray(whole)
    flipped[len(flipped) // 2] ^= 1
    store.bucket.put(key, bytes(flipped))  # someone else's write: the bucket is hostile input too
    with pytest.raises(somatize.DamagedError) as damaged:
        Store(url).recall("v")
    assert f"{url}/{key}" in str(damaged.value)
    assert any(key in line and "damaged" in line for line in store.check())
    store.bucket.put(key, whole[:-32] + bytes(32))  # another object's digest in its tail
    with pytest.raises(somatize.DamagedError, match=key):
        Store(url).recall(digest)
    store.bucket.delete(key)
    with pytest.raises(somatize.DamagedError, match="missing") as missing:
        Store(url).recall("v")
    assert f"{url}/{key}" in str(missing.value)
    assert any("dangling" in line and "names/v" in line for line in store.check())


def test_a_hostile_name_or_marker_is_refused_naming_its_key(url):
    store = Store(url)
    store.bucket.put("names/big", b"x" * 5000)
    with pytest.raises(somatize.DamagedError, match="names/big"):
        store.recall("big")
    store.bucket.put("names/junk", b"not a digest")
    with pytest.raises(somatize.DamagedError, match="names/junk"):
        store.recall("junk")
    store.bucket.put("SOMATIZE", b'{"format": 99}')
    with pytest.raises(somatize.SomatizeValueError, match="format 99"):
        Store(url)
    store.bucket.put("SOMATIZE", b"x" * 100_000)
    with pytest.raises(somatize.DamagedError, match="SOMATIZE"):
        Store(url, readonly=True)


def test_a_store_is_not_made_among_someone_elses_keys_and_readonly_writes_nothing(url):
    outer = Bucket(url)
    outer.put("their/data.csv", b"a,b")
    with pytest.raises(somatize.SomatizeValueError, match="their"):
        Store(url)
    with pytest.raises(somatize.SomatizeValueError, match="not a store"):
        Store(url + "/empty", readonly=True)
    assert Bucket(url + "/empty").list() == []
    store = Store(url + "/ours")
    store.keep("a", 1)
    reader = Store(url + "/ours", readonly=True)
    puts = dict(reader.bucket.requests).get("PUT", 0)
    assert reader.recall("a") == 1
    with pytest.raises(somatize.StoreNotWritable, match="read-only"):
        reader.keep("b", 2)
    assert reader.bucket.requests.get("PUT", 0) == puts == 0


def test_a_cached_node_recalls_from_the_bucket_on_the_second_run(s3_url):
    calls = []

    class Slow(Node):
        def forward(self, x, ctx):
            calls.append(1)
            return np.sin(x) * 2

    class Head(Node):
        def forward(self, x, ctx):
            return float(x.sum())

    x = np.linspace(0, 1, 500)
    seen = [[], []]
    outs = []
    for i in range(2):
        g = Graph.somatize(Slow().named("body").frozen().cached() >> Head().named("head"))
        outs.append(g.forward(x, store=Store(s3_url), watching=seen[i].append))
    assert [f["fact"] for f in seen[0] if f.get("node") == "body"] == ["ran", "kept"]
    assert [f["fact"] for f in seen[1] if f.get("node") == "body"] == ["recalled"]
    assert len(calls) == 1 and outs[0] == outs[1]
    g = Graph.somatize(Slow().named("body").frozen().cached() >> Head().named("head"))
    assert g.forward(x, store=s3_url) == outs[0] and len(calls) == 1  # store= a URL: opened once
    assert as_store(s3_url) is as_store(s3_url + "/")


def test_runs_of_a_bucket_store_are_its_heads(url):
    store = Store(url)
    assert store.runs() == []
    for key in ("heads/b.json", "heads/a.json", "heads/not a run!.json", "heads/c.txt", "runs/x/seg/0000000000"):
        store.bucket.put(key, b"{}")
    assert store.runs() == ["a", "b"]


def test_a_bucket_that_does_not_answer_is_our_error_not_damage_or_absence(s3_url, moto_endpoint, monkeypatch):
    store = Store(s3_url)
    digest = store.keep("v", np.arange(10))
    with Faulty(moto_endpoint, fail=10**6) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        down = Store.__new__(Store)
        down.__dict__.update(store.__dict__)
        down.bucket = Bucket(s3_url, attempts=2, sleep=lambda s: None)
        from somatize._base.bucket import BucketBackend
        from somatize._store.writer import Writer

        down.backend = BucketBackend(down.bucket)
        down._writer = Writer(down.backend)
        for call in (lambda: down.recall("v"), lambda: down.recall(digest), lambda: down.keep("w", 1),
                     lambda: down.lookup("v")):
            with pytest.raises(somatize.BucketError, match="2 times") as failed:
                call()
            assert failed.value.status == 503 and SECRET_KEY not in str(failed.value)
        with pytest.raises(somatize.BucketError):
            Store(s3_url)
    assert proxy.seen


def test_somatize_check_on_a_bucket_url(s3_url, capsys):
    store = Store(s3_url)
    digest = store.keep("v", np.arange(50))
    assert cli_main(["check", s3_url]) == 0
    out = capsys.readouterr().out
    assert s3_url in out and SECRET_KEY not in out
    store.bucket.put(object_key(digest), b"SMZ2 nonsense")
    assert cli_main(["check", s3_url]) == 1
    out = capsys.readouterr().out
    assert f"{s3_url}/{object_key(digest)}" in out


def test_check_of_a_bucket_lists_its_objects_once_and_names_what_does_not_belong(url):
    store = Store(url)
    for i in range(5):
        store.keep(f"v{i}", np.arange(10 + i))
    store.bucket.put("objects/zz/not-an-object", b"x")
    store.bucket.put("objects/ab/cd/deeper", b"x")
    store.bucket.put("objects/loose", b"x")
    before = dict(store.bucket.requests)
    problems = store.check()
    # the top, objects/ once (not a LIST a folder: 10 or more ab/ folders), names/ and its walk
    assert store.bucket.requests["LIST"] - before["LIST"] == 4
    assert len(problems) == 3 and all(p.startswith(f"{url}/objects/") for p in problems)
    assert any("zz" in p for p in problems) and any("loose" in p for p in problems)
    assert any("objects/ab/cd" in p for p in problems)
