"""Files written whole or not at all, and read back without a needless copy
and without following a link out of the store (see "reading and walking").

The rule kept here: a file is written to a temp file, flushed to disk, then
renamed into place, and the folder that holds it is flushed before anything
points at it. A crash at any moment leaves the old file or the new one, never
a mix; at worst a temp file is left behind. The Store and the record both
write through these helpers. Nothing here knows what the bytes mean.

numpy is imported where it is used, not here: ``somatize runs`` reads run
summaries through this module and starts without it.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import secrets
import shutil
import stat
import sys
import threading
from pathlib import Path

MAP_AT = 1 << 20  # bytes; files this large are mapped, not read
DELETED = "deleted-"  # tmp/deleted-…: a folder renamed there to be removed (a deleted run)


def write_all(fd, parts):
    """Write every buffer of ``parts`` to ``fd`` (one write() may stop short)."""
    for part in parts:
        view = memoryview(part)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        while view.nbytes:
            n = os.write(fd, view)
            view = view[n:]


SYNC_TOGETHER_AT = 4  # files; this many or more are fsynced together (sync_all)
SYNC_THREADS = 8  # at most this many fsyncs at once (sync_all)
_syncers = None  # threads that fsync together, made on first use, forgotten in a forked child
SYNCFS_AT = 4  # files; this many or more are synced by one syncfs(2) per file system where it is cheap
SYNCFS_DIRTY_AT = 4 << 20  # bytes the kernel holds unwritten (Dirty + Writeback); above it, fsync each
_syncfs = False  # libc's syncfs where it reports every failure (Linux >= 5.17), None where not; False: not looked up


def sync_all(fds, together=True):
    """Make every one of ``fds`` durable and return once all are on disk.

    ``SYNCFS_AT`` files or more, on Linux >= 5.17, on local file systems
    (``_SYNCFS_KINDS``: ext4, xfs, btrfs), while the kernel holds little
    unwritten (``SYNCFS_DIRTY_AT``, read from /proc/meminfo): one
    ``syncfs(2)`` per file system they are on. It writes back every
    dirty page of that file system and commits its journal once, where an
    fsync each commits it once per file, and the background flush makes one
    system call instead of one per file, so it takes the GIL back from the
    training loop once. With much unwritten on the machine (another process writing
    gigabytes), syncing the whole file system could wait on their bytes:
    then, or where syncfs is missing or fails (a write-back error elsewhere
    on the file system: the files' own fsyncs say whose), each is fsynced.

    Else each is fsynced (the first failure raised once all have
    finished). ``together``: several are fsynced at once, from a few threads (fsync lets go of the GIL):
    concurrent fsyncs share the file system's journal commits, which matters
    most on a busy disk. Only for a caller that waits (a close, a flush asked
    for): the background flush, which nobody waits for, fsyncs one after the
    other on its own thread and wakes no thread to take the GIL back from
    the training loop beside it."""
    if len(fds) >= SYNCFS_AT and _synced_by_file_system(fds):
        return
    if not together or len(fds) < SYNC_TOGETHER_AT:
        for fd in fds:
            os.fsync(fd)
        return
    global _syncers
    if _syncers is None:
        from concurrent.futures import ThreadPoolExecutor

        _syncers = ThreadPoolExecutor(max_workers=SYNC_THREADS, thread_name_prefix="somatize-fsync")
    # One work item per thread, not per file: each takes the next fd left
    # until none is (next() on one iterator, atomic under the GIL), so a slow
    # fsync holds up one thread, not the files queued behind it; fewer
    # submits and wake-ups than one per fd (close's path, bench_fixed_cost.py).
    left = enumerate(fds)
    failed: dict = {}  # fd's place in fds -> its failure

    def fsync_the_rest():
        for i, fd in left:
            try:
                os.fsync(fd)
            except BaseException as e:  # the others go on; the first in fds' order is raised
                failed[i] = e

    done = []
    for _ in range(min(SYNC_THREADS, len(fds))):
        try:
            done.append(_syncers.submit(fsync_the_rest))
        except RuntimeError:  # the interpreter is exiting (its threads refuse work): the rest here
            fsync_the_rest()
            break
    for f in done:
        f.result()  # waits: every fsync has finished before one failure is raised (the caller closes the fds)
    if failed:
        raise failed[min(failed)]


def _synced_by_file_system(fds) -> bool:
    """``syncfs`` once for each file system ``fds`` are on (``sync_all``);
    False (nothing promised) where it is not cheap or not there, or failed."""
    global _syncfs
    if _syncfs is False:
        _syncfs = _find_syncfs()
    if _syncfs is None or unwritten_bytes() > SYNCFS_DIRTY_AT:
        return False
    one_each = {}
    for fd in fds:
        one_each.setdefault(os.fstat(fd).st_dev, fd)
    if not all(_covered(dev, fd) for dev, fd in one_each.items()):
        return False
    for fd in one_each.values():
        if _syncfs(fd) != 0:
            return False
    return True


# File systems whose syncfs writes back and commits what each file's fsync would
# (their sync_fs commits the journal or log and reports its failure): local ones.
# A FUSE mount (gcsfuse, s3fs, sshfs...), CIFS or NFS may answer syncfs without
# the server having kept anything: there, and on any other, each file is fsynced.
_SYNCFS_KINDS = {0xEF53: "ext2/3/4", 0x58465342: "xfs", 0x9123683E: "btrfs"}
_kind_of: dict = {}  # st_dev -> whether its file system is one of _SYNCFS_KINDS


def _covered(dev, fd) -> bool:
    """Whether syncfs makes the file system of ``fd`` (device ``dev``) durable (``_SYNCFS_KINDS``)."""
    got = _kind_of.get(dev)
    if got is None:
        got = _kind_of[dev] = _file_system_kind(fd) in _SYNCFS_KINDS
    return got


def _file_system_kind(fd):
    """``f_type`` of fstatfs(2) (the file system's magic number), or None."""
    import ctypes

    buf = ctypes.create_string_buffer(256)  # struct statfs: 120 bytes on 64-bit Linux; f_type comes first
    if _libc().fstatfs(fd, buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def _libc():
    import ctypes  # here: only a writer of many files pays its import

    return ctypes.CDLL(None, use_errno=True)  # a CDLL call lets go of the GIL


def _find_syncfs():
    """libc's ``syncfs``, where it reports every failure (Linux 5.17 on:
    write-back errors from 5.8, the file system's own journal commit from
    5.17; before, it could return 0 whatever happened), else None."""
    if not sys.platform.startswith("linux"):
        return None
    version = re.match(r"(\d+)\.(\d+)", os.uname().release)
    if version is None or (int(version[1]), int(version[2])) < (5, 17):
        return None
    try:
        import ctypes

        syncfs = _libc().syncfs
    except (OSError, AttributeError):
        return None
    syncfs.argtypes, syncfs.restype = [ctypes.c_int], ctypes.c_int
    return syncfs


def unwritten_bytes() -> int:
    """Bytes the kernel holds that are not on disk yet (Dirty + Writeback of
    /proc/meminfo); past ``SYNCFS_DIRTY_AT`` when it cannot be read."""
    try:
        fd = os.open("/proc/meminfo", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            text = os.read(fd, 16384)
        finally:
            os.close(fd)
        total = 0
        for key in (b"\nDirty:", b"\nWriteback:"):
            at = text.index(key) + len(key)
            kb = int(text[at:text.index(b"kB", at)])
            if kb < 0:
                raise ValueError(kb)
            total += kb * 1024
        return total
    except (OSError, ValueError):
        return SYNCFS_DIRTY_AT + 1


def _forget_syncers():  # a forked child has none of its parent's threads
    global _syncers
    _syncers = None


os.register_at_fork(after_in_child=_forget_syncers)


def new_temp(folder, mode=0o644):
    """``(path, fd)`` of a fresh, exclusive temp file in ``folder``."""
    path = folder / f"{os.getpid()}-{secrets.token_hex(8)}"
    return path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)


DIRECT_AT = 8 << 20  # bytes; objects this large bypass the page cache
_STAGE = 4 << 20  # bytes staged at a time, the size measured best (bench/RESULTS.md, the store)
_BLOCK = 4096
_stage = threading.local()


def write_temp_direct(folder, parts, mode=0o644):
    """Like ``write_temp`` for a large object, but around the page cache.

    Where handing the kernel *new* page-cache pages is dear (the VMs this
    runs on: see ``writer``), a plain write of a big new file is slow; with
    O_DIRECT the bytes go from a small, reused (so already mapped) staging
    buffer straight to the disk. ``parts`` may be a generator: the last part (an object's
    checksum) can be computed while the first ones are written. Returns None
    where the file system refuses O_DIRECT (tmpfs); the caller falls back.
    """
    if not hasattr(os, "O_DIRECT"):
        return None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT
    path = folder / f"{os.getpid()}-{secrets.token_hex(8)}"
    try:
        fd = os.open(path, flags, mode)
    except OSError:
        return None
    # fsync: the size set by ftruncate, and the file's own metadata
    return _filled(path, fd, lambda: _write_direct(fd, parts))


def _filled(path, fd, write):
    """Run ``write`` into the fresh file ``fd`` at ``path`` and make it durable;
    ``path``. A failure closes and removes the file before it is raised."""
    try:
        write()
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        unlink(path)
        raise
    os.close(fd)
    return path


def _write_direct(fd, parts):
    import numpy as np

    stage = getattr(_stage, "buffer", None)
    if stage is None:  # one per thread: the Store writes leaves from a pool
        stage = _stage.buffer = memoryview(mmap.mmap(-1, _STAGE))
    # numpy copies without holding the GIL (a memoryview slice assignment
    # holds it), so the thread hashing the same object is never kept waiting
    into = np.frombuffer(stage, np.uint8)
    filled = offset = 0
    for part in parts:
        view = memoryview(part)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        source = np.frombuffer(view, np.uint8) if view.nbytes else None
        at = 0
        while at < view.nbytes:
            n = min(view.nbytes - at, _STAGE - filled)
            into[filled : filled + n] = source[at : at + n]
            filled, at = filled + n, at + n
            if filled == _STAGE:
                _pwrite_all(fd, stage, offset)
                offset, filled = offset + filled, 0
    if filled:  # O_DIRECT writes whole blocks: pad, then cut the file back
        padded = -(-filled // _BLOCK) * _BLOCK
        stage[filled:padded] = bytes(padded - filled)
        _pwrite_all(fd, stage[:padded], offset)
        os.ftruncate(fd, offset + filled)


def _pwrite_all(fd, view, offset):
    while view.nbytes:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def write_temp(folder, parts, mode=0o644):
    """A temp file in ``folder`` holding ``parts``, on disk; its path."""
    tmp, fd = new_temp(folder, mode)
    return _filled(tmp, fd, lambda: write_all(fd, parts))


def replace(tmp, path):
    """Rename ``tmp`` onto ``path``; the temp file never outlives a failure."""
    try:
        os.replace(tmp, path)
    except BaseException:
        unlink(tmp)
        raise


def write_file(tmp_folder, path, data, sync_dirs=()):
    """Put ``data`` at ``path`` atomically and durably (folders flushed)."""
    replace(write_temp(tmp_folder, [data]), path)
    for d in {os.path.dirname(path), *sync_dirs}:
        sync_dir(d)


def sync_dir(folder):
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_junk(path):
    """Remove what lies at ``path`` (a stale temp file, a symlink, a FIFO), not a folder."""
    try:
        os.unlink(path)
    except OSError:
        pass  # a folder, or gone: the open that follows says what is wrong


def has_size(path, size):
    """A regular file is there with ``size`` bytes (one of another size, or a
    link, is not: it gets replaced)."""
    try:
        return regular_size(path) == size
    except (Refused, NotADirectoryError):
        return False


# ---- reading and walking inside a store, following no link --------------------
#
# Anything under a store's root may have been put there by someone else. So
# below the root nothing is followed: every folder is opened relative to the
# one above it with O_NOFOLLOW, every file is lstat'ed and opened with
# O_NOFOLLOW | O_NONBLOCK (a FIFO opens at once instead of waiting for a
# writer), and only a regular file of a size the caller allows is read. The
# root itself may be a link: the caller chose that path.

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Refused(Exception):
    """A path under a store that is not what the store puts there (a link, a
    FIFO, a device, a folder where a file belongs, a file too large); the
    message says what it is, ``where`` (set by the backend) which path it is.
    The caller names the path and the fix."""

    def __init__(self, kind, belongs=None, part=None):
        self.kind = kind  # "a link", "a FIFO", "a file", "a folder", …
        self.part = part  # the folder on the way that is not one (open_dir, ensure_dirs), or None
        self.where = None  # the path refused, once the backend knows it
        super().__init__(kind if belongs is None else f"{kind}, where a {belongs} belongs")


class FileInTheWay(Refused):
    """A regular file where a folder belongs; ``filename`` is where."""

    def __init__(self, filename):
        super().__init__("a file", "folder")
        self.filename = filename


def _kind(mode):
    for test, what in ((stat.S_ISREG, "a file"), (stat.S_ISLNK, "a link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return what
    return "not a regular file"


def open_dir(root, parts):
    """A descriptor of the folder ``root/parts…``; raises ``Refused`` where a
    part is a link or not a folder, FileNotFoundError where one is missing."""
    return descend(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), parts)


def descend(fd, parts):
    """A descriptor of the folder ``parts`` below the folder open on ``fd``,
    which this call owns (closed, as each folder on the way is); no part
    followed, raising as ``open_dir``."""
    try:
        for at, part in enumerate(parts):
            below = open_below(fd, part, os.path.join(*parts[: at + 1]))
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_below(fd, part, where=None):
    """A descriptor of the folder ``part`` in the folder open as ``fd``, not
    followed; ``Refused`` (its ``part`` being ``where``, or ``part``) when it
    is a link or no folder, FileNotFoundError when it is missing."""
    try:
        return os.open(part, _DIR, dir_fd=fd)
    except OSError as e:
        if isinstance(e, FileNotFoundError) or e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
        raise Refused(_kind(mode), "folder", where or part) from None


def lstat_in(root, parts):
    """``os.lstat`` of ``root/parts…`` reached without following a link."""
    fd = open_dir(root, parts[:-1])
    try:
        return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def regular_size(path, dir_fd=None):
    """Size of the regular file at ``path`` (in the folder ``dir_fd`` when
    given; its last part not followed); None when there is none. Raises
    ``Refused`` for a link or anything else."""
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise Refused(_kind(st.st_mode), "file")
    return st.st_size


def is_real_dir(path):
    """A folder, and not a symlink to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def open_file(path, dir_fd=None):
    """``(fd, size)`` of the regular file ``path`` (in the folder ``dir_fd``
    when given), read-only, its last part not followed, without waiting on a
    FIFO (fstat then refuses it). Raises ``Refused`` for anything but a
    regular file, FileNotFoundError where there is none. The caller closes
    the fd."""
    try:
        fd = os.open(path, _FILE, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link
            raise Refused("a link", "file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(_kind(st.st_mode), "file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def open_regular(root, parts):
    """``open_file`` of ``root/parts…``, no folder below ``root`` followed
    either; a device is never even opened (lstat first)."""
    folder = open_dir(root, parts[:-1])
    try:
        return open_in(folder, parts[-1])
    finally:
        os.close(folder)


def open_in(folder_fd, name):
    """``open_file`` of ``name`` in the folder ``folder_fd`` (opened by
    ``open_dir``); a device is never even opened (lstat first)."""
    if not stat.S_ISREG(mode := os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode):
        raise Refused(_kind(mode), "file")
    return open_file(name, folder_fd)


def pread_all(fd, limit, start=0, size=None):
    """At most ``limit`` bytes of ``fd`` from ``start`` (fewer at the end of
    the file, which is at ``size`` when known: then one read does)."""
    chunks = []
    want, offset = max(0, limit), start
    if size is not None:
        want = max(0, min(want, size - start))
        if want:  # the usual case: one read returns it all
            chunk = os.pread(fd, want, offset)
            if len(chunk) == want:
                return chunk
            chunks.append(chunk)
            want -= len(chunk)
            offset += len(chunk)
    while want:
        chunk = os.pread(fd, min(want, 1 << 30), offset)
        if not chunk:
            break
        chunks.append(chunk)
        want -= len(chunk)
        offset += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_regular(root, parts, limit=None, head=None):
    """The bytes of the regular file ``root/parts…`` as a writable uint8 array
    the caller owns (a file of ``MAP_AT`` bytes or more is mapped
    copy-on-write: no copy, and a write into it never reaches the file).

    Raises ``Refused`` for anything but a regular file of at most ``limit``
    bytes, FileNotFoundError where there is none. ``head(fd, size)``, when
    given, may look at a file before it is mapped, and raise: a mapped file's
    size is bounded only by what its own bytes declare."""
    import numpy as np

    fd, size = open_regular(root, parts)
    try:
        if limit is not None and size > limit:
            raise Refused(f"a file of {size:,} bytes, more than the {limit:,} such a file can hold")
        if head is not None and size >= MAP_AT:  # a smaller file is read whole, bounded anyway
            head(fd, size)
        if size >= MAP_AT:
            try:
                return np.frombuffer(mmap.mmap(fd, size, access=mmap.ACCESS_COPY), np.uint8)
            except OSError:
                pass  # a filesystem that cannot map files: read it instead
        buf = np.empty(size, np.uint8)
        view, got = memoryview(buf), 0
        while got < size:  # one read stops at 2 GiB
            n = os.readv(fd, [view[got:]])
            if not n:
                break  # shorter than it was a moment ago: the caller's check says truncated
            got += n
        return buf[:got]
    finally:
        os.close(fd)


def entries(root, parts):
    """``(name, kind)`` of each entry of the folder ``root/parts…``, kind being
    "file" (regular), "dir" or what else it is; nothing is followed."""
    fd = open_dir(root, parts)
    try:
        return entries_in(fd)
    finally:
        os.close(fd)


def entries_in(fd):
    """``entries`` of the folder open as ``fd`` (left open)."""
    with os.scandir(fd) as it:
        return [(e.name, "file" if e.is_file(follow_symlinks=False) else
                 "dir" if e.is_dir(follow_symlinks=False) else
                 _kind(e.stat(follow_symlinks=False).st_mode)) for e in it]


def walk_files(root, parts):
    """The path (a tuple of parts below ``parts``) of every regular file
    under ``root/parts…``, depth first; links, FIFOs and devices are skipped,
    nothing is followed out. Missing: nothing."""
    found = []
    stack = [()]
    while stack:
        rel = stack.pop()
        try:
            listed = entries(root, (*parts, *rel))
        except (FileNotFoundError, Refused, NotADirectoryError, PermissionError):
            continue  # vanished, or replaced by a link, since it was listed
        for name, kind in listed:
            if kind == "file":
                found.append((*rel, name))
            elif kind == "dir":
                stack.append((*rel, name))
    return found


def ensure_dirs(root, parts):
    """Create the folders ``root/parts…`` that are missing, following no
    link; the folders whose entries changed (to flush), each as its parts
    below ``root`` (``()``: the root). Raises ``Refused`` where a part is a
    link or a FIFO or a device, ``FileInTheWay`` where it is a regular file."""
    made = set()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = Path(root)
    try:
        for at, part in enumerate(parts):
            try:
                os.mkdir(part, dir_fd=fd)
                made.add(tuple(parts[:at]))
            except FileExistsError:
                pass  # there already (what it is, the open says), or made by another writer
            try:
                below = os.open(part, _DIR, dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                if stat.S_ISREG(mode):
                    raise FileInTheWay(str(here / part)) from None
                raise Refused(_kind(mode), "folder", os.path.join(*parts[: at + 1])) from None
            os.close(fd)
            fd, here = below, here / part
    finally:
        os.close(fd)
    return made


def trash_name(name):
    """The name under ``tmp/`` a folder takes on its way out: renamed there
    first (gone from where it was at once), then removed (``remove_trash``).
    One a failed delete leaves is removed by the next ``sweep``."""
    return f"{DELETED}{name[:40]}-{secrets.token_hex(6)}"


def remove_trash(name, tmp_fd):
    """Remove the folder ``name`` of the ``tmp/`` open as ``tmp_fd``; nothing
    inside is followed (``rmtree`` on a folder descriptor), and a part another
    process removed first (a sweep) is no error."""

    def gone_already(_function, _path, info):
        if not issubclass(info[0], FileNotFoundError):
            raise info[1]

    shutil.rmtree(name, dir_fd=tmp_fd, onerror=gone_already)


def trash(root):
    """The names of the folders in ``root/tmp`` that a delete left (named by
    ``trash_name``); none when there is no ``tmp/``."""
    try:
        return sorted(n for n, kind in entries(root, ("tmp",)) if kind == "dir" and n.startswith(DELETED))
    except (OSError, Refused):
        return []


def sweep(root, parts, cutoff):
    """Remove the entries of ``root/parts…`` (not folders) last changed before
    ``cutoff``, and every folder a delete left there (``trash_name``: nothing
    reads one); a link is removed itself, never what it points at."""
    try:
        fd = open_dir(root, parts)
    except (FileNotFoundError, Refused):
        return
    try:
        with os.scandir(fd) as it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        if e.name.startswith(DELETED):
                            remove_trash(e.name, fd)
                    elif e.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(e.name, dir_fd=fd)
                except OSError:
                    pass  # another process swept it first, or it cannot be removed: check notes it
    finally:
        os.close(fd)
