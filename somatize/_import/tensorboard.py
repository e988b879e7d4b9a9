"""TensorBoard event files as runs of a store: ``somatize import tensorboard
LOGDIR STORE`` and ``somatize.import_tensorboard(logdir, store)``.

The rule kept here: an imported run reads as the run ``Recorder.log`` would
have written had the loop logged into it live, and the import writes a run
whole or not at all.

- **Runs.** Each folder under LOGDIR holding event files (a file whose name
  holds ``tfevents``, TensorBoard's own rule) is one run, as TensorBoard
  shows it, named from its path below LOGDIR (``run_name``: ``exp1/lr0.1``
  is the run ``exp1-lr0.1``; LOGDIR's own files, the run named as LOGDIR's
  folder). Its event files are read in name order (their names begin with
  the time they were made), each record in turn.
- **Scalars** (``simple_value`` summaries, and tensor summaries of the
  scalars plugin: one number) are the facts ``{"fact": tag, "value": v}``
  on their steps, as ``log()`` says them: each step one forward, in step
  order, a step numbered otherwise than its forward also saying ``step``. A
  tag that is not a fact's name ``log()`` takes (``_logged.refused_key``:
  the engine's and the Trainer's own names, ``step``, ``wall_s``, a space)
  is renamed (``fact_name``), the run's config saying from what. A tag
  written again at a step it has (a job restarted from a checkpoint) keeps
  the last value written. Other summaries (histograms, images, text...)
  are not imported, and counted.
- **Wall times.** A step says ``wall_s``, the event's own wall time (its
  first value's), on the steps a live ``log()`` says it (the first ten,
  every 20th, and at least once a second of the events' time), so
  ``progress(x="wall")`` draws the run over its real hours. The run's own
  ``started`` and ``updated`` are the import's: a Recorder sets them itself
  and takes no other; the events' first and last times are kept in its
  config (``tensorboard.started``, ``tensorboard.ended``).
- **Hparams** (the hparams plugin's session start info) are the run's config,
  beside ``tensorboard``: where the run came from (``folder``, its event
  ``files`` as ``[name, size]``, and what was not read).
- **Again.** An import is told apart by that ``tensorboard`` key: a folder whose
  run holds the same event files (names and sizes) is skipped, naming the
  run; one whose files changed since is skipped too, saying so (remove the
  run to import it again). A run by the same name from elsewhere is left
  alone, the folder imported as ``<name>-2``.
- **Whole or nothing.** The files are read before anything is written; the
  run is then written and closed ``finished``. A failure while writing
  removes what was written; a process killed meanwhile leaves the run
  interrupted, which the next import of the folder removes and writes
  again.
- **Hostile files.** Nothing below LOGDIR is followed: a link (to a folder
  or an event file) is named and not read, and so is an event file that is
  not a regular file (a FIFO is never opened). Each file is opened here
  (``O_NOFOLLOW | O_NONBLOCK``, then fstat) and read to its size as opened;
  TensorBoard's record reader (its pure-Python one, checking each record's
  crc32c) reads it through ``_Source``. A record cut short (a file still
  being written, or truncated) or one that does not verify ends that file's
  reading: the records before it are imported, and the run is ``partial``,
  its line naming the file, the byte offset and the bytes not read.

A run's points are held in memory while it is read (TensorBoard's own
loader holds them too).
"""

from __future__ import annotations

import math
import os
import re
import unicodedata
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .._base import files
from .._base.errors import MissingExtra, SomatizeError, SomatizeTypeError, SomatizeValueError
from .._store.names import RUN_NAME_LIMIT
from ..record import _runs
from ..record._logged import CLOCKS_EVERY, CLOCKS_FIRST, STEP, WALL, refused_key

SOURCE = "tensorboard"  # the config key that says where an imported run came from
EVENTS = "tfevents"  # an event file's name holds it (TensorBoard's own rule)
MAX_DEPTH = 32  # folders below LOGDIR walked; deeper ones are named, not read
CHUNK = 1 << 20  # bytes of an event file read at a time
HANDED = 1 << 18  # facts handed to the Recorder between its flushes
CANDIDATES = 1000  # names tried for one folder: <name>, <name>-2, ...
NAME_LIMIT = RUN_NAME_LIMIT - 10  # a run's name before its suffix and a digest of a long path
CLOCKS_AT_MOST_S = 1.0  # the events' seconds between two wall_s (_logged.CLOCKS_AT_MOST_NS)
HPARAMS_DEPTH = 8  # nesting of one hparam's value kept; deeper, its text
LOCK = _runs.LOCK
OUTCOMES = ("imported", "partial", "skipped", "failed", "not read")


@dataclass(frozen=True)
class Imported:
    """What became of one folder below LOGDIR (or of a path there not read).

    ``folder``: its path below LOGDIR (``"."``: LOGDIR itself); ``run``: the
    run it is in the store (None when none); ``outcome``: ``"imported"``,
    ``"partial"`` (imported; some bytes of an event file could not be read),
    ``"skipped"`` (imported before, or nothing to import), ``"failed"``
    (nothing of it written), or ``"not read"`` (a link, a FIFO, a folder
    too deep); ``steps`` and ``points`` imported; ``said``: the why and
    what else, in words. ``str()`` is its line of ``somatize import``."""

    folder: str
    run: str | None
    outcome: str
    steps: int = 0
    points: int = 0
    said: str = ""

    def __str__(self):
        where = self.folder if self.run is None else f"{self.folder} -> run {self.run}"
        counts = (f"{_count(self.steps, 'step')}, {_count(self.points, 'point')}"
                  if self.outcome in ("imported", "partial") else "")
        text = "; ".join(part for part in (counts, self.said) if part)
        return f"{self.outcome:<9} {where}" + (f": {text}" if text else "")


def import_tensorboard(logdir, store) -> list:
    """Bring the TensorBoard event files under ``logdir`` into ``store`` as
    runs, and say what became of each folder: a list of ``Imported``
    (``folder``, ``run``, ``outcome``, ``steps``, ``points``, ``said``;
    ``str()`` of one is its line of ``somatize import tensorboard``).

    Each folder under ``logdir`` holding event files (``*tfevents*``) becomes
    one run, finished, named from its path below ``logdir``: ``exp1/lr0.1``
    becomes ``exp1-lr0.1`` (what a run's name may not hold becomes ``_``;
    ``logdir``'s own files are the run named as its folder; a name taken by
    another run gets ``-2``). Its scalars (``add_scalar``,
    ``tf.summary.scalar``) are facts named by their tags, one forward a step
    in step order, as ``Recorder.log`` writes them (a tag that ``log`` refuses,
    like ``grad_norm``, is imported as ``tb_grad_norm``, the run's
    ``config.tensorboard.renamed`` saying so); ``wall_s`` is the events' own
    wall time, so ``progress(store, x="wall")`` draws the real hours; the
    hparams (``add_hparams``) are the run's config; ``config.tensorboard``
    says which folder and event files (names and sizes) it came from, and
    the events' first and last times (``started``, ``ended``; the run's
    own ``started`` and ``updated`` are the import's). Histograms, images
    and the like are not imported, and counted.

    Importing again skips each folder whose run holds the same event files,
    naming the run; one whose files changed since is skipped too (remove the
    run to import it again). Needs ``pip install "somatize[tensorboard]"``;
    never imports TensorFlow.

    Hostile files: no link below ``logdir`` is followed, and an event file
    that is not a regular file (a FIFO) is not opened: each is an
    ``Imported`` with outcome ``"not read"``. An event file cut short or
    damaged is imported up to its last whole record, and the run is
    ``"partial"``, naming the file and the byte offset where reading stopped;
    a run that failed while written is removed. A ``RuntimeWarning`` says
    each partial and failed one. Raises ``SomatizeValueError`` when
    ``logdir`` is no folder or holds no event file, and what ``Store(path)``
    raises for ``store``."""
    got = []
    for outcome in imports(logdir, store):
        got.append(outcome)
        if outcome.outcome in ("partial", "failed"):
            warnings.warn(f"import_tensorboard: {outcome}", RuntimeWarning, stacklevel=2)
    return got


def imports(logdir, store):
    """``import_tensorboard``, one ``Imported`` at a time, as each folder is
    done (the command prints each as it comes): the paths not read first,
    then each run folder in path order."""
    needs_tensorboard()
    root, root_fd = opened_logdir(logdir)
    try:
        found, passed = walk(root_fd)
        if not found:
            seen = "" if not passed else (
                f" ({len(passed)} not read: {passed[0].folder}: {passed[0].said}{', …' if len(passed) > 1 else ''})")
            raise SomatizeValueError(
                f"{str(root)!r} holds no TensorBoard event file (a file named *{EVENTS}*){seen}: "
                f"give the folder TensorBoard's --logdir was given"
            )
        store = _writable(store)  # made where missing: once there is something to import
        yield from passed
        for parts, events in found:
            yield one_folder(root, root_fd, parts, events, store)
    finally:
        os.close(root_fd)


def needs_tensorboard():
    """``MissingExtra`` naming ``somatize[tensorboard]`` where the package is missing."""
    from importlib.util import find_spec

    if find_spec("tensorboard") is None:
        raise MissingExtra("somatize.import_tensorboard (reading TensorBoard's event files)", "tensorboard",
                           "tensorboard")


def opened_logdir(logdir):
    """``(path, descriptor)`` of the folder ``logdir`` (the path as given is
    followed: it is the caller's; nothing below it is)."""
    if not isinstance(logdir, (str, os.PathLike)):
        raise SomatizeTypeError(f"logdir takes the path of a folder of TensorBoard event files (a str or a Path); "
                                f"got {type(logdir).__name__} {logdir!r:.60}")
    root = Path(os.fspath(logdir)).expanduser().absolute()
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SomatizeValueError(f"{str(root)!r}: no such folder; give the folder TensorBoard's --logdir "
                                 f"was given") from None
    except NotADirectoryError:
        raise SomatizeValueError(f"{str(root)!r} is not a folder; give the folder holding the event files "
                                 f"(TensorBoard's --logdir), not a file") from None
    except OSError as e:
        raise SomatizeValueError(f"{str(root)!r} cannot be read ({e.strerror}); give a folder you may "
                                 f"read") from None
    return root, fd


def _writable(store):
    from .._base.errors import StoreNotWritable
    from .._store.store import as_store

    store = as_store(store)
    if store.readonly:
        raise StoreNotWritable(f"importing writes runs into the store, and {store!r} was opened read-only: "
                               f"give Store({str(store.path)!r})")
    return store


# -- the walk ---------------------------------------------------------------


def walk(root_fd):
    """``(found, passed)``: each folder holding event files, as ``(parts
    below LOGDIR, [(name, size)])`` in path order, and an ``Imported`` "not
    read" for each link, non-regular event file or folder too deep. Folders
    are opened from LOGDIR down, following no link (``files.descend``)."""
    found, passed = [], []
    stack = [()]
    while stack:
        parts = stack.pop()
        where = _shown(parts)
        try:
            fd = files.descend(os.dup(root_fd), parts)
        except files.Refused as e:
            passed.append(Imported(where, None, "not read", said=f"{e.kind}, not followed"))
            continue
        except OSError as e:
            passed.append(Imported(where, None, "not read", said=f"cannot be read ({e.strerror})"))
            continue
        try:
            listed = files.entries_in(fd)
            events = []
            for name, kind in sorted(listed):
                path = _shown((*parts, name))
                if kind == "dir":
                    if len(parts) < MAX_DEPTH:
                        stack.append((*parts, name))
                    else:
                        passed.append(Imported(path, None, "not read",
                                               said=f"a folder more than {MAX_DEPTH} levels below LOGDIR"))
                elif EVENTS in name:
                    if kind == "file":
                        try:
                            events.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False).st_size))
                        except OSError:
                            continue  # gone since it was listed
                    else:
                        how = "not followed" if kind == "a link" else "not a regular file, not opened"
                        passed.append(Imported(path, None, "not read", said=f"{kind}, {how}"))
                elif kind == "a link" and _to_folder(fd, name):
                    passed.append(Imported(path, None, "not read", said="a link to a folder, not followed"))
        except OSError as e:
            passed.append(Imported(where, None, "not read", said=f"cannot be listed ({e.strerror})"))
            continue
        finally:
            os.close(fd)
        if events:
            found.append((parts, events))
    found.sort()
    passed.sort(key=lambda p: p.folder)
    return found, passed


def _to_folder(fd, name) -> bool:
    import stat

    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=fd).st_mode)
    except OSError:
        return False


def _shown(parts) -> str:
    return "/".join(map(text_of, parts)) if parts else "."


def text_of(name) -> str:
    """A name from the file system as text to show and keep: bytes that are
    not UTF-8 (``os.listdir``'s surrogates) and control characters written
    as ``\\xNN``, so a name can neither break a line of the report nor a
    run's config (JSON holds no surrogate)."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", text)


# -- names ------------------------------------------------------------------


def run_name(parts, logdir_name) -> str:
    """The run a folder below LOGDIR becomes: its path's parts joined by
    ``-`` (LOGDIR's own name for LOGDIR), accents dropped, what a run's name
    may not hold (``_store.names.RUN_NAME``) as ``_``, no dot first; a path
    too long cut, with a digest of it to keep two apart."""
    text = "-".join(parts) if parts else logdir_name
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", _ascii(text)).lstrip(".") or "run"
    if len(name) > NAME_LIMIT:
        import xxhash

        name = f"{name[: NAME_LIMIT - 9]}-{xxhash.xxh32_hexdigest(text.encode('utf-8', 'surrogateescape'))}"
    return name


def _ascii(text) -> str:
    """``text`` with its accents dropped (``café``: ``cafe``) and every other
    character that is not ASCII as ``_``."""
    return "".join(c if c.isascii() else "_" for c in unicodedata.normalize("NFKD", text)
                   if not unicodedata.combining(c))


def candidates(name):
    """The names a folder may be imported as, in order: ``name``, ``name-2``, ..."""
    yield name
    for n in range(2, CANDIDATES + 1):
        yield f"{name}-{n}"


def fact_name(tag, taken) -> str:
    """The fact a tag becomes: the tag, where ``log()`` takes it as a key
    (``train/loss`` stays); else its characters that a fact's name may not
    hold as ``_``, and ``tb_`` before a name the engine, the Trainer or the
    summary owns (``grad_norm`` -> ``tb_grad_norm``, ``step`` -> ``tb_step``);
    ``-2``... after one ``taken`` already."""
    name = tag
    if refused_key(name) is not None:
        name = re.sub(r"[^A-Za-z0-9_.\-/]+", "_", _ascii(tag))[:120] or "value"
        if not re.match(r"[A-Za-z_]", name):
            name = "_" + name
        if refused_key(name) is not None:
            name = "tb_" + name
    base, n = name, 1
    while name in taken or refused_key(name) is not None:
        n += 1
        name = f"{base[:120]}-{n}"
        if n > CANDIDATES:
            name = f"tb_value_{len(taken)}"
            break
    return name


# -- one folder -------------------------------------------------------------


def one_folder(root, root_fd, parts, events, store) -> Imported:
    """Import one folder's event files, unless it is in the store already."""
    folder = _shown(parts)
    identity = [[text_of(name), size] for name, size in events]
    try:
        run, before = _place(store, run_name(parts, root.name), folder, identity)
    except (SomatizeError, OSError, files.Refused) as e:
        return Imported(folder, None, "failed", said=str(e))
    if before is not None:
        return Imported(folder, run, "skipped", said=before)
    try:
        read = read_folder(root_fd, parts, events)
    except SomatizeError as e:
        return Imported(folder, run, "failed", said=f"{e}; nothing of it written")
    if not read.points and read.hparams is None:
        if read.unread:
            return Imported(folder, run, "failed", said=f"{_unread_text(read.unread)}; nothing of it written")
        return Imported(folder, None, "skipped", said="no scalars or hparams in it" + read.notes(", "))
    return write_run(store, run, folder, read)


def _place(store, name, folder, identity):
    """``(run, why skipped)``: the run this folder is imported as, and None;
    or the run it was imported as before, and why it is skipped. A run of
    another folder (or not imported) by the same name is passed over; an
    import of this folder that did not finish (a process killed while it
    wrote) is removed, and its name taken again."""
    root = Path(store.path)
    names = {n for n, _ in identity}
    for run in candidates(name):
        where = _runs.run_folder(root, run)
        if not os.path.lexists(where):
            return run, None
        if _runs.folder_problem(where) is not None:
            continue
        if not _runs.recorded(where):
            if _runs.holder_alive(where, fs=None):
                continue  # a run being made there now
            return run, None
        try:
            summary = _runs.load_summary(where)
        except Exception:  # damaged: not ours to judge
            continue
        source = ((summary or {}).get("config") or {}).get(SOURCE)
        if not isinstance(source, dict) or source.get("folder") != folder:
            continue
        was = source.get("files")
        was_names = {f[0] for f in was if isinstance(f, list) and f} if isinstance(was, list) else set()
        if not was_names & names:
            continue  # the same path in another logdir
        if _runs.holder_alive(where):
            return run, f"run {run} is being imported from it now, by another process"
        if summary.get("state") != "finished":
            remove_run(store, run)
            return run, None
        if was == identity:
            partial = " (partial: " + _unread_text(source.get("unread")) + ")" if source.get("unread") else ""
            return run, f"imported before, from the same {_count(len(identity), 'event file')}{partial}"
        return run, (f"imported before from other event files ({_files_text(was)}; now {_files_text(identity)}): "
                     f"remove run {run} from the store to import it again")
    raise SomatizeValueError(f"no free run name for {folder!r}: {name} to {name}-{CANDIDATES} are all taken")


def _files_text(listed) -> str:
    if not isinstance(listed, list):
        return "none"
    sizes = [f[1] for f in listed if isinstance(f, list) and len(f) == 2 and isinstance(f[1], int)]
    return f"{_count(len(listed), 'file')}, {sum(sizes):,} bytes"


def _unread_text(unread) -> str:
    try:
        return "; ".join(f"{name} from byte {offset:,}: {why}" for name, offset, why in unread)
    except (TypeError, ValueError):
        return "some bytes not read"


def remove_run(store, run):
    """Remove an import that did not finish: its lock taken (refused while
    a Recorder holds it), its summary first, then every file of it, through
    the store's backend (no link followed). The empty folder left lists as
    no run, and a Recorder writes into it again."""
    fs = store.backend
    lock = fs.lock(("runs", run, LOCK))
    if lock is None:
        raise SomatizeValueError(f"run {run!r} is being written by another process: it was left as it is")
    try:
        rest = sorted(p for p in fs.walk(("runs", run)) if p != (LOCK,))
        for parts in [(_runs.SUMMARY,), (_runs.LOG,), *(p for p in rest if p not in ((_runs.SUMMARY,), (_runs.LOG,)))]:
            fs.remove(("runs", run, *parts))
    finally:
        fs.close(lock)


# -- reading ----------------------------------------------------------------


@dataclass
class Read:
    """What one folder's event files hold: ``points`` (tag -> {step: (wall,
    value)}, tags in the order first seen), ``hparams``, each file's
    ``[name, size]`` as read, ``unread`` (``[name, offset, why]``) and
    counts of what was not imported."""

    points: dict = field(default_factory=dict)
    hparams: dict | None = None
    files: list = field(default_factory=list)
    unread: list = field(default_factory=list)
    passed: dict = field(default_factory=dict)  # what was not imported -> how many
    again: int = 0  # points written again at a step their tag had

    def pass_over(self, what, n=1):
        self.passed[what] = self.passed.get(what, 0) + n

    def notes(self, lead="; ") -> str:
        said = []
        if self.again:
            said.append(f"{_count(self.again, 'point')} written again at a step already written: the last kept")
        if self.passed:
            said.append("not imported: " + ", ".join(f"{what} ({n:,})" for what, n in sorted(self.passed.items())))
        return lead + "; ".join(said) if said else ""


def read_folder(root_fd, parts, events) -> Read:
    """Read a folder's event files, in name order, each from a descriptor
    opened here (``files.open_file``: no link followed, no FIFO waited on)."""
    read = Read()
    try:
        folder_fd = files.descend(os.dup(root_fd), parts)
    except (OSError, files.Refused) as e:
        raise SomatizeValueError(f"its folder cannot be opened now ({e})") from None
    metadata: dict = {}  # tag -> its first metadata (TensorBoard's rule: a tag's plugin is said once)
    try:
        for name, _ in events:
            shown = text_of(name)
            try:
                fd, size = files.open_file(name, folder_fd)
            except files.Refused as e:
                read.unread.append([shown, 0, f"{e.kind} now, not a regular file: not opened"])
                continue
            except FileNotFoundError:
                continue  # gone since the walk
            except OSError as e:
                read.unread.append([shown, 0, f"cannot be opened ({e.strerror})"])
                continue
            source = _Source(fd, size)
            try:
                read.files.append([shown, size])
                _read_file(source, shown, read, metadata)
            finally:
                source.close()
    finally:
        os.close(folder_fd)
    return read


class _Source:
    """An event file opened here, as TensorBoard's record reader reads it
    (``read(n)``): at most the bytes it had when opened, from a buffer of
    ``CHUNK`` bytes; ``offset`` is where the next read begins."""

    __slots__ = ("fd", "size", "buf", "pos", "base")

    def __init__(self, fd, size):
        self.fd, self.size = fd, size
        self.buf, self.pos, self.base = b"", 0, 0  # buf holds the file's bytes from base

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def read(self, n) -> bytes:
        end = self.pos + n
        if end <= len(self.buf):
            out = self.buf[self.pos:end]
            self.pos = end
            return out
        rest = self.buf[self.pos:]
        self.base += self.pos
        at = self.base + len(rest)
        want = min(max(n - len(rest), CHUNK), self.size - at)
        self.buf = rest + (files.pread_all(self.fd, want, at) if want > 0 else b"")
        out = self.buf[:n]
        self.pos = len(out)
        return out

    def close(self):
        os.close(self.fd)


def _read_file(source, name, read, metadata):
    """Each record of one event file, read by TensorBoard's own record reader
    (``tensorflow_stub.pywrap_tensorflow.PyRecordReader_New``, the one its
    loaders use without TensorFlow: length, crc32c of it, data, crc32c of
    that) from ``source``; its events' scalars and hparams into ``read``.
    Where a record does not read whole, reading stops and ``read.unread``
    says the offset."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
    from tensorboard.plugins.hparams import metadata as hparams

    # Made with a path that is there (it asks; its GFile opens nothing until read), then given our
    # descriptor to read: it opens nothing itself, so no link is followed and no FIFO waited on.
    reader = pywrap_tensorflow.PyRecordReader_New("/")
    reader.file_handle = source
    parse = event_pb2.Event.FromString
    good = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        except errors.DataLossError as e:
            cut = "truncated" in str(e)
            why = ("ends inside a record (cut short: still being written, or truncated)" if cut
                   else "a record that does not verify (its crc32c)")
            read.unread.append([name, good, f"{why}; {source.size - good:,} bytes from there not read"])
            return
        except Exception as e:  # noqa: BLE001 - anything the reader meets in a hostile file
            read.unread.append([name, good, f"a record that does not read ({type(e).__name__}); "
                                            f"{source.size - good:,} bytes from there not read"])
            return
        good = source.offset
        try:
            event = parse(reader.record())
        except Exception:  # noqa: BLE001 - a record whose crc holds but whose bytes are no event
            read.pass_over("records not an event")
            continue
        if event.WhichOneof("what") == "summary":
            _summary(event, read, metadata, hparams)


def _summary(event, read, metadata, hparams):
    """One event's summary values: scalars kept by tag and step, hparams (the
    plugin's module ``hparams`` reads them) as the config, the rest counted."""
    step, wall = event.step, event.wall_time
    for value in event.summary.value:
        tag = value.tag
        if value.HasField("metadata"):
            meta = metadata.setdefault(tag, value.metadata)
        else:
            meta = metadata.get(tag)
        kind = value.WhichOneof("value")
        plugin = meta.plugin_data.plugin_name if meta is not None else ""
        if kind == "simple_value":
            number = value.simple_value
        elif kind == "tensor" and plugin == "scalars":
            number = _scalar(value.tensor)
            if number is None:
                read.pass_over("scalars that are not one number")
                continue
        elif plugin == hparams.PLUGIN_NAME:  # its metadata alone says it (torch writes no tensor)
            if tag == hparams.SESSION_START_INFO_TAG:
                try:
                    info = hparams.parse_session_start_info_plugin_data(meta.plugin_data.content)
                except Exception:  # noqa: BLE001 - hparams that do not parse: counted
                    read.pass_over("hparams that do not read")
                    continue
                read.hparams = {key: _plain(info.hparams[key]) for key in sorted(info.hparams)}
            continue
        else:
            read.pass_over(_kind_name(kind, plugin))
            continue
        if step < 0:
            read.pass_over("scalars at a negative step")
            continue
        points = read.points.get(tag)
        if points is None:
            points = read.points[tag] = {}
        if step in points:
            read.again += 1
        points[step] = (wall, float(number))


def _kind_name(kind, plugin) -> str:
    if kind == "tensor":
        return {"histograms": "histograms", "images": "images", "audio": "audio", "text": "text",
                "pr_curves": "PR curves", "graph_run_metadata": "graphs", "mesh": "meshes"}.get(
            plugin, f"{plugin or 'plain'} tensors")
    return {"histo": "histograms", "image": "images", "audio": "audio",
            "obsolete_old_style_histogram": "histograms"}.get(kind, f"{kind or 'empty'} values")


def _scalar(tensor):
    """A scalars-plugin tensor's one number (TensorBoard's ``make_ndarray``),
    or None: a shape of more than one element is refused before anything is
    made of it (a shape can claim any size)."""
    dims = tensor.tensor_shape.dim
    if len(dims) > 8 or any(d.size != 1 for d in dims):
        return None
    from tensorboard.util import tensor_util

    try:
        array = tensor_util.make_ndarray(tensor)
    except Exception:  # noqa: BLE001 - a dtype or a content it cannot read
        return None
    if array.size != 1 or array.dtype.kind not in "fiub":
        return None
    return float(array.reshape(()).item())


def _plain(value, depth=0):
    """An hparam (a ``google.protobuf.Value``) as a config value: a number
    (a non-finite one as its text: JSON has none), a str, a bool, None, a
    list or dict of these."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        x = value.number_value
        return x if math.isfinite(x) else str(x)
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if depth >= HPARAMS_DEPTH and kind in ("list_value", "struct_value"):
        return str(value)
    if kind == "list_value":
        return [_plain(v, depth + 1) for v in value.list_value.values]
    if kind == "struct_value":
        return {k: _plain(value.struct_value.fields[k], depth + 1) for k in sorted(value.struct_value.fields)}
    return None


# -- writing ----------------------------------------------------------------


def write_run(store, run, folder, read) -> Imported:
    """Write what was read as the run ``run``, closed ``finished``; removed
    again when writing fails (or is interrupted: then re-raised)."""
    from ..record._recorder import Recorder

    names, renamed = {}, {}
    for tag in read.points:
        names[tag] = fact_name(tag, set(names.values()))
        if names[tag] != tag:
            renamed[names[tag]] = tag
    by_step: dict = {}
    points = 0
    first, last = math.inf, -math.inf
    for tag, at in read.points.items():
        name = names[tag]
        points += len(at)
        for step, (wall, value) in at.items():
            if wall < first:
                first = wall
            if wall > last:
                last = wall
            got = by_step.get(step)
            if got is None:
                by_step[step] = [wall, [(name, value)]]
            else:
                if wall < got[0]:
                    got[0] = wall
                got[1].append((name, value))
    source = {"folder": folder, "files": read.files}
    if math.isfinite(first) and math.isfinite(last):
        source["started"], source["ended"] = first, last
    if read.unread:
        source["unread"] = read.unread
    if renamed:
        source["renamed"] = renamed
    config = dict(read.hparams or {})
    said = []
    if SOURCE in config:
        config[SOURCE + "_hparam"] = config.pop(SOURCE)
        said.append(f"its hparam {SOURCE!r} kept as {SOURCE + '_hparam'!r}")
    config[SOURCE] = source
    recorder = None
    try:
        recorder = Recorder(store, run=run, summarising=list(names.values()), config=config)
        _hand_over(recorder, by_step)
        recorder.close()
    except BaseException as e:
        if recorder is not None:
            try:
                recorder.close("interrupted")
            except Exception:  # noqa: BLE001 - it failed already: removed below
                pass
            try:
                remove_run(store, run)
                gone = "nothing of it kept"
            except Exception as removing:  # noqa: BLE001
                gone = f"left interrupted ({removing}); the next import removes it"
        else:
            gone = "nothing of it written"
        if not isinstance(e, Exception):
            raise
        return Imported(folder, run, "failed", said=f"{e}; {gone}")
    if renamed:
        said.append("renamed: " + ", ".join(f"{tag!r} as {name!r}" for name, tag in list(renamed.items())[:5])
                    + (" …" if len(renamed) > 5 else ""))
    if read.hparams:
        said.append(f"config: {_count(len(read.hparams), 'hparam')}")
    if read.unread:
        said.append(_unread_text(read.unread))
    text = "; ".join(said) + read.notes("; " if said else "")
    return Imported(folder, run, "partial" if read.unread else "imported", len(by_step), points, text)


def _hand_over(recorder, by_step):
    """The steps in order, as ``Recorder.log`` hands a loop's over: a
    forward begun (``None``), ``step`` where it is not the forward, the
    values, then ``wall_s`` where a live ``log()`` says it (``CLOCKS_*``),
    the events' own time; flushed every ``HANDED`` facts."""
    items: list = []
    said_at = -math.inf
    for forward, step in enumerate(sorted(by_step)):
        wall, values = by_step[step]
        items.append(None)
        if step != forward:
            items.append({"fact": STEP, "value": step})
        for name, value in values:
            items.append({"fact": name, "value": value})
        if forward < CLOCKS_FIRST or forward % CLOCKS_EVERY == 0 or not wall < said_at + CLOCKS_AT_MOST_S:
            items.append({"fact": WALL, "value": wall})
            said_at = wall
        if len(items) >= HANDED:
            recorder.take(items)
            recorder.flush()
            items = []
    if items:
        recorder.take(items)


def _count(n, noun) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")

