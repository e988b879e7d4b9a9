"""Runs of a store: where they live, their summaries, and whether they are alive.

The rule kept here: listing runs reads one small ``summary.json`` per run and
never a fact. A run's state is what its summary says, corrected by its lock:
"running" with nobody holding the lock means the process died ("interrupted").
POSIX locks belong to a process and closing any descriptor of the file drops
them, so a run recorded by this very process is never probed through its lock
file: the in-process registry ``LIVE`` answers for it.
"""

from __future__ import annotations

import difflib
import errno
import fcntl
import os
import threading
from pathlib import Path

import orjson

from .._base.errors import SomatizeKeyError, SomatizeValueError
from .._store.names import RUN_NAME, run_names

SUMMARY = "summary.json"
LOCK = "lock"
LOG = "facts.log"
INDEX = "index.bin"
SERIES = "series"

# realpath of a run folder -> the live Recorder writing it in this process
LIVE: dict = {}
LIVE_LOCK = threading.RLock()


def store_root(store, create: bool = False) -> Path:
    """The root folder of a Store, or of a path naming one. Reading a path
    opens nothing and writes nothing (``Store(path)`` would make one)."""
    from .._store.names import store_root as root_of

    if not create:
        return root_of(store)
    from .._store.store import StoreNotWritable, as_store

    store = as_store(store)
    if store.readonly:
        raise StoreNotWritable(
            f"a Recorder writes into its store, and {store!r} was opened read-only: "
            f"write Recorder(Store({str(store.path)!r}), ...)"
        )
    return Path(store.path)


def checked_name(run) -> str:
    if not isinstance(run, str) or not RUN_NAME.fullmatch(run) or run in (".", ".."):
        raise SomatizeValueError(
            f"run name {run!r} is not allowed: use letters, digits, '.', '_' and '-' "
            f"(no '/' or spaces), e.g. run=\"a-run\""
        )
    return run


def run_folder(root: Path, run: str) -> Path:
    return root / "runs" / checked_name(run)


def existing_folder(root: Path, run) -> Path:
    """The folder of a run that exists, or an error naming the close ones."""
    folder = run_folder(root, run)
    if (folder / SUMMARY).exists() or (folder / LOG).exists():
        return folder
    names = run_names(root)
    close = difflib.get_close_matches(run, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
    known = ", ".join(map(repr, names[:10])) + (" …" if len(names) > 10 else "")
    raise SomatizeKeyError(
        f"no run {run!r} in the store at {root}: {hint}"
        f"runs there: {known or 'none yet (a Recorder(store, run=...) makes one)'}"
    )


def read_summary(folder: Path) -> dict | None:
    try:
        return orjson.loads((folder / SUMMARY).read_bytes())
    except FileNotFoundError:
        return None
    except orjson.JSONDecodeError:
        # Written by rename, so a bad one is damage, reported by check.
        return None


def live_recorder(folder: Path):
    with LIVE_LOCK:
        return LIVE.get(os.path.realpath(folder))


def try_lock(folder: Path) -> int | None:
    """An fd holding the run's lock, or None when another process holds it."""
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EACCES, errno.EAGAIN):
            return None
        raise
    return fd


def holder_alive(folder: Path) -> bool:
    """Whether another process holds the run's lock (never called for a run
    this process records: closing our probe would drop our own lock).

    The probe asks for a shared lock on a read-only descriptor: it conflicts
    with the recorder's exclusive one, and needs no right to write, so a
    store one may only read still tells running from interrupted."""
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # closing releases the probe's lock
    return False


def state_of(folder: Path, summary: dict | None) -> str:
    said = (summary or {}).get("state", "running")
    if said != "running":
        return said
    if live_recorder(folder) is not None:
        return "running"
    return "running" if holder_alive(folder) else "interrupted"


def flush_live(folder: Path) -> None:
    """Read your own writes: a live Recorder of this run hands its facts over."""
    recorder = live_recorder(folder)
    if recorder is not None:
        recorder.flush()


def summaries(store) -> list[dict]:
    """One dict per run, with its state resolved; reads no facts."""
    root = store_root(store)
    runs_dir = os.path.realpath(root / "runs")
    with LIVE_LOCK:
        mine = [r for real, r in LIVE.items() if os.path.dirname(real) == runs_dir]
    for recorder in mine:
        recorder.flush()
    out = []
    for name in run_names(root):
        folder = root / "runs" / name
        summary = read_summary(folder)
        if summary is None and not (folder / LOG).exists():
            continue  # a folder being created, or not a run
        row = dict(summary or {"run": name, "forwards": 0, "facts": 0})
        row["run"] = name
        row["state"] = state_of(folder, summary)
        out.append(row)
    return out
