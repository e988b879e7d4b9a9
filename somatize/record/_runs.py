"""Runs of a store: where they live, their summaries, and whether they are alive.

The rule kept here: listing runs reads one small ``summary.json`` per run and
never a fact; a run whose summary does not read lists as "damaged" and the
others list as ever. Only regular files in real folders of the store are read,
through the store's backend (``_base/backend.py``): ``runs/`` and a run's
folder must not be symlinks (the listing holds ``runs/`` open and each run's
folder in it, opened without following one, and reads the run's files in
that folder; ``_files`` opens any other from the store's root down). A run's state is what its summary says,
corrected by its lock: "running" with nobody holding the lock means the
process died ("interrupted", its ``cause`` saying so). The lock is held by
the Recorder's open file (the backend's ``lock``, ``_base.locks``), so the probe is the answer for
every run, this process's own included, and probing never drops it. A run
recorded by this very process is read from memory through the in-process
registry ``LIVE`` (its facts not yet flushed too; a query never makes a live
Recorder write).
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from .._base import files
from .._base.backend import Handle, LocalBackend, handle
from .._base.errors import DamagedError, SomatizeKeyError, SomatizeValueError
from .._base.forks import fork_safe
from .._base.near import close_names
from .._store.names import RUN_NAME_LIMIT, backend_of, is_run_name, run_names, store_root
from . import _files
from ._summary import LOST, MAX_BYTES, Broken, parse

SUMMARY = "summary.json"
LOCK = "lock"
LOG = "facts.log"
INDEX = "index.bin"
SERIES = "series"

# realpath of a run folder -> the live Recorder writing it in this process
LIVE: dict = {}
# a run folder of a bucket's mirror (record/_mirror.py) -> "" while its writer,
# elsewhere, replaces its head (its lock here is nobody's), or why the run is
# damaged in its bucket (the key named): what the mirror's last look found
ELSEWHERE: dict = {}
LIVE_LOCK = fork_safe(threading.RLock())
# a run folder -> (its summary.json's identity, that summary as parsed, or
# why it did not read): a listing parses a summary again only when a flush
# has renamed a new one in
_PARSED: dict = {}
_PARSED_LIMIT = 20_000  # summaries kept (about 3 KB each): 10,000 runs fit, the memory stays bounded
_PARSED_LOCK = fork_safe(threading.Lock())


def checked_name(run) -> str:
    """``run``, when it may name a run (``is_run_name``); else the error saying what to write."""
    if is_run_name(run):
        return run
    if isinstance(run, str) and len(run) > RUN_NAME_LIMIT:
        raise SomatizeValueError(
            f"run name {run[:40]!r}… is {len(run)} characters long; a run name is at most "
            f"{RUN_NAME_LIMIT} (it names a folder): shorten it"
        )
    raise SomatizeValueError(
        f"run name {run!r:.80} is not allowed: use letters, digits, '.', '_' and '-' "
        f"(no '/' or spaces), e.g. run=\"a-run\""
    )


def runs_dir(root: Path) -> Path | None:
    """``<root>/runs``, None when there is none yet; DamagedError when it is
    a symlink or not a folder (nothing is read through it)."""
    path = root / "runs"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        kind = ("a link" if stat.S_ISLNK(st.st_mode) else "a file" if stat.S_ISREG(st.st_mode)
                else "something else (a FIFO, a device…)")
        raise DamagedError(
            f"{path}: runs is {kind}, not a folder; the runs of a store live in a real folder "
            f"there, and nothing was read through it. Move it away (a Recorder makes the folder "
            f"again) and run `somatize check {root}`"
        )
    return path


def run_folder(root: Path, run: str) -> Path:
    return root / "runs" / checked_name(run)


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be a run's folder (a symlink, a file), or None."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"{folder} is a symlink; a run's folder must be a real folder in the store (it is never followed)"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a folder"
    return None


def existing_folder(root: Path, run) -> Path:
    """The folder of a run that exists, or an error naming the close ones."""
    folder = run_folder(root, run)
    runs_dir(root)
    problem = folder_problem(folder)
    if problem is not None:
        raise DamagedError(f"run {run!r}: {problem}; move it away and run `somatize check {root}`")
    if recorded(folder):
        return folder
    names = [n for n in run_names(root) if n != run and recorded(os.path.join(root, "runs", n))]
    close = close_names(run, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
    if os.path.isdir(folder):  # a folder, but nothing recorded in it: not listed either
        hint = f"its folder holds nothing recorded (no {SUMMARY}, no {LOG}); " + hint
    known = ", ".join(map(repr, names[:10])) + (" …" if len(names) > 10 else "")
    raise SomatizeKeyError(
        f"no run {run!r} in the store at {root}: {hint}"
        f"runs there: {known or 'none yet (a Recorder(store, run=...) makes one)'}"
    )


_RECORDED = ("/" + SUMMARY, "/" + LOG)  # below a run's folder (a listing asks every run: no path joined)


def recorded(folder, at: int | None = None) -> bool:
    """Whether a folder of ``runs/`` holds a run: a summary.json that is not
    empty or a facts.log, of whatever kind (what is no file lists as
    damaged). A folder with neither (or only an empty summary: see
    ``load_summary``) is one being made, or no run: the listing (``summaries``)
    leaves it out, and nothing counts it. ``at``: a descriptor of ``runs/``,
    ``folder`` then the run's name; nothing is followed."""
    for name in _RECORDED:
        try:
            st = os.stat(f"{folder}{name}", dir_fd=at, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:  # not ours to look into: it lists, as damaged
            return True
        if name == _RECORDED[0] and st.st_size == 0 and stat.S_ISREG(st.st_mode):
            continue  # a new run's first summary, emptied by a power cut: a run only if facts.log is there
        return True
    return False


def load_summary(folder: Path, at=None, fs=None) -> dict | None:
    """The summary of the run in ``folder``, checked (``_summary.parse``);
    None when there is none. Raises ``Broken`` for one that does not read,
    ``_files.NotAFile`` for a summary or log that is not a regular file.
    ``at``: ``folder`` held open by ``fs``, its backend (``_files.read_bytes``)."""
    raw = _files.read_bytes(os.path.join(folder, SUMMARY), MAX_BYTES + 1, at=at, fs=fs)
    if raw is None:
        return None
    if not raw and not _holds(folder, LOG, at):
        # A new run's first summary is synced with its first commit, not
        # before (it counts nothing: Recorder._open); a power cut before
        # that commit can leave it empty. No facts, no run: one being made.
        return None
    if len(raw) > MAX_BYTES:
        raise Broken(f"is over {MAX_BYTES} bytes: not one a Recorder wrote")
    return parse(raw)


def _holds(folder, name, at=None) -> bool:
    """Whether ``folder`` (or the folder ``at`` holds open) has an entry ``name``, of any kind."""
    try:
        if at is None:
            os.stat(os.path.join(folder, name), follow_symlinks=False)
        else:
            os.stat(name, dir_fd=at, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def summary_or_damage(folder: Path, run: str) -> dict | None:
    """``load_summary`` for a query: damage raised as DamagedError naming the file."""
    try:
        return load_summary(folder)
    except (Broken, _files.NotAFile) as e:
        what = f"{folder / SUMMARY} {e}" if isinstance(e, Broken) else str(e)
        raise DamagedError(
            f"run {run!r}: {what}; run `somatize check` on the store and record into a new run "
            f"(the facts are in {folder / LOG}, whose blocks carry their own checksums)"
        ) from None


def live_recorder(folder: Path):
    with LIVE_LOCK:
        return LIVE.get(os.path.realpath(folder))


def try_lock(folder: Path, fs=None, note: bytes = b""):
    """A handle holding the run's lock (``note``, who holds it, written in
    it), or None when another open file holds it (in another process, or
    another Recorder of this one). ``fs``: the store's backend (the local
    one of ``folder``'s store when None)."""
    if fs is None:
        fs = LocalBackend(folder.parent.parent)
    try:
        return fs.lock(("runs", folder.name, LOCK), note)
    except files.Refused as e:
        raise _files.NotAFile(f"{folder / LOCK} is not a regular file ({e})") from None
    except OSError as e:
        raise _files.NotAFile(f"{folder / LOCK} is not a regular file ({e.strerror})") from None


def holder_alive(folder: Path, at=None, fs=None) -> bool:
    """Whether a Recorder holds the run's lock, in this process or another.

    The probe opens the lock read-only (it needs no right to write, so a
    store one may only read still tells running from interrupted) and asks
    without taking the lock (the backend's ``held``). A lock that is not a
    regular file is nobody's: the run reads interrupted. ``at``: ``folder``
    held open by ``fs``, its backend."""
    if at is not None:
        return fs.held((LOCK,), at=at)
    fs, parts = _files.located(os.path.join(folder, LOCK))
    return fs.held(parts)


def log_short(folder, log_bytes, at=None, fs=None) -> str | None:
    """What is wrong with the run's log, said of facts.log, when it cannot hold
    the ``log_bytes`` its summary counts (cut or replaced after that summary
    was written, or not a regular file), else None. The one check of it: the
    listing marks such a run damaged, a query that needs the whole log raises
    ``DamagedError``. One lstat, so a listing stays one stat a run more than
    the summaries it reads. The log is written and synced before the summary
    that counts it, so a sound run never reads short, even while it runs.
    ``at``: ``folder`` held open by ``fs``, its backend."""
    try:
        if at is None:
            fs, parts = _files.located(os.path.join(folder, LOG))
        size = fs.size(parts if at is None else (LOG,), at=at) or 0
    except files.Refused as e:
        return f"is not a regular file ({e})"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if size < log_bytes:
        return (f"holds {size} bytes, fewer than the {log_bytes} its {SUMMARY} counts: it was cut "
                "or replaced after it was written")
    return None


def _parsed(folder: str, at, fs):
    """``(identity, summary)`` of the run in ``folder`` (``at``: it, held
    open by ``fs``; identity: its summary.json's ``version``, what changes
    whenever the file does): the summary parsed again only when its file is not the one
    parsed last (the summary handed out is a copy whose top-level keys the
    caller may set; nested dicts are shared and never changed). Raises as
    ``load_summary``; a summary that did not read raises ``Broken`` again,
    unread, while it is the same file."""
    ident = fs.version((SUMMARY,), at=at)
    got = _PARSED.get(folder)
    if ident is not None and got is not None and got[0] == ident:
        if isinstance(got[1], str):
            raise Broken(got[1])
        return ident, dict(got[1])
    try:
        summary = load_summary(folder, at, fs)
    except Broken as e:
        if ident is not None:
            _parsed_is(folder, ident, str(e))
        raise
    if summary is None or ident is None:
        return None, summary
    _parsed_is(folder, ident, summary)
    return ident, dict(summary)


def _parsed_is(folder, ident, summary) -> None:
    """What ``_parsed`` keeps of ``folder``: its summary, or why it did not read."""
    with _PARSED_LOCK:
        if len(_PARSED) >= _PARSED_LIMIT:
            _PARSED.clear()
        _PARSED[folder] = (ident, summary)


def summaries(store, names=None, identities=None) -> list[dict]:
    """One dict per run, with its state resolved; reads no facts. A live
    Recorder of this process answers from memory, pending facts included.
    A run whose folder or summary does not read is listed with state
    "damaged" and a "problem" saying why. ``names``: only those runs (names
    a caller found in ``_store.names.run_names``), so a page of a long listing reads only
    its own summaries. ``identities``: a list to which the identity of each
    listed run's summary.json is appended (``_row``'s: None for a run
    answered from memory, or damaged by what is not its summary), for a
    caller that keeps what it made of a run."""
    root, fs = store_root(store), backend_of(store)
    if names is None:
        runs_dir(root)  # a runs/ that is a link or a file is damage, said so
        names = run_names(fs, links_too=True)  # a run that is a link lists, as damaged
    where = os.path.join(root, "runs")
    with LIVE_LOCK:
        live = dict(LIVE)
    if live:  # keyed by real path; the run folders are real folders (checked below)
        real = os.path.realpath(where)
        live = {os.path.basename(k): r for k, r in live.items() if os.path.dirname(k) == real}
    try:  # each run's folder is opened in runs/, following no link: what is checked is what is read
        runs_fd = fs.open_folder(("runs",))
    except FileNotFoundError:
        return []  # no runs (any more)
    except (files.Refused, NotADirectoryError):
        runs_dir(root)  # raises, saying what runs/ is
        return []
    idents = identities if identities is not None else []
    out = []
    try:
        for name in names:
            row, ident = _row(name, os.path.join(where, name), runs_fd, live, fs)
            if row is not None:
                out.append(row)
                idents.append(ident)
        return out
    finally:
        fs.close(runs_fd)


def _row(name, folder, runs_fd, live, fs=None) -> tuple[dict | None, tuple | None]:
    """The listing's row of one run (None for a folder that is no run yet)
    and the identity of the summary.json the row is all of: read, or found
    not to read (None for a row that is not one file's: a live Recorder's,
    a run whose log is cut short of what its summary counts, one whose
    folder or summary.json is not there to read). ``runs_fd``: runs/ held
    open by ``fs``, the store's backend (a local one's, or a descriptor of
    it, when ``fs`` is None)."""
    if fs is None:
        fs = LocalBackend(os.path.dirname(os.path.dirname(folder)))
    if not isinstance(runs_fd, Handle):
        runs_fd = handle(runs_fd, os.path.dirname(folder))
    try:
        run_fd = fs.open_folder((name,), at=runs_fd)
    except FileNotFoundError:
        return None, None
    except files.Refused as e:  # a link, a file, a FIFO…
        return {"run": name, "state": "damaged", "problem": folder_problem(folder) or f"{folder} is {e}"}, None
    except OSError as e:  # one not ours to open
        return {"run": name, "state": "damaged", "problem": f"{folder} cannot be opened ({e.strerror})"}, None
    try:
        if ELSEWHERE and ELSEWHERE.get(folder):  # damaged in its bucket: the mirror said which key
            return {"run": name, "state": "damaged", "problem": ELSEWHERE[folder]}, None
        recorder = live.get(name)
        if recorder is not None and not recorder._closed:  # closed since the listing began: read from disk
            row = recorder._view().summary
            row["state"] = "running"
            return row, None
        try:
            ident, summary = _parsed(folder, run_fd, fs)
        except (Broken, _files.NotAFile) as e:
            why = f"{SUMMARY} {e}" if isinstance(e, Broken) else str(e)
            return {"run": name, "state": "damaged", "problem": why}, fs.version((SUMMARY,), at=run_fd)
        if summary is None:
            if os.path.lexists(os.path.join(folder, LOG)):
                return {"run": name, "state": "damaged", "problem": f"facts but no {SUMMARY}"}, None
            return None, None  # a folder being created, or not a run
        summary["run"] = name
        short = log_short(folder, summary.get("log_bytes") or 0, run_fd, fs)
        if short is not None:  # damaged, but what the summary says still lists (the log reads up to the cut)
            summary["state"] = "damaged"
            summary["problem"] = f"{LOG} {short}; run `somatize check` on the store"
            return summary, None  # what the log holds says so, not the summary alone
        if summary["state"] == "running" and not holder_alive(folder, run_fd, fs) and folder not in ELSEWHERE:
            summary["state"], summary["cause"] = "interrupted", LOST
        return summary, ident
    finally:
        fs.close(run_fd)
