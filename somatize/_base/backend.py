"""The one interface a store's bytes go through: what the Store and the
record read and write, and nothing more. ``LocalBackend`` keeps them in a
folder of the local file system (through ``files`` and ``locks``).

The rule kept here: a store's files are named by their parts below its
root (``("objects", "ab", "cd…")``, ``("runs", run, "facts.log")``), and the
Store and the record ask a backend for them, never a file system. A second
backend (an object store) is a second class with these methods, run through
the same conformance suite (tests/test_backend.py). What each promises:

- Reads (``read``, ``read_range``, ``size``, ``version``, ``held``): a file
  is read only where one is; a link, a FIFO, a device or a folder where a
  file belongs is ``files.Refused`` with ``where``, its path, never
  followed or waited on; nothing outside the root is reached. A read is
  bounded by the bytes present (and refused past its ``limit``): a size a
  file claims costs nothing. A missing file is ``FileNotFoundError``
  (``size`` and ``version``: None).
- ``list``, ``walk``: a folder's entries and what each is, a file's only
  where it is one (no link followed); ``walk``: every file below a folder.
- ``create``: create-if-absent. False when the file is there already, whole
  (of its size), and nothing is written: that answer is the deduplication
  of objects named by their content; True once the new file is in place.
- ``replace``: atomic (a reader sees the old bytes or the new, never a mix,
  whatever stops it) and durable once it returns.
- ``open_append``, ``append``, ``truncate``: a file appended to; a kill
  leaves a prefix of what was appended, and ``sync`` makes it durable.
- ``stage``, ``place``: a replace in two steps, so its bytes are synced in
  one round with others (a run's summary with the files of its commit) and
  only then put in place.
- ``lock``: a lock held by one writer at a time, let go when its handle is
  closed or its process ends; ``held`` asks without taking it.
- ``make``: folders made where missing, following no link; the ones whose
  entries changed, for ``sync(folders=)``: a file's name survives a power
  cut once its folder is synced.

A handle (a folder held open, a file appended to, a staged replacement, a
lock) is the backend's own, given back by ``close``; ``at=`` (a folder
held open) reads and opens below it, as a listing does once per run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from . import files, locks

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_STAGE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOCK = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_SYNC_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Handle(int):
    """What ``LocalBackend`` hands out: a descriptor (a folder held open, a
    file appended to, a staged replacement, a lock), usable as one, with
    ``where``, its path (worked out when asked, for a message: a listing
    opens a folder a run); a staged one also has ``tmp``, the file it is
    until it is placed."""

    @property
    def where(self) -> str:
        base, parts = self._of  # a path or a Handle, and the parts below it
        return os.path.join(base if base.__class__ is str else base.where, *parts)


def handle(fd, where) -> Handle:
    """``fd`` as a ``Handle`` named ``where``: a folder's descriptor opened
    elsewhere (without following a link), to read below it (``at=``)."""
    return _held(fd, where, ())


def _held(fd, base, parts) -> Handle:
    held = Handle(fd)
    held._of = (base, parts)
    return held


class LocalBackend:
    """A store's bytes in the folder ``root``. ``direct_io``: files of
    ``files.DIRECT_AT`` bytes or more are created around the page cache
    (``files.write_temp_direct``). Temp files go to ``root/tmp``."""

    def __init__(self, root, direct_io=False):
        self.root = os.fspath(root)
        self.direct_io = direct_io
        self._temps = None  # root/tmp as a Path, made on first use

    def __repr__(self):
        return f"LocalBackend({self.root!r})"

    def where(self, parts, at=None) -> str:
        """How ``parts`` (below ``at``, a folder held open, or the root) is
        named in a message: its path."""
        return os.path.join(self.root if at is None else at.where, *parts)

    # ---- reading -----------------------------------------------------------

    def read(self, parts, limit=None, head=None):
        """The whole file ``parts`` as a writable uint8 array the caller
        owns (mapped copy-on-write when large). ``limit``: a larger file is
        ``Refused``. ``head(fd, size)`` may look at a large file first, and
        raise (a mapped file's size is bounded only by what its bytes say)."""
        try:
            return files.read_regular(self.root, parts, limit, head)
        except files.Refused as e:
            raise self._named(e, parts) from None

    def read_range(self, parts, limit, start=0, at=None) -> bytes:
        """At most ``limit`` bytes of the file ``parts`` from ``start``: fewer
        where the file ends (and ``b""`` past it)."""
        fd, size = self._open(parts, at)
        try:
            return files.pread_all(fd, limit, start, size)
        finally:
            os.close(fd)

    def size(self, parts, at=None) -> int | None:
        """Bytes of the file ``parts``; None where there is none."""
        try:
            if at is not None and len(parts) == 1:
                return files.regular_size(parts[0], at)
            folder = self._folder(parts[:-1], at)
            try:
                return files.regular_size(parts[-1], folder)
            finally:
                os.close(folder)
        except FileNotFoundError:
            return None
        except files.Refused as e:
            raise self._named(e, parts, at) from None

    def version(self, parts, at=None) -> tuple | None:
        """What changes whenever the file ``parts`` is written or replaced
        (device, inode, size, times); None where no file is."""
        try:
            if at is not None and len(parts) == 1:
                st = os.stat(parts[0], dir_fd=at, follow_symlinks=False)
            else:
                st = os.stat(self.where(parts, at), follow_symlinks=False)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def list(self, parts=(), at=None) -> list[tuple[str, str]]:
        """``(name, kind)`` of each entry of the folder ``parts``: kind "file"
        (a regular file), "dir", or what else it is ("a link", "a FIFO"…)."""
        try:
            fd = self._folder(parts, at)
        except files.Refused as e:
            raise self._named(e, parts, at) from None
        try:
            return files.entries_in(fd)
        finally:
            os.close(fd)

    def walk(self, parts) -> list[tuple[str, ...]]:
        """The parts (below ``parts``) of every file under the folder
        ``parts``; what is no file or folder is skipped. Missing: none."""
        return files.walk_files(self.root, parts)

    def open_folder(self, parts, at=None) -> Handle:
        """The folder ``parts`` held open (until ``close``), to read and
        open below it (``at=``) with no part looked up again."""
        try:
            fd = files.open_below(at, parts[0]) if at is not None and len(parts) == 1 else self._folder(parts, at)
        except files.Refused as e:
            raise self._named(e, parts, at) from None
        return _held(fd, self.root if at is None else at, parts)

    def held(self, parts, at=None) -> bool:
        """Whether a writer holds the lock ``parts`` (``lock``), in this
        process or another; takes nothing. A lock that is no file is nobody's."""
        try:
            fd, _ = self._open(parts, at)
        except (OSError, files.Refused):
            return False
        try:
            return locks.held(fd)
        except OSError:
            return False
        finally:
            os.close(fd)

    # ---- writing -------------------------------------------------------------

    def make(self, parts) -> set[tuple[str, ...]]:
        """Make the folders ``parts`` that are missing, following no link;
        the folders (their parts; ``()``, the root) whose entries changed.
        ``Refused`` where one is a link, a FIFO…; ``files.FileInTheWay``
        where it is a file."""
        try:
            return files.ensure_dirs(self.root, parts)
        except files.Refused as e:
            raise self._named(e, parts) from None

    def create(self, parts, chunks, size, later=None) -> bool:
        """Put ``chunks`` (``size`` bytes in all) at ``parts`` unless a file
        of ``size`` bytes is there (False: already there, nothing written).
        True once the new file is in place, read-only and durable. A file
        of another size there (one cut short) is replaced. ``parts`` may be
        a function giving them once every chunk is written (a name known
        from the bytes, hashed while they are written); the chunks are then
        written first. ``later``: a set that the folders to sync are added
        to, for one ``sync(folders=later)`` after many creates. The temp
        file is written in ``tmp/``, which the caller made (``make``)."""
        if callable(parts):
            tmp = self._write_temp(chunks, size)
            try:
                parts = parts()
                made = self.make(parts[:-1])
            except BaseException:
                files.unlink(tmp)
                raise
            path = self.where(parts)
            if files.has_size(path, size):
                files.unlink(tmp)
                return False
        else:
            made = self.make(parts[:-1])
            path = self.where(parts)
            if files.has_size(path, size):
                return False
            tmp = self._write_temp(chunks, size)
        files.replace(tmp, path)
        folders = {tuple(parts[:-1]), *made}
        if later is None:
            for folder in folders:
                files.sync_dir(self.where(folder))
        else:
            later |= folders
        return True

    def _tmp(self) -> Path:
        if self._temps is None:
            self._temps = Path(self.root, "tmp")
        return self._temps

    def _write_temp(self, chunks, size):
        folder = self._tmp()
        if self.direct_io and size >= files.DIRECT_AT:
            tmp = files.write_temp_direct(folder, chunks, 0o444)
            if tmp is not None:
                return tmp
        return files.write_temp(folder, chunks, 0o444)

    def replace(self, parts, data) -> None:
        """Put ``data`` at ``parts`` atomically and durably, its folders made
        (``make``; the temp file goes to ``tmp/``, which the caller made).
        ``IsADirectoryError`` where a folder is there."""
        made = self.make(parts[:-1])
        files.write_file(self._tmp(), self.where(parts), data, sync_dirs={self.where(d) for d in made})

    def remove(self, parts, at=None) -> None:
        """Remove the file (or link) ``parts``; never a folder; none there: nothing."""
        try:
            if at is not None and len(parts) == 1:
                os.unlink(parts[0], dir_fd=at)
            else:
                os.unlink(self.where(parts, at))
        except FileNotFoundError:
            pass

    def sweep(self, cutoff) -> None:
        """Remove the temp files last changed before ``cutoff`` (seconds, the
        epoch), and the folders a delete left in ``tmp/``."""
        files.sweep(self.root, ("tmp",), cutoff)

    # ---- appending, staging, syncing -----------------------------------------

    def open_append(self, parts, at=None, make=True) -> tuple[Handle, bool]:
        """``(handle, made)``: the file ``parts`` opened to append, made where
        missing (``make=False``: ``FileNotFoundError``). A made file's name
        survives a power cut once its folder is synced (``sync(folders=)``,
        or its handle where the folder is held open)."""
        name = parts[-1]
        try:
            folder = at if at is not None and len(parts) == 1 else self._folder(parts[:-1], at)
        except files.Refused as e:
            raise self._named(e, parts, at) from None
        try:
            made = False
            if make:
                try:
                    fd = os.open(name, _APPEND | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=folder)
                    made = True
                except FileExistsError:  # there already (a run resumed): what it is, fstat says
                    pass
                except OSError as e:
                    raise self._no_file(e, name, folder, parts, at) from None
            if not made:
                try:
                    fd = os.open(name, _APPEND, dir_fd=folder)
                except FileNotFoundError:
                    raise
                except OSError as e:
                    raise self._no_file(e, name, folder, parts, at) from None
                mode = os.fstat(fd).st_mode
                if not stat.S_ISREG(mode):
                    os.close(fd)
                    raise self._named(files.Refused(files._kind(mode), "file"), parts, at)
        finally:
            if folder is not at:
                os.close(folder)
        return _held(fd, self.root if at is None else at, parts), made

    def append(self, handle, chunks) -> None:
        """Append every buffer of ``chunks`` to the file of ``handle``."""
        files.write_all(handle, chunks)

    def truncate(self, handle, size) -> bool:
        """Cut the file of ``handle`` back to ``size`` bytes where it is
        longer (whether it was), durable at the next ``sync``."""
        if os.fstat(handle).st_size <= size:
            return False
        os.ftruncate(handle, size)
        return True

    def stage(self, parts) -> Handle:
        """The first step of replacing ``parts``: an empty file beside it,
        named for this process, opened to ``append`` the new bytes; ``sync``
        it, then ``place`` it. What else is there under that name (a link, a
        FIFO) is removed first."""
        path = self.where(parts)
        folder, name = os.path.split(path)
        tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
        if os.path.lexists(tmp) and not os.path.isfile(tmp) or os.path.islink(tmp):
            files.remove_junk(tmp)  # our temp file's name: whatever else is there is left over
        staged = _held(os.open(tmp, _STAGE, 0o644), path, ())
        staged.tmp = tmp
        return staged

    def place(self, staged) -> None:
        """Put a staged file in place of the one it replaces, at once."""
        os.replace(staged.tmp, staged.where)

    def sync(self, handles=(), folders=(), together=True) -> None:
        """Make every one of ``handles`` and ``folders`` (parts) durable, in
        one round (``files.sync_all``: one syncfs, or an fsync each;
        ``together`` as there)."""
        opened = []
        try:
            for parts in folders:
                opened.append(os.open(self.where(parts), _SYNC_DIR))
            files.sync_all([*handles, *opened], together)
        finally:
            for fd in opened:
                os.close(fd)

    def lock(self, parts, note=b"") -> Handle | None:
        """Take the lock ``parts`` (a file, made where missing) for one
        writer: its handle, holding it until closed or the process ends;
        None while another holds it. ``note`` (who holds it) is written in
        it. Whoever forks while holding one closes the child's copy."""
        path = self.where(parts)
        try:
            fd = os.open(path, _LOCK, 0o644)
        except OSError as e:
            raise self._no_file(e, path, None, parts, None) from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise self._named(files.Refused(files._kind(mode), "file"), parts)
            if not locks.take(fd):
                os.close(fd)
                return None
            if note:
                os.ftruncate(fd, 0)
                os.write(fd, note)
        except BaseException:
            os.close(fd)
            raise
        return _held(fd, path, ())

    def close(self, handle) -> None:
        """Let a handle go (a lock: let go of it)."""
        os.close(handle)

    # ---- inside ------------------------------------------------------------------

    def _folder(self, parts, at):
        """A plain descriptor of the folder ``parts`` below ``at`` (or the
        root), no part below it followed."""
        if at is None:
            return files.open_dir(self.root, parts)
        return files.descend(os.dup(at), parts)

    def _open(self, parts, at):
        """``(fd, size)`` of the file ``parts``, read-only (``files.open_in``)."""
        try:
            if at is not None and len(parts) == 1:
                return files.open_in(at, parts[0])
            if at is None:
                return files.open_regular(self.root, parts)
            folder = self._folder(parts[:-1], at)
            try:
                return files.open_in(folder, parts[-1])
            finally:
                os.close(folder)
        except files.Refused as e:
            raise self._named(e, parts, at) from None

    def _named(self, refused, parts, at=None):
        """``refused`` with ``where`` set: the folder on the way it names, or ``parts``."""
        if refused.where is None:
            base = self.root if at is None else at.where
            refused.where = os.path.join(base, refused.part) if refused.part else self.where(parts, at)
        return refused

    def _no_file(self, error, name, folder, parts, at):
        """``Refused`` naming ``parts`` where what is there (``name`` in the
        folder ``folder``) is no regular file, which made opening it fail
        with ``error``; else ``error`` itself."""
        try:
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except OSError:
            return error
        if stat.S_ISREG(mode):
            return error
        return self._named(files.Refused(files._kind(mode), "file"), parts, at)
