"""Deleting a run: never following a link, never leaving the store, refused
while a live Recorder holds the run's lock."""

from __future__ import annotations

import os
import stat

from .._base import files, locks
from ..record import _runs
from ._public import Busy


def delete_run(root: str, folder: str, run: str) -> None:
    """Remove a run's folder. Never follows a link, never leaves the store:
    the folder is reached through descriptors opened without following,
    its lock is taken first (a run a live Recorder holds is refused with
    Busy), then it is renamed into the store's ``tmp/`` (gone from the
    listing at once) and removed there by ``shutil.rmtree`` on a folder
    descriptor, which never follows a link inside."""
    if _runs.live_recorder(folder) is not None:
        raise Busy(f"run {run!r} is being recorded in this process: close its Recorder first")
    runs_fd = files.open_dir(root, ("runs",))
    try:
        tmp_fd = files.open_dir(root, ())
        try:
            files.ensure_dirs(root, ("tmp",))
            os.close(tmp_fd)
            tmp_fd = files.open_dir(root, ("tmp",))
            run_fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=runs_fd)
            try:
                lock = _hold_lock(run_fd, run)
                try:
                    gone = files.trash_name(run)
                    os.rename(run, gone, src_dir_fd=runs_fd, dst_dir_fd=tmp_fd)
                finally:
                    os.close(lock)
            finally:
                os.close(run_fd)
            files.remove_trash(gone, tmp_fd)
        finally:
            os.close(tmp_fd)
    finally:
        os.close(runs_fd)


def _hold_lock(run_fd: int, run: str) -> int:
    """The run's lock, held: Busy when a live Recorder holds it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(_runs.LOCK, flags, 0o644, dir_fd=run_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Busy(f"run {run!r}: its lock is not a regular file; run `somatize check` on the store")
        if not locks.take(fd):
            raise Busy(f"run {run!r} is being recorded (a live Recorder holds its lock): "
                       f"delete it once it has finished or been stopped")
    except BaseException:
        os.close(fd)
        raise
    return fd
