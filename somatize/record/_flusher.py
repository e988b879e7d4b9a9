"""One background thread flushes every live Recorder of this process.

The rule kept here: the flusher never swallows a failure silently. A flush
that fails stops its Recorder (``Recorder._fail``), and the owner hears of it
at its next call into the Recorder: the next fact handed over, ``flush()``,
``close()``. At exit every live Recorder still open is marked interrupted
(its owner did not close it), with the exception that ended the script as
its cause when there is one (Python keeps it as ``sys.last_value`` for the
exit handlers to read); a forked child (a DataLoader worker) forgets its
parent's Recorders.

Why a Recorder younger than FLUSH_EVERY is left alone: a background flush
holds the GIL while it encodes, which the training loop keeps coming back
for, and syncs the run's files; the close commits every file again. A run
shorter than FLUSH_EVERY is written once, by its close, instead of twice
(the Recorder's fixed cost in bench/RESULTS.md).

Why every 0.25 s and not more often: each of the flush thread's system calls
takes the GIL back from a training loop that lets go of it inside torch, so
the more often it flushes, the more a recorded step costs (the steady step
in bench/RESULTS.md). Another process still sees facts well within a second.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from ._runs import LIVE, LIVE_LOCK
from ._summary import EXITED, cause_of

FLUSH_EVERY = 0.25  # seconds; another process sees facts within about this

_flusher: threading.Thread | None = None


def flush_all(now=None):
    """Flush every live Recorder of this process that is FLUSH_EVERY old:
    a younger one waits for the next round (or its close), so a run shorter
    than a quarter second is written once, by its close, and a longer one
    is first flushed 0.25 to 0.5 s in (the bound kill -9 had already)."""
    now = time.monotonic() if now is None else now
    with LIVE_LOCK:
        recorders = [r for r in LIVE.values() if now - r._born >= FLUSH_EVERY]
    for recorder in recorders:
        try:
            recorder._flush(background=True)  # synced on this thread (sync_all: one syncfs, or fsyncs in turn)
        except Exception:
            pass  # the recorder keeps it and raises it at its owner's next call


def _loop():
    while True:
        time.sleep(FLUSH_EVERY)
        flush_all()


def start():
    global _flusher
    if _flusher is None or not _flusher.is_alive():
        _flusher = threading.Thread(target=_loop, name="somatize-recorder-flush", daemon=True)
        _flusher.start()


def last_error():
    """The exception that last went unhandled to the top of this process
    (what the interpreter printed, or IPython's last cell error), or None."""
    return getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)


def close_all():
    """Mark every live Recorder of this process still open interrupted (its
    owner did not close it), with the exception that last went unhandled as
    its cause when there is one: at exit, and when a forked rank of
    ``somatize.torch.launch`` ends. A Recorder that fails to end is named on
    stderr; nothing is raised."""
    with LIVE_LOCK:
        recorders = [r for r in LIVE.values() if r._pid == os.getpid()]
    error = last_error()
    for recorder in recorders:
        fresh = error is not None and error is not recorder._error_before
        try:
            recorder._end("interrupted", cause_of(error) if fresh else EXITED)
        except Exception as e:  # nobody left to raise to: say it where a person looks
            print(f"somatize: {e}", file=sys.stderr)


def _forget_after_fork():
    # A forked child inherits the registry but not the thread; it must
    # neither write nor close its parent's runs. A Recorder's lock that the
    # thread held at the fork would be held forever: made anew, so the
    # child's copy still answers what it reads (forwards, curve). The child's
    # copy of each run's lock file is closed: the lock belongs to the open
    # file (_base.locks), which the child shares, and a child that outlived
    # its parent (a DataLoader worker) would keep the run locked.
    global _flusher
    for recorder in LIVE.values():
        recorder._flush_lock._at_fork_reinit()
        recorder._let_go_after_fork()
    LIVE.clear()
    _flusher = None


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget_after_fork)
