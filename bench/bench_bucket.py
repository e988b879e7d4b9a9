"""A store in a bucket, its values (issue 33): requests and bytes a keep and a
recall cost, against moto's S3 server on 127.0.0.1 (tests/buckets.py, the
server the tests use), and keep/recall time beside a store on the local disk.

The value is a checkpoint-like dict of LEAVES arrays (one object each) plus
a manifest; every run keeps new content (one element changes), so nothing
dedupes, then keeps the same value again (all dedup), then recalls it.
Requests are counted by the bucket client (``Bucket.requests``: each retry
is one), bytes by its bodies (``sent``). Times are medians of RUNS rounds,
the bucket and the disk interleaved; moto is a Python server, so the times
say what the client costs beside it, not what S3 would answer.

    .venv/bin/python bench/bench_bucket.py [--quick]

Targets: PUTs of a keep <= new objects + 1 (the name), and a HEAD before
each object of 1 MiB or more; bytes sent
<= 1.01x the value's bytes; a keep of a value already there sends no
leaf of 1 MiB or more again (<= 0.01x the value's bytes: the manifest and
the name; an object under 1 MiB is sent and answered 412, cheaper than a
HEAD before every new one). Reported: requests of a dedup keep and of a
recall, and the time ratios.
"""

import os
import statistics
import sys
import tempfile
import time

import numpy as np
from common import QUICK, machine, reported, target

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import buckets  # noqa: E402  (the tests' moto server and its environment)

from somatize import Store  # noqa: E402

RUNS = 2 if QUICK else int(os.environ.get("RUNS", 7))
LEAVES = 2 if QUICK else 16
ELEMENTS = 256 * 1024  # float32 per leaf: 1 MiB, where a keep asks (HEAD) before it uploads


def delta(before, after):
    return {m: n - before.get(m, 0) for m, n in after.items() if n != before.get(m, 0)}


def main():
    endpoint = buckets.endpoint()
    buckets.make_bucket(endpoint, "bench-bucket")
    for key, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": buckets.ACCESS_KEY,
                       "AWS_SECRET_ACCESS_KEY": buckets.SECRET_KEY, "AWS_REGION": "us-east-1",
                       "AWS_ALLOW_HTTP": "true"}.items():
        os.environ[key] = value
    print(f"bench_bucket: {LEAVES} leaves of {ELEMENTS * 4 / 1e6:.2f} MB, {RUNS} rounds; {machine()}")
    bucket_store = Store("s3://bench-bucket/store")
    bucket = bucket_store.bucket
    rng = np.random.default_rng(0)
    base = {f"layer{i}": rng.standard_normal(ELEMENTS, dtype=np.float32) for i in range(LEAVES)}
    value_bytes = sum(a.nbytes for a in base.values())
    times = {"keep bucket": [], "keep disk": [], "recall bucket": [], "recall disk": []}
    keep_requests, keep_sent, again_requests, again_sent, recall_requests = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        disk = Store(os.path.join(tmp, "store"), direct_io=False)
        for r in range(RUNS):
            value = {k: a.copy() for k, a in base.items()}
            for a in value.values():
                a[0] = r  # new content each round: every leaf and the manifest are new objects
            before, sent = dict(bucket.requests), bucket.sent
            t = time.perf_counter()
            bucket_store.keep(f"ckpt/{r}", value)
            times["keep bucket"].append(time.perf_counter() - t)
            keep_requests.append(delta(before, bucket.requests))
            keep_sent.append(bucket.sent - sent)
            t = time.perf_counter()
            disk.keep(f"ckpt/{r}", value)
            times["keep disk"].append(time.perf_counter() - t)
            before, sent = dict(bucket.requests), bucket.sent
            bucket_store.keep(f"ckpt/{r}-again", value)  # all there: deduplicated
            again_requests.append(delta(before, bucket.requests))
            again_sent.append(bucket.sent - sent)
            before = dict(bucket.requests)
            t = time.perf_counter()
            got = bucket_store.recall(f"ckpt/{r}")
            times["recall bucket"].append(time.perf_counter() - t)
            recall_requests.append(delta(before, bucket.requests))
            assert np.array_equal(got["layer0"], value["layer0"])
            t = time.perf_counter()
            disk.recall(f"ckpt/{r}")
            times["recall disk"].append(time.perf_counter() - t)
    objects = LEAVES + 1  # the leaves and the manifest
    puts = statistics.median(d.get("PUT", 0) for d in keep_requests)
    per_keep = statistics.median(sum(d.values()) for d in keep_requests)
    print(f"a new keep: {keep_requests[-1]}; again: {again_requests[-1]}; a recall: {recall_requests[-1]}")
    target(f"PUTs of a keep / (new objects + 1), {objects} objects", puts / (objects + 1), 1.0)
    reported("requests of a keep (a HEAD a leaf of 1 MiB or more too) / (objects + 1)", per_keep / (objects + 1))
    target("bytes a keep sends / the value's bytes", statistics.median(keep_sent) / value_bytes, 1.01)
    target("bytes a keep of a value already there sends / the value's", statistics.median(again_sent) / value_bytes,
           0.01)
    reported("requests of a keep of a value already there / (objects + 1)",
             statistics.median(sum(d.values()) for d in again_requests) / (objects + 1))
    reported("requests of a recall by name / (objects + 1)",
             statistics.median(sum(d.values()) for d in recall_requests) / (objects + 1))
    med = {k: statistics.median(v) for k, v in times.items()}
    print("medians: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in med.items()))
    reported("keep time, moto bucket / local disk", med["keep bucket"] / med["keep disk"])
    reported("recall time, moto bucket / local disk", med["recall bucket"] / med["recall disk"])


if __name__ == "__main__":
    main()
