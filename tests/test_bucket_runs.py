"""A run in a bucket (issue 33): its segments and head as bytes, read
strictly; a Recorder writing ``Store("s3://…")`` through its local copy and
uploader; readers reading it through the mirror; each fault a test, against
moto's S3 server on 127.0.0.1 (tests/buckets.py). Nothing here waits on a
clock: a writer's staleness is judged on a clock the test sets, a request
held back is held by a proxy until the test lets it go, and a poll for
another process's fact stops at a count of polls."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
import torch
import xxhash
from buckets import Faulty

from somatize import Recorder, Store
from somatize._base.bucket import Bucket
from somatize._base.errors import DamagedError, Fenced
from somatize.record import _mirror, _segments, _upload, curve, facts, runs
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


# -- a run written to the bucket, read through the mirror -------------------------------------

TASKS = Path(__file__).with_name("bucket_tasks.py")
POLLS = 600  # a poll for another process's fact gives up after this many (0.1 s apart): a bound, never asserted


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """This test's machine: its copies of buckets under a cache of its own
    (``SOMATIZE_CACHE``); ``machine("b")`` moves to another machine."""
    def to(name):
        folder = tmp_path / f"cache-{name}"
        monkeypatch.setenv("SOMATIZE_CACHE", str(folder))
        return folder

    to("a")
    return to


def logged(rec, start, stop):
    for i in range(start, stop):
        rec.forward_began()
        rec({"fact": "loss", "value": float(i)})


def losses(store, run):
    return list(curve(store, run, "loss"))


def head_of(store, run):
    return _segments.decode_head(store.bucket.get(_segments.head_key(run), 1 << 24), run)


def spent(bucket, before):
    """The requests ``bucket`` made since its counts were ``before``, by method."""
    return {m: n - before.get(m, 0) for m, n in bucket.requests.items() if n != before.get(m, 0)}


def state_of(store, run):
    return runs(store).set_index("run").loc[run, "state"]


def test_a_run_written_to_the_bucket_reads_back_on_another_machine(s3_url, machine):
    store = Store(s3_url)
    with Recorder(store, run="r", config={"lr": 0.1}) as rec:
        logged(rec, 0, 100)
        rec.flush()
        assert head_of(store, "r")["segments"] >= 1
        logged(rec, 100, 150)
    head = head_of(store, "r")
    assert head["state"] == "finished" and head["summary"]["forwards"] == 150
    machine("b")
    reader = Store(s3_url)
    assert losses(reader, "r") == [float(i) for i in range(150)]
    assert [f["value"] for f in facts(reader, "r") if f["fact"] == "loss"] == [float(i) for i in range(150)]
    table = runs(reader).set_index("run")
    assert table.loc["r", "state"] == "finished" and table.loc["r", "forwards"] == 150
    assert table.loc["r", "config.lr"] == 0.1


def test_a_commit_costs_two_puts_and_a_poll_of_a_run_unchanged_is_one_304(s3_url, machine):
    store = Store(s3_url)
    rec = Recorder(store)
    logged(rec, 0, 10)
    rec.flush()
    counts = []
    for k in range(1, 6):
        before = dict(store.bucket.requests)
        logged(rec, 10 * k, 10 * k + 10)
        rec.flush()
        counts.append(spent(store.bucket, before))
    assert counts == [{"PUT": 2}] * 5  # the segment, then the head
    rec.close()  # (a query in the writer's process reads its copy while it records)
    machine("b")
    reader = Store(s3_url)
    assert losses(reader, rec.run) == [float(i) for i in range(60)]
    before, received = dict(reader.bucket.requests), reader.bucket.received
    assert losses(reader, rec.run) == [float(i) for i in range(60)]
    assert spent(reader.bucket, before) == {"GET": 1}
    assert reader.bucket.received == received  # a 304: no byte sent


def test_runs_lists_the_heads_once_and_fetches_only_those_that_changed(s3_url, machine):
    store = Store(s3_url)
    names = [f"run-{i}" for i in range(5)]
    for name in names:
        with Recorder(store, run=name) as rec:
            logged(rec, 0, 3)
    machine("b")
    reader = Store(s3_url)
    assert sorted(runs(reader)["run"]) == names
    before = dict(reader.bucket.requests)
    assert sorted(runs(reader)["run"]) == names
    assert spent(reader.bucket, before) == {"LIST": 1}
    machine("a")
    with Recorder(store, run="run-2", resume=True) as rec:
        logged(rec, 3, 5)
    machine("b")
    before = dict(reader.bucket.requests)
    table = runs(reader).set_index("run")
    assert table.loc["run-2", "forwards"] == 5 and table.loc["run-1", "forwards"] == 3
    assert spent(reader.bucket, before) == {"LIST": 1, "GET": 2}  # the head that changed, and its new segment


def held_from_now_on(proxy, url):
    """``Store(url)`` opened through ``proxy``, which then holds back the
    next request (and answers the rest); the requests the opening made."""
    store = Store(url)
    opened = len(proxy.seen)
    proxy.stall = opened + 1
    return store, opened


def test_the_network_is_never_on_the_steps_path(s3_url, machine, moto_endpoint, monkeypatch):
    """Every request to the bucket held back by a proxy: facts handed over,
    flushed into the local copy and read back while the segment's PUT waits;
    the bucket gets them once it answers."""
    with Faulty(moto_endpoint, stall_s=120) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        store, opened = held_from_now_on(proxy, s3_url)
        rec = Recorder(store)  # a name of its own: nothing asked of the bucket
        logged(rec, 0, 1000)
        rec._flush()  # the local commit, as the background flusher makes it
        for _ in range(POLLS):
            if len(proxy.seen) > opened:
                break
            time.sleep(0.1)
        assert [m for m, _ in proxy.seen[opened:]] == ["PUT"]  # the segment, held back
        logged(rec, 1000, 2000)
        rec._flush()
        assert losses(rec.root, rec.run) == [float(i) for i in range(2000)]
        assert len(proxy.seen) == opened + 1  # nothing else went out meanwhile
        proxy._release.set()
        rec.close()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    machine("b")
    reader = Store(s3_url)
    assert losses(reader, rec.run) == [float(i) for i in range(2000)]
    assert state_of(reader, rec.run) == "finished"


def test_two_writers_racing_for_one_segment_number_one_wins_the_other_is_fenced(s3_url, machine):
    store = Store(s3_url)
    with Recorder(store, run="r") as rec:
        logged(rec, 0, 10)
    writers = []
    for name in ("a", "b"):  # two machines resume the same run: both will make segment 1 next
        machine(name)
        writers.append(Recorder(Store(s3_url), run="r", resume=True))
    assert {w._sender.n for w in writers} == {1}
    for w, start in zip(writers, (10, 20)):
        logged(w, start, start + 5)
    outcomes, go = [None, None], threading.Barrier(2)

    def flush(i):
        go.wait()
        try:
            writers[i].flush()
            outcomes[i] = "won"
        except Fenced as e:
            outcomes[i] = e

    threads = [threading.Thread(target=flush, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(map(str, outcomes)).count("won") == 1
    won = outcomes.index("won")
    lost = outcomes[1 - won]
    assert "runs/r/seg/0000000001" in str(lost) and "fenced out" in str(lost)
    with pytest.raises(Fenced, match="stopped"):
        logged(writers[1 - won], 50, 51)  # the loser's next fact says so
    with pytest.raises(Fenced, match="stopped"):
        writers[1 - won].close()
    writers[won].close()
    machine("c")
    start = (10, 20)[won]
    assert losses(Store(s3_url), "r") == [float(i) for i in [*range(10), *range(start, start + 5)]]


def test_a_stale_etag_fences_the_writer_whose_head_was_replaced(s3_url, machine):
    store = Store(s3_url)
    rec = Recorder(store, run="r")
    logged(rec, 0, 10)
    rec.flush()
    head = head_of(store, "r")
    store.bucket.put(_segments.head_key("r"), _segments.encode_head(
        "r", "another-writer", 1, head["segments"] + 1, "running", head["updated"], head["files"], head["summary"]))
    logged(rec, 10, 20)
    with pytest.raises(Fenced, match="heads/r.json"):
        rec.flush()
    with pytest.raises(Fenced, match="stopped"):
        rec.close()


def test_a_deleted_or_corrupted_segment_is_damage_naming_its_key(s3_url, machine):
    store = Store(s3_url)
    for name in ("gone", "flipped", "whole"):
        with Recorder(store, run=name) as rec:
            logged(rec, 0, 10)
            rec.flush()
            logged(rec, 10, 20)
    bucket = store.bucket
    bucket.delete(_segments.segment_key("gone", 1))
    data = bytearray(bucket.get(_segments.segment_key("flipped", 0), 1 << 24))
    data[-20] ^= 0xFF
    bucket.put(_segments.segment_key("flipped", 0), bytes(data))
    machine("b")
    reader = Store(s3_url)
    with pytest.raises(DamagedError, match=r"runs/gone/seg/0000000001 is missing"):
        curve(reader, "gone", "loss")
    with pytest.raises(DamagedError, match=r"runs/flipped/seg/0000000000 has a body whose hash"):
        facts(reader, "flipped")
    table = runs(reader).set_index("run")
    assert table.loc["gone", "state"] == "damaged" and "runs/gone/seg/0000000001" in table.loc["gone", "problem"]
    assert table.loc["flipped", "state"] == "damaged"
    assert "runs/flipped/seg/0000000000" in table.loc["flipped", "problem"]
    assert table.loc["whole", "state"] == "finished"
    assert losses(reader, "whole") == [float(i) for i in range(20)]


def test_a_bucket_read_is_bounded_by_what_is_there_and_by_its_prefix(s3_url, machine):
    store = Store(s3_url)
    with Recorder(store, run="r") as rec:
        logged(rec, 0, 5)
    bucket = store.bucket
    head = head_of(store, "r")
    bucket.put(_segments.head_key("r"), _segments.encode_head(  # a head claiming segments not there
        "r", head["writer"], head["seq"] + 1, 10**9, "running", head["updated"], head["files"], head["summary"]))
    outside = Bucket(s3_url.rsplit("/", 1)[0] + "/elsewhere")
    outside.put("heads/x.json", b"{}")  # a sibling prefix's head: never listed
    bucket.put("heads/not a run name.json", b"{}")
    machine("b")
    reader = Store(s3_url)
    with pytest.raises(DamagedError, match="seg/00000000"):
        curve(reader, "r", "loss")
    listed = runs(reader)
    assert list(listed["run"]) == ["r"] and listed["state"][0] == "damaged"
    assert reader.bucket.requests["GET"] <= 2 + 2 * _mirror.BATCH  # the heads and one batch of segments at most


def test_a_writer_killed_before_its_segment_reads_interrupted_at_its_last_segment(s3_url, machine):
    """Killed after an object and 10 forwards reached the bucket and 10 more
    were committed on its machine only: another machine reads 10, running
    until the head goes stale (a clock the test sets), then interrupted;
    the object is there. Resumed on the writer's own machine, its copy sends
    the 10 more; resumed on another, the run goes on from its last segment."""
    with subprocess.Popen([sys.executable, str(TASKS), "before-segment", s3_url, "k"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    machine("b")
    reader = Store(s3_url)
    assert losses(reader, "k") == [float(i) for i in range(10)]
    assert state_of(reader, "k") == "running"  # its head is fresh: as far as anyone can tell, it runs
    head = head_of(reader, "k")
    with pytest.MonkeyPatch.context() as later:
        later.setattr(_mirror, "clock", lambda: head["updated"] + _mirror.STALE_S + 1)
        table = runs(reader).set_index("run")
        assert table.loc["k", "state"] == "interrupted" and "stopped replacing" in table.loc["k", "cause"]
    assert reader.recall("k/weights").tolist() == list(np.arange(10.0))
    machine("a")  # the writer's machine: its copy holds 20
    with Recorder(Store(s3_url), run="k", resume=True) as rec:
        logged(rec, 20, 25)
    machine("b")
    assert losses(reader, "k") == [float(i) for i in range(25)]
    assert state_of(reader, "k") == "finished"


def test_a_writer_killed_between_its_segment_and_its_head_loses_nothing_resumed(s3_url, machine):
    done = subprocess.run([sys.executable, str(TASKS), "before-head", s3_url, "h"], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    store = Store(s3_url)
    assert head_of(store, "h")["segments"] == 1  # the head counts segment 0 alone
    assert store.bucket.head(_segments.segment_key("h", 1)) is not None  # segment 1 was made
    machine("b")
    assert losses(Store(s3_url), "h") == [float(i) for i in range(10)]  # readers go by the head
    machine("c")  # another machine resumes: it finds segment 1, and goes on after it
    with Recorder(Store(s3_url), run="h", resume=True) as rec:
        assert rec._sender.n == 2
        logged(rec, 20, 25)
    machine("b")
    assert losses(Store(s3_url), "h") == [float(i) for i in range(25)]


def test_another_process_sees_a_fact_through_the_bucket(s3_url, machine):
    """The writer hands five facts over and asks nothing: its background
    flusher and uploader send them. Polled here (a bound on polls, not a
    time asserted) through the bucket, then closed."""
    machine("writer")
    with subprocess.Popen([sys.executable, str(TASKS), "writes-on", s3_url, "w"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, env=dict(os.environ)) as child:
        assert child.stdout.readline() == "said\n"
        machine("reader")
        reader = Store(s3_url)
        seen = []
        for _ in range(POLLS):
            listed = runs(reader).set_index("run")
            if "w" in listed.index and listed.loc["w", "forwards"] == 5:
                seen = losses(reader, "w")
                break
            time.sleep(0.1)
        assert seen == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert state_of(reader, "w") == "running"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "closed\n"
    assert state_of(reader, "w") == "finished"


class Probe(torch.utils.data.Dataset):
    """What a DataLoader worker (a forked child) finds of its parent's run in
    a bucket, and what it does with it: hands a fact over, flushes, closes."""

    def __init__(self, rec):
        self.rec = rec

    def __len__(self):
        return 4

    def __getitem__(self, i):
        senders, thread = len(_upload._SENDERS), _upload._thread
        self.rec({"fact": "from_a_worker", "value": float(i)})
        self.rec.flush()  # the child's copy: nothing written, nothing sent
        self.rec.close()
        return torch.tensor([senders, thread is not None, os.getpid() != self.rec._pid])


def test_a_dataloader_forked_while_an_upload_is_in_flight_sends_and_holds_nothing(s3_url, machine, moto_endpoint,
                                                                                   monkeypatch):
    with Faulty(moto_endpoint, stall_s=120) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        store, opened = held_from_now_on(proxy, s3_url)
        rec = Recorder(store)
        logged(rec, 0, 100)
        rec._flush()
        for _ in range(POLLS):
            if len(proxy.seen) > opened:
                break
            time.sleep(0.1)
        assert [m for m, _ in proxy.seen[opened:]] == ["PUT"]  # the segment's PUT, in flight
        loader = torch.utils.data.DataLoader(Probe(rec), batch_size=None, num_workers=2,
                                             multiprocessing_context="fork", persistent_workers=True)
        seen = [t.tolist() for t in loader]
        assert seen == [[0, 0, 1]] * 4  # no uploads, no uploader thread, in a child
        assert len(proxy.seen) == opened + 1  # nothing sent by the workers
        proxy._release.set()
        rec.close()  # the workers still alive: they hold neither the run's lock nor anything else
        with Recorder(store, run=rec.run, resume=True) as again:  # so this machine takes the run again
            logged(again, 100, 110)
        del loader
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    machine("b")
    reader = Store(s3_url)
    assert losses(reader, rec.run) == [float(i) for i in range(110)]
    assert "from_a_worker" not in {f["fact"] for f in facts(reader, rec.run)}


# -- notebook 04's sweep and notebook 07's two ranks, on the bucket -------------------------------


def test_a_dask_sweep_whose_workers_share_only_the_bucket_resumes_a_killed_task_elsewhere(s3_url, machine, tmp_path):
    """tests/test_many_runs.py's retry, each worker a machine of its own:
    the task killed at step 25 (its record flushed to the bucket first) is
    retried by Dask on the other worker, which finds only the bucket's
    record and checkpoint, resumes there and ends as a run never stopped."""
    import bucket_tasks
    from distributed import Client, LocalCluster

    from many_tasks import STEPS

    caches = str(tmp_path / "machines")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        first = sorted(client.scheduler_info()["workers"])[0]
        reference = client.submit(bucket_tasks.train_apart, caches, s3_url, "reference", 0.01, workers=[first],
                                  allow_other_workers=True).result()
        killed = client.submit(bucket_tasks.train_apart, caches, s3_url, "killed", 0.01, kill_at=25,
                               workers=[first], allow_other_workers=True).result()
    assert killed["pid"] != reference["pid"]  # the retry ran on the other worker
    assert killed["final"] is not None and killed["loss"] == reference["loss"]
    machine("reader")
    store = Store(s3_url)
    table = runs(store).set_index("run")
    assert (table["state"] == "finished").all() and (table["forwards"] == STEPS).all()
    assert losses(store, "killed") == losses(store, "reference")  # every step once, in order
    got, want = store.recall("killed/final"), store.recall("reference/final")
    for node in want:
        for k in want[node]:
            torch.testing.assert_close(got[node][k], want[node][k], atol=1e-12, rtol=0)


def test_two_gloo_ranks_killed_and_relaunched_write_one_run_to_the_bucket(s3_url, machine):
    """tests/test_ddp.py's job on two ranks killed at step 8 and launched
    again, into a bucket: rank 0 writes the run (the others' Recorders
    write nothing), and the relaunched job equals one never stopped."""
    base = s3_url.rsplit("/", 1)[0]
    done = subprocess.run([sys.executable, str(TASKS), "ddp", f"{base}/whole", f"{base}/killed"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert got["lost"] == 0 and got["recording"] is True
    diff = torch.tensor(got["again"], dtype=torch.float64) - torch.tensor(got["whole"], dtype=torch.float64)
    assert diff.abs().max().item() <= 1e-12
    assert got["runs"] == ["ddp"] and got["state"] == "finished" and got["forwards"] == 12
    assert got["losses"] == got["whole_losses"]  # one run, every step once


def test_somatize_runs_lists_a_bucket_store_and_writes_nothing_there(s3_url, machine):
    store = Store(s3_url)
    with Recorder(store, run="a", config={"lr": 0.1}) as rec:
        logged(rec, 0, 7)
    with Recorder(store, run="b", config={"lr": 0.01}) as rec:
        logged(rec, 0, 3)
    store.bucket.delete(_segments.segment_key("b", 0))
    keys = store.bucket.list("")
    machine("b")
    done = subprocess.run([sys.executable, "-m", "somatize.cli", "runs", s3_url], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["run", "state", "forwards", "facts"]
    assert lines[1].split()[:3] == ["a", "finished", "7"]
    assert lines[2].split()[:2] == ["b", "damaged"]
    assert any(line.startswith("damaged: b:") and "runs/b/seg/0000000000" in line for line in lines)
    where = subprocess.run([sys.executable, "-m", "somatize.cli", "runs", s3_url, "--where", "config.lr > 0.05"],
                           capture_output=True, text=True)
    assert [line.split()[0] for line in where.stdout.splitlines()[1:] if line and ":" not in line] == ["a"]
    assert store.bucket.list("") == keys  # a reader wrote nothing into the bucket


def test_compare_shows_the_runs_of_a_bucket_store_and_their_curves(s3_url, machine):
    from somatize.record import compare

    store = Store(s3_url)
    for lr in (0.1, 0.01, 0.001):
        with Recorder(store, run=f"lr-{lr}", config={"lr": lr}) as rec:
            for i in range(4):
                rec.forward_began()
                rec({"fact": "loss", "value": lr * (4 - i)})
    machine("b")
    explorer = compare(Store(s3_url), metric="loss.last")
    assert sorted(r["run"] for r in explorer.rows) == ["lr-0.001", "lr-0.01", "lr-0.1"]
    assert {r["run"]: r["loss.last"] for r in explorer.rows} == {"lr-0.1": 0.1, "lr-0.01": 0.01, "lr-0.001": 0.001}
    assert losses(explorer.store, "lr-0.1") == [0.1 * (4 - i) for i in range(4)]


def test_a_bucket_that_fails_stops_no_training_and_the_uploader_catches_up(s3_url, machine, moto_endpoint,
                                                                          monkeypatch):
    """Every attempt of one upload answered 503: the flush waiting on it
    raises BucketError naming the bucket; facts go on being handed over and
    committed on this machine; once the bucket answers, the next flush sends
    all of it."""
    from somatize._base.errors import BucketError

    with Faulty(moto_endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        store = Store(s3_url)
        store.bucket.sleep = lambda s: None  # Bucket's backoff, not waited here
        rec = Recorder(store)
        proxy.fail = len(proxy.seen) + store.bucket.attempts  # one call's every attempt
        logged(rec, 0, 10)
        with pytest.raises(BucketError, match="failed 5 times"):
            rec.flush()
        logged(rec, 10, 20)  # the training goes on
        rec._flush()
        assert losses(rec.root, rec.run) == [float(i) for i in range(20)]
        rec.close()  # the bucket answers again: all of it sent, then finished
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    machine("b")
    reader = Store(s3_url)
    assert losses(reader, rec.run) == [float(i) for i in range(20)]
    assert state_of(reader, rec.run) == "finished"


def test_an_open_run_with_nothing_new_beats_its_head_and_sends_no_segment(s3_url, machine):
    store = Store(s3_url)
    rec = Recorder(store, run="idle")
    logged(rec, 0, 3)
    rec.flush()
    before = head_of(store, "idle")
    rec._sender.tick(_upload.clock() + _upload.HEARTBEAT_S + 1)  # the uploader's look, a beat later
    after = head_of(store, "idle")
    assert after["segments"] == before["segments"] and after["seq"] > before["seq"]
    assert after["updated"] >= before["updated"] and after["writer"] == before["writer"]
    rec.close()


def test_a_run_the_bucket_holds_is_refused_unless_resumed(s3_url, machine):
    with Recorder(Store(s3_url), run="r") as rec:
        logged(rec, 0, 3)
    machine("b")
    with pytest.raises(ValueError, match=r"already exists in s3://.*resume=True"):
        Recorder(Store(s3_url), run="r")
    with Recorder(Store(s3_url), run="r", resume=True) as rec:
        logged(rec, 3, 5)
    assert losses(Store(s3_url), "r") == [float(i) for i in range(5)]


def test_a_query_in_the_writers_process_sees_what_was_handed_over_before_it_is_sent(s3_url, machine, monkeypatch):
    monkeypatch.setattr(_upload, "SEAL_S", 1e9)  # nothing sent unless asked
    store = Store(s3_url)
    rec = Recorder(store, run="r")
    before = dict(store.bucket.requests)
    logged(rec, 0, 5)  # handed over: neither flushed nor sent
    assert losses(store, "r") == [float(i) for i in range(5)]  # from the Recorder's memory, as on disk
    assert spent(store.bucket, before) == {}  # nothing asked of the bucket
    rec.close()
    assert losses(store, "r") == [float(i) for i in range(5)]  # closed: read from the bucket


def test_a_rewound_run_reads_in_the_bucket_as_it_does_on_its_machine(s3_url, machine):
    """rewind() cuts the log and writes the index and series again: the
    bucket gets the log from the cut and those files whole, and a reader
    elsewhere reads the run as its writer's copy holds it."""
    store = Store(s3_url)
    with Recorder(store, run="r") as rec:
        logged(rec, 0, 30)
        rec.flush()
        rec.rewind(12)
        for i in range(12, 20):
            rec.forward_began()
            rec({"fact": "loss", "value": 100.0 + i})
        rec.flush()
        rec.rewind(15)
        rec.rewind(14)
        logged(rec, 14, 16)
    want = [float(i) for i in range(12)] + [100.0 + i for i in range(12, 14)] + [14.0, 15.0]
    assert losses(rec.root, "r") == want
    machine("b")
    reader = Store(s3_url)
    assert losses(reader, "r") == want
    assert [f["value"] for f in facts(reader, "r") if f["fact"] == "loss"] == want
    assert runs(reader).set_index("run").loc["r", "forwards"] == 16


def test_somatize_check_reads_every_run_of_a_bucket_store_naming_a_damaged_segment(s3_url, machine):
    store = Store(s3_url)
    for name in ("a", "b"):
        with Recorder(store, run=name) as rec:
            logged(rec, 0, 10)
            rec.flush()
            logged(rec, 10, 20)
    machine("b")
    clean = subprocess.run([sys.executable, "-m", "somatize.cli", "check", s3_url], capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "2 runs" in clean.stdout
    data = bytearray(store.bucket.get(_segments.segment_key("b", 1), 1 << 24))
    data[-30] ^= 0x01
    store.bucket.put(_segments.segment_key("b", 1), bytes(data))
    machine("c")  # a machine that has not read it yet
    found = subprocess.run([sys.executable, "-m", "somatize.cli", "check", s3_url], capture_output=True, text=True)
    assert found.returncode == 1, found.stdout
    problems = [line for line in found.stdout.splitlines() if line.startswith("problem:")]
    assert len(problems) == 1 and "run 'b'" in problems[0] and "runs/b/seg/0000000001" in problems[0]


def test_a_script_that_exits_without_close_leaves_its_run_interrupted_in_the_bucket(s3_url, machine):
    """The exit's close sends what is left and marks the run interrupted,
    its cause said; nothing handed over is lost."""
    code = ("import sys\nfrom somatize import Recorder, Store\nr = Recorder(Store(sys.argv[1]), run='e')\n"
            "for i in range(5):\n    r.forward_began()\n    r({'fact': 'loss', 'value': float(i)})\n")
    done = subprocess.run([sys.executable, "-c", code, s3_url], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    machine("b")
    reader = Store(s3_url)
    row = runs(reader).set_index("run").loc["e"]
    assert row["state"] == "interrupted" and "without close()" in row["cause"]
    assert losses(reader, "e") == [float(i) for i in range(5)]
    assert head_of(reader, "e")["state"] == "interrupted"
