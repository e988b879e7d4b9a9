"""A run on a bucket store (issue 33), against moto's S3 server on 127.0.0.1
(started in a process of its own): what a commit costs the bucket,
what the training pays, how soon another process sees a fact, what a
listing asks.

1. Commits. A Recorder of ``Store("s3://…")`` given 100 forwards at a time,
   each ``flush()`` (one commit, one segment): the requests each made, by
   method; the bytes sent a fact, beside the bytes a fact takes in the local
   copy (the run as on disk).
2. The step. Trainer + Recorder on the reference model (bench_step.py's),
   the store in the bucket against the store on disk, interleaved round by
   round, each timing enough steps for several segments (``SEAL_S``) to go
   out meanwhile; the ratio is the median of per-round ratios.
3. A fact seen by another process. A writer process (this script,
   ``--writer``) says a fact every 50 ms whose value is its clock
   (``time.time()``), asking no flush: its flusher and uploader send them.
   This process polls the run's curve through the bucket every 50 ms (its
   own cache: another machine's mirror) and takes, for each point, the time
   it was first seen minus its value. Target: the longest <= 2 x SEAL_S.
4. ``runs()`` of many runs (1,000; ``--quick`` 40): cold (a new cache: one
   LIST, a head and the segments of each run) and warm (again: one LIST, no
   head changed), with the requests counted; beside it ``runs()`` of the same
   runs on disk (the writer's local copies).
5. A day of a run committing every 2 s: the writer's requests (the commits'
   measured in 1, times 43,200) and a reader polling its curve every 2 s
   (one conditional GET each, a 304 when nothing changed).

    .venv/bin/python bench/bench_bucket_runs.py [--rounds 7] [--steps 6000] [--runs 1000] [--quick]

Targets: PUTs a commit <= 2; the step, bucket / disk <= 1.01x; a fact seen
by another process within 2 x SEAL_S.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from common import interleaved, machine, quartiles, ratio, reference_batches, reference_graph, reported, target

from somatize import Recorder, Store
from somatize.record import _upload, curve, runs
from somatize.torch import Trainer, parameters

MSE = torch.nn.functional.mse_loss
clock = time.perf_counter
DAY_S = 86400


SERVER = """
import logging, os, sys
os.nice(19)  # another machine's work: on a machine of two CPUs, never ahead of the training's
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print("http://%s:%d" % server.get_host_and_port(), flush=True)
sys.stdin.readline()
"""


def environment():
    """moto's server started in a process of its own (a bucket is another
    machine: its work is not this process's), a bucket made, the
    environment a user of it has."""
    import atexit

    import buckets

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    atexit.register(server.kill)
    url = server.stdout.readline().strip()
    name = f"bench-{os.getpid()}"
    buckets.make_bucket(url, name)
    os.environ.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": buckets.ACCESS_KEY,
                       "AWS_SECRET_ACCESS_KEY": buckets.SECRET_KEY, "AWS_REGION": "us-east-1",
                       "AWS_ALLOW_HTTP": "true"})
    os.environ["SOMATIZE_CACHE"] = tempfile.mkdtemp(prefix="somatize-cache-")
    return f"s3://{name}"


def delta(bucket, before):
    return {m: n - before.get(m, 0) for m, n in bucket.requests.items() if n != before.get(m, 0)}


def commits(url, count, per):
    store = Store(f"{url}/commits")
    rec = Recorder(store, run="commits")
    rec.flush()  # the run's first segment (its summary alone) out of the way
    made, sent = [], store.bucket.sent
    for k in range(count):
        before = dict(store.bucket.requests)
        for i in range(per):
            rec.forward_began()
            rec({"fact": "loss", "value": float(k * per + i)})
            rec({"fact": "finished", "took_us": 100 + i})
        rec.flush()
        made.append(delta(store.bucket, before))
    facts = count * per * 2
    sent = store.bucket.sent - sent
    rec.close()
    local = sum(f.stat().st_size for f in Path(rec.folder).rglob("*") if f.is_file() and f.name != "lock")
    return {"per_commit": {m: statistics.median(d.get(m, 0) for d in made) for m in {k for d in made for k in d}},
            "bytes_per_fact": sent / facts, "local_bytes_per_fact": local / facts}


def trained(where):
    """Trainer + Recorder with the store ``where`` ("bucket" or "disk")."""

    def run(batches, warmup, stores):
        g = reference_graph()
        rec = Recorder(stores[where], summarising=["loss"])
        tr = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=rec)
        for b in batches[:warmup]:
            tr.step(b)
        sealed = rec._sender.n if rec._sender is not None else 0
        t = clock()
        for b in batches[warmup:]:
            tr.step(b)
        tr.deliver()
        took = clock() - t
        sealed = (rec._sender.n if rec._sender is not None else 0) - sealed
        rec.close()
        return {"s": took, "sealed": sealed}

    return run


SEALS: list = []  # (CPU s of the uploader's thread, wall s) of each seal


def _timed_send(send):
    def timed(self):
        c, w = time.thread_time(), clock()
        try:
            return send(self)
        finally:
            SEALS.append((time.thread_time() - c, clock() - w))

    return timed


def step_cost(url, rounds, warmup, steps):
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    _upload.Sender._send = _timed_send(_upload.Sender._send)
    disk = Store(os.path.join(tempfile.mkdtemp(), "record"))
    stores = {"bucket": Store(f"{url}/steps"), "disk": disk}
    variants = {"disk": trained("disk"), "bucket": trained("bucket")}
    batches = reference_batches(warmup + steps)
    for fn in variants.values():
        fn(batches[:40], 20, stores)
    SEALS.clear()
    got = interleaved(variants, rounds, batches, warmup, stores)
    timed = sum(r["s"] for r in got["bucket"])
    return {"x": ratio([r["s"] for r in got["bucket"]], [r["s"] for r in got["disk"]]),
            "spread": quartiles([a["s"] / b["s"] for a, b in zip(got["bucket"], got["disk"])]),
            "us": {n: statistics.median(r["s"] for r in v) / steps * 1e6 for n, v in got.items()},
            "sealed": statistics.median(r["sealed"] for r in got["bucket"]),
            "seal_cpu_ms": 1e3 * statistics.median(c for c, _ in SEALS) if SEALS else 0.0,
            "seal_wall_ms": 1e3 * statistics.median(w for _, w in SEALS) if SEALS else 0.0,
            "uploader_share": sum(c for c, _ in SEALS) / timed}


def writer(url, run, seconds):
    """``--writer``: a fact every 50 ms, its value the clock, for ``seconds``."""
    rec = Recorder(Store(url), run=run)
    print("ready", flush=True)
    end = time.time() + seconds
    while time.time() < end:
        rec.forward_began()
        rec({"fact": "said_at", "value": time.time()})
        time.sleep(0.05)
    rec.close()


def seen_after(url, seconds):
    """The writer in another process; each point's first sight here minus its value."""
    env = {**os.environ, "SOMATIZE_CACHE": tempfile.mkdtemp(prefix="somatize-writer-")}
    child = subprocess.Popen([sys.executable, __file__, "--writer", url, "seen", str(seconds)],
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline() == "ready\n"
    store = Store(url)
    first, end = {}, time.time() + seconds + 3 * _upload.SEAL_S
    while time.time() < end:
        try:
            points = list(curve(store, "seen", "said_at"))
        except KeyError:  # no point there yet
            points = []
        now = time.time()
        for v in points:
            first.setdefault(v, now)
        time.sleep(0.05)
    child.wait()
    late = [first[v] - v for v in first]
    return {"median_s": statistics.median(late), "max_s": max(late), "points": len(late)}


def listing(url, count):
    store = Store(f"{url}/many")
    recs = []
    for i in range(count):
        rec = Recorder(store, run=f"run-{i:05d}", config={"lr": 10 ** -(i % 5), "seed": i})
        for k in range(5):
            rec.forward_began()
            rec({"fact": "loss", "value": 1.0 / (k + 1 + i)})
        rec._flush()
        recs.append(rec)
    for rec in recs:
        rec.close()
    wal = recs[0].root
    os.environ["SOMATIZE_CACHE"] = tempfile.mkdtemp(prefix="somatize-reader-")
    reader = Store(f"{url}/many")
    got = {}
    for kind in ("cold", "warm"):
        before = dict(reader.bucket.requests)
        t = clock()
        table = runs(reader)
        got[kind] = (1e3 * (clock() - t), delta(reader.bucket, before))
        assert len(table) == count
    t = clock()
    assert len(runs(wal)) == count
    got["disk"] = (1e3 * (clock() - t), {})
    keys = [k for k, _ in reader.bucket.list("") if k.startswith(("heads/", "runs/"))]
    t = clock()
    with ThreadPoolExecutor(16) as pool:  # what the cold listing asked, asked bare: the server's own pace
        list(pool.map(lambda k: reader.bucket.get(k, 1 << 26), keys))
    got["bare"] = (1e3 * (clock() - t), {"GET": len(keys)})
    t = clock()
    reader.bucket.list("heads", tags=True)
    got["list"] = (1e3 * (clock() - t), {"LIST": 1})
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--commits", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--quick", action="store_true", help="a few short rounds: checks the script runs")
    ap.add_argument("--writer", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writer:
        return writer(args.writer[0], args.writer[1], float(args.writer[2]))
    if args.quick:
        args.rounds, args.warmup, args.steps, args.runs, args.commits, args.seconds = 2, 30, 300, 40, 5, 4.0
    url = environment()
    print(f"a run on a bucket store, moto's S3 server on 127.0.0.1 (its own process); "
          f"SEAL_S {_upload.SEAL_S:g} s; {machine()}")

    c = commits(url, args.commits, 100)
    shown = ", ".join(f"{m} {n:g}" for m, n in sorted(c["per_commit"].items()))
    print(f"  a commit of 100 forwards (200 facts), flushed: {shown} requests (median of {args.commits})")
    target("PUTs a commit (its segment and its head; no object kept)", c["per_commit"].get("PUT", 0), 2,
           unit="PUTs")
    reported("bytes sent a fact / bytes a fact takes on disk", c["bytes_per_fact"] / c["local_bytes_per_fact"])
    print(f"  bytes a fact: {c['bytes_per_fact']:.1f} sent, {c['local_bytes_per_fact']:.1f} on disk")

    s = step_cost(url, args.rounds, args.warmup, args.steps)
    print(f"  the step: {s['us']['bucket']:.1f} µs with the bucket store, {s['us']['disk']:.1f} µs on disk "
          f"({args.steps} steps timed a round, {s['sealed']:g} segments sent meanwhile, {args.rounds} rounds)")
    print(f"  a seal: {s['seal_cpu_ms']:.2f} ms of the uploader thread's CPU, {s['seal_wall_ms']:.1f} ms wall "
          f"(medians); the uploader's CPU in every seal of the rounds (the closes' too) over the bucket variant's "
          f"timed steps: {100 * s['uploader_share']:.2f}%")
    print(f"  bucket / disk, round by round: {s['spread']}")
    target("steady step, Trainer + Recorder, bucket store / store on disk", s["x"], 1.01)

    f = seen_after(f"{url}/seen", args.seconds)
    print(f"  a fact seen by another process through the bucket: median {f['median_s']:.2f} s, longest "
          f"{f['max_s']:.2f} s ({f['points']} facts)")
    target("a fact seen by another process, the longest", f["max_s"], 2 * _upload.SEAL_S, unit="s")

    got = listing(url, args.runs)
    for kind in ("cold", "warm"):
        ms, asked = got[kind]
        print(f"  runs() of {args.runs} runs, {kind}: {ms:.1f} ms, requests "
              f"{', '.join(f'{m} {n}' for m, n in sorted(asked.items())) or 'none'}")
    print(f"  runs() of the same runs on disk: {got['disk'][0]:.1f} ms; the cold listing's {got['bare'][1]['GET']} "
          f"GETs made bare, 16 at a time: {got['bare'][0]:.1f} ms (the server's pace)")
    reported(f"runs() of {args.runs} runs, cold / its GETs made bare", got["cold"][0] / got["bare"][0])
    print(f"  the warm listing's LIST made bare: {got['list'][0]:.1f} ms")
    reported(f"runs() of {args.runs} runs, warm: bucket / disk", got["warm"][0] / got["disk"][0])
    reported(f"runs() of {args.runs} runs, warm / its LIST made bare", got["warm"][0] / got["list"][0])
    reported(f"runs() of {args.runs} runs, cold (ms)", got["cold"][0], unit="ms")

    commits_a_day = DAY_S / 2
    writer_day = commits_a_day * sum(c["per_commit"].values())
    reported("requests a day, a run committing every 2 s (its writer)", writer_day, unit="requests")
    reported("requests a day, a reader polling its curve every 2 s", commits_a_day, unit="requests")


if __name__ == "__main__":
    main()
