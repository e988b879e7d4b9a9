"""The findings thread: a row's count of findings (how many
``somatize.diagnose`` returns, which reads the run's instrument series) is never made inside a
listing; ``_COUNTER`` counts them on one daemon thread per process, and a
listing reads what it counted (``counted_rows``)."""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import threading

from .._base.errors import SomatizeError
from ._public import public_text

WAIT_S = 120.0  # seconds ``_Counter.wait`` waits at most for the counts queued to land


class _Counter:
    """Counts findings on one daemon thread, so no request waits for
    ``diagnose``: ``known(folder, run, key)`` answers ``(count, current,
    problem)`` from what was counted and queues a count when it is not for
    ``key`` (the identity of the run's summary.json) yet. ``generation(folder)``
    changes whenever a count of that store lands or is forgotten: a listing's
    tag holds it instead of every row's count. A run that is gone is
    ``forget``-ten: its count, and any count of it still queued."""

    def __init__(self):
        self._counts: dict[str, dict[str, tuple]] = {}  # store folder -> run -> (summary key, count, problem)
        self._generations: dict[str, int] = {}
        # a tag made in another process (a server restarted) never matches one of this process
        self._epoch = secrets.token_hex(8)
        self._queued: set[tuple] = set()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition(self._lock)
        self._listing = 0  # listings being built now: the thread waits for them (they come first)

    def known(self, folder: str, run: str, key) -> tuple:
        if key is None:  # no summary.json: nothing to diagnose, nothing to wait for
            return None, True, None
        with self._lock:
            got = self._counts.get(folder, {}).get(run)
            if got is not None and got[0] == key:
                return got[1], True, got[2]
            job = (folder, run, key)
            if job not in self._queued:
                self._queued.add(job)
                self._queue.put(job)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._work, name="somatize-findings", daemon=True)
                    self._thread.start()
        return (got[1], False, got[2]) if got is not None else (None, False, None)

    def count_now(self, folder: str, run: str, key) -> list:
        """The findings of a run, counted here and now (the run panel asks)."""
        from .._diagnose import diagnose

        found = diagnose(folder, run=run)
        with self._lock:
            self._land(folder, run, (key, len(found), None))
        return found

    def generation(self, folder: str) -> tuple:
        return self._epoch, self._generations.get(folder, 0)

    def counted(self, folder: str) -> set[str]:
        """The runs of the store at ``folder`` that have a count (landed)."""
        with self._lock:
            return set(self._counts.get(folder, ()))

    def forget(self, folder: str, keep=None, runs=None) -> None:
        """Drop the counts of the store at ``folder``: of ``runs`` (and their
        counts still queued), or of its runs not in ``keep``, or all. (A
        queued count of a run gone by other means does not land: ``_work``
        looks for the run's folder.)"""
        with self._idle:
            counts = self._counts.get(folder, {})
            gone = counts.keys() & runs if runs is not None else counts.keys() - (keep or ())
            for run in gone:
                del counts[run]
            if not counts:
                self._counts.pop(folder, None)
            dropped = set()
            if runs is not None or keep is None:
                dropped = {j for j in self._queued if j[0] == folder and (runs is None or j[1] in runs)}
                self._queued -= dropped
            if gone or dropped:
                self._generations[folder] = self._generations.get(folder, 0) + 1
                self._idle.notify_all()

    def forget_stores(self, root: str, keep: set[str]) -> None:
        """``forget`` every store under ``root`` whose folder is not in ``keep``."""
        with self._lock:
            folders = {f for f in self._counts if f == root or f.startswith(root + os.sep)}
            folders |= {j[0] for j in self._queued if j[0] == root or j[0].startswith(root + os.sep)}
        for folder in folders - keep:
            self.forget(folder)

    def _land(self, folder, run, value):  # with the lock held
        self._counts.setdefault(folder, {})[run] = value
        self._generations[folder] = self._generations.get(folder, 0) + 1

    @contextlib.contextmanager
    def listing(self):
        """A context in which no new count starts: a listing holds it while
        it is built, so counting never slows a listing by more than the one
        diagnosis already under way."""
        with self._idle:
            self._listing += 1
        try:
            yield
        finally:
            with self._idle:
                self._listing -= 1
                self._idle.notify_all()

    def wait(self, timeout: float = WAIT_S) -> None:
        """Until every queued count has landed (for tests and benches);
        SomatizeError naming the runs still queued after ``timeout`` seconds
        (a diagnosis that hangs, or a wait inside a listing, which holds the
        counts back: never a wait without end)."""
        with self._idle:
            if self._idle.wait_for(lambda: not self._queued, timeout):
                return
            left = sorted(f"{os.path.basename(f)}/{r}" for f, r, _ in self._queued)
            listing = self._listing
        shown = ", ".join(left[:5]) + (f", … ({len(left)} in all)" if len(left) > 5 else "")
        raise SomatizeError(
            f"the counts of findings of {shown} had not landed after {timeout:g} s"
            + (f" ({listing} listing(s) being built hold them back: wait outside a listing)" if listing else
               " (a diagnosis still under way: see the somatize-findings thread's stack)"))

    def _after_fork(self):
        """In a forked child: the thread is not there, and a lock it held
        at the fork would be held by nobody. Everything the thread and the
        listings shared is made anew; the counts made stay, the ones queued
        are dropped (asked again, they are queued again and a thread started)."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue = queue.SimpleQueue()
        self._queued = set()
        self._thread = None
        self._listing = 0

    def _work(self):
        from .._diagnose import diagnose

        while True:
            job = self._queue.get()
            with self._idle:
                self._idle.wait_for(lambda: not self._listing)
                if job not in self._queued:  # forgotten: its run is gone
                    continue
            folder, run, key = job
            try:
                value = (key, len(diagnose(folder, run=run)), None)
            except Exception as e:  # noqa: BLE001 - a thread that died would leave every later count pending
                value = (key, None, public_text(str(e), folder)[:300])
            with self._idle:
                # not forgotten while it was being counted, nor gone by other means
                if job in self._queued and os.path.isdir(os.path.join(folder, "runs", run)):
                    self._land(folder, run, value)
                self._queued.discard(job)
                self._idle.notify_all()


_COUNTER = _Counter()
os.register_at_fork(after_in_child=_COUNTER._after_fork)


def counted_rows(root: str, rows: list[dict], keys: dict) -> list[dict]:
    """Copies of ``rows`` with ``findings`` (the count, or None while not
    counted yet) and ``counting`` (True while that count is not for the
    current summary.json); a count that failed says why in ``findings_problem``."""
    out = []
    for row in rows:
        if row["state"] == "damaged":
            out.append(row)
            continue
        count, current, problem = _COUNTER.known(root, row["run"], keys.get(row["run"]))
        row = {**row, "findings": count, "counting": not current}
        if problem:
            row["findings_problem"] = problem
        out.append(row)
    return out
