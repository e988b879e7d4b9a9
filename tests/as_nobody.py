"""Python run as an ordinary user (uid 65534, no groups), for tests run as root.

Root ignores permission bits, so a test of what a user may not write runs its
code in a child that drops to uid 65534. That user may not be able to reach
this interpreter, its packages or the checkout: a home folder is 0700, and so
is a folder made by ``mktemp -d``. The child, still root, opens every folder
it imports from and puts ``/proc/self/fd/N`` in their place on its paths; a
process reaches its own descriptors whoever it has become, so the code under
test imports what it needs when it needs it, as in a user's process, while
every other path (the store's) is opened as that user, with that user's rights.
Run by a user who is not root, the child stays that user: the bits bind it already.
"""

import os
import subprocess
import sys


def as_nobody(*argv):
    """Runs ``python *argv`` (``-m module args`` or ``-c code args``) as that user."""
    return subprocess.run([sys.executable, __file__, *map(str, argv)], capture_output=True, text=True)


def _reached(folders, opened):
    """Each of ``folders`` through a descriptor opened on it now (others as they are)."""
    out = []
    for folder in folders:
        if os.path.isdir(folder):
            real = os.path.realpath(folder)
            if real not in opened:
                opened[real] = f"/proc/self/fd/{os.open(real, os.O_RDONLY | os.O_DIRECTORY)}"
            folder = opened[real]
        out.append(folder)
    return out


def _drop():
    import importlib

    opened = {}
    sys.path[:] = _reached(sys.path, opened)
    for module in list(sys.modules.values()):  # the packages loaded at start-up load their submodules later
        if isinstance(getattr(module, "__path__", None), list):
            module.__path__[:] = _reached(module.__path__, opened)
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)


if __name__ == "__main__":
    import runpy

    how, what, *args = sys.argv[1:]
    _drop()
    if how == "-m":
        sys.argv = [what, *args]
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *args]
        exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
