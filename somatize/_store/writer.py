"""Writing objects into a store: hash while writing, then rename into place.

The rule kept here: an object reaches its name whole and durable, or not at
all, and is written once: the backend creates ``objects/ab/<62 hex>`` unless
a whole one is there (``create``: on the local disk, a temp file in ``tmp/``,
fsync'd, renamed into place, folders made without following a link out of
the store), and the folders of a value's leaves are synced before the
manifest that names them.

A large object is hashed in a thread (hashlib and xxhash let go of the GIL)
while its bytes are written: its name is only known once both are done.

O_DIRECT. A large object (``files.DIRECT_AT``, 8 MiB, or more) can be
written around the page cache (the local backend's ``create``). Whether that pays depends on the machine: where
handing the kernel *new* page-cache pages costs much CPU (the VMs this
project runs on), a buffered write of a big new file is several times
slower than O_DIRECT's; the price is that the first recall after a keep
reads the disk. On a machine without that cost a buffered write is as fast
and leaves the object cached. So it is a switch: ``Store(path,
direct_io=False)``, or the environment variable ``SOMATIZE_DIRECT_IO=0``
(``=1`` to force it on); the default is on (bench/RESULTS.md, the store).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_HASH_WHILE_WRITING = 1 << 20  # bytes; below this a thread costs more than it saves
_WRITERS = 8  # threads writing the leaves of one value


def direct_io_default():
    """The default of ``Store(direct_io=)``: ``SOMATIZE_DIRECT_IO`` if set, else on."""
    return os.environ.get("SOMATIZE_DIRECT_IO", "1").strip().lower() not in ("0", "false", "no", "off", "")


def parts_of(digest):
    """Where the object ``digest`` lies in a store: ``("objects", "ab", "<62 hex>")``."""
    hexes = digest[7:]
    return ("objects", hexes[:2], hexes[2:])


class Writer:
    """Writes the objects of a store through its ``backend``."""

    def __init__(self, backend):
        self.backend = backend

    def path_of(self, digest):
        """The object's path, to name it in a message."""
        return Path(self.backend.where(parts_of(digest)))

    def put(self, parts):
        """Write a ``Split``'s leaves, then its top object; the top's digest."""
        leaves = parts.leaves
        later: set = set()  # the leaves' folders, synced once, before the manifest naming them
        if len(leaves) > 1:
            # each fsync waits on the disk; waiting in parallel lets the
            # filesystem commit many files at once
            with ThreadPoolExecutor(min(_WRITERS, len(leaves))) as pool:
                list(pool.map(lambda leaf: self.write(leaf, later), leaves))
        elif leaves:
            self.write(leaves[0], later)
        if later:
            self.backend.sync(folders=sorted(later))
        top = parts.top()
        self.write(top)
        return top.digest

    def write(self, obj, later=None):
        """Write ``obj`` unless it is there already (whether it was written);
        ``later``: the backend's ``create`` adds the folders to sync there."""
        if obj.size < _HASH_WHILE_WRITING or obj._digest is not None:
            return self.backend.create(parts_of(obj.digest), obj.parts, obj.size, later)
        # Large: hashed in a thread while its bytes are written, so its name
        # is known once they are. A copy that turns out to exist already
        # cost a write, not a read.
        body = list(obj.parts)  # seal() appends the checksum and digest once known
        hasher = threading.Thread(target=obj.seal)
        hasher.start()

        def chunks():
            yield from body
            hasher.join()
            yield from obj.parts[len(body):]

        try:
            return self.backend.create(lambda: parts_of(obj.digest), chunks(), obj.size, later)
        finally:
            hasher.join()
