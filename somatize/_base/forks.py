"""Locks a forked child can take.

fork() copies a process with only the thread that called it: a lock that
another thread held at that moment stays held in the child, by nobody, and
the child's first ``with lock`` waits forever. A DataLoader worker, a rank
that ``somatize.torch.launch`` forks, a user's own ``os.fork()``: each is
such a child, and the Recorder's flusher thread takes the registry's locks
four times a second. ``fork_safe`` has a module's lock made anew, free, in
every child (``_at_fork_reinit``: what CPython's own threading, logging and
concurrent.futures do for theirs). Only for locks around caches and
registries whose every change is one assignment under the GIL, so a child
never finds one half made; a child forgets the registry anyway
(record/_flusher).
"""

from __future__ import annotations

import os


def fork_safe(lock):
    """``lock``, made anew (free) in a forked child."""
    os.register_at_fork(after_in_child=lock._at_fork_reinit)
    return lock
