"""What the processes of tests/test_bucket_runs.py run: writers of a run in
a bucket that die at a chosen moment, and one that writes on while another
process reads. ``python tests/bucket_tasks.py MODE URL RUN``; the bucket's
endpoint and credentials come from the environment (tests/buckets.py), the
machine's copies from ``SOMATIZE_CACHE``. Forward i says ``{"fact": "loss",
"value": float(i)}``, so what reads back is checked against range()."""

import os
import signal
import sys

import numpy as np

from somatize import Recorder, Store
from somatize.record import _upload


def forwards(rec, start, stop):
    for i in range(start, stop):
        rec.forward_began()
        rec({"fact": "loss", "value": float(i)})


def before_segment(store, run):
    """10 forwards in the bucket; an object kept there; 10 more committed on
    this machine only (the uploader told to wait), then killed by the parent."""
    _upload.SEAL_S = 1e9  # nothing sealed unless asked
    rec = Recorder(store, run=run)
    forwards(rec, 0, 10)
    rec.flush()  # segment 0 and the head
    store.keep(f"{run}/weights", np.arange(10.0))  # an object in the bucket
    forwards(rec, 10, 20)
    rec._flush()  # committed in the local copy, not sent
    print("ready", flush=True)
    sys.stdin.readline()  # the parent kills this process here


def before_head(store, run):
    """10 forwards in the bucket (segment 0 and its head), then 10 more in
    segment 1, and killed before the head counting it is written."""
    _upload.SEAL_S = 1e9
    rec = Recorder(store, run=run)
    forwards(rec, 0, 10)
    rec.flush()
    bucket = store.bucket
    replace_if = bucket.replace_if

    def dies_before_the_second_head(key, data, etag):
        if key.startswith("heads/"):
            os.kill(os.getpid(), signal.SIGKILL)
        return replace_if(key, data, etag)

    bucket.replace_if = dies_before_the_second_head
    forwards(rec, 10, 20)
    rec.flush()  # never returns


def writes_on(store, run):
    """Five forwards handed over and no flush asked: the background sends
    them (the local flusher, then the uploader); the parent polls through
    the bucket meanwhile, then says when to close."""
    rec = Recorder(store, run=run)
    forwards(rec, 0, 5)
    print("said", flush=True)
    sys.stdin.readline()
    rec.close()
    print("closed", flush=True)


def train_apart(caches, url, run, lr, kill_at=None):
    """many_tasks.train, each worker process a machine of its own: its
    copies of the bucket under ``caches/<pid>``, so a task retried on
    another worker finds nothing of the first try but what the bucket holds."""
    os.environ["SOMATIZE_CACHE"] = os.path.join(caches, str(os.getpid()))
    from many_tasks import train

    return train(url, run, lr, kill_at=kill_at)


def ddp(whole, killed):
    """tests/test_ddp.py's killed-and-relaunched job on two gloo ranks, each
    store in a bucket: launched from this process, which never asks a bucket
    itself before its ranks are done (they are forked from it). Prints, as
    JSON, what the relaunched job returned, the whole job's weights and what
    runs() says of the killed store."""
    import json

    import somatize
    from somatize.record import curve, runs
    from somatize.torch import launch

    import ddp_tasks

    first = launch(ddp_tasks.resumed, whole, nprocs=2, timeout_s=30)
    try:
        launch(ddp_tasks.resumed, killed, 8, nprocs=2, timeout_s=30)
        lost = None
    except somatize.RankLost as e:
        lost = e.lost
    again = launch(ddp_tasks.resumed, killed, nprocs=2, timeout_s=30)
    table = runs(killed)
    print(json.dumps({"whole": first["weights"], "again": again["weights"], "recording": again["recording"],
                      "lost": lost, "runs": list(table["run"]), "state": table.loc[0, "state"],
                      "forwards": int(table.loc[0, "forwards"]),
                      "losses": list(curve(killed, "ddp", "loss")), "whole_losses": list(curve(whole, "ddp", "loss"))}))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "ddp":
        ddp(*sys.argv[2:4])
    else:
        url, run = sys.argv[2:4]
        {"before-segment": before_segment, "before-head": before_head, "writes-on": writes_on}[mode](Store(url), run)
