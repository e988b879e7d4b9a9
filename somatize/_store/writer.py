"""Writing objects into a store: hash while writing, then rename into place.

The rule kept here: an object reaches its name whole and durable, or not at
all. Its bytes go to a temp file in ``tmp/`` and are fsync'd, the file is
renamed to ``objects/ab/<62 hex>`` (folders created without following a link
out of the store), and the folders are flushed before anything names it.

A large object is hashed in a thread (hashlib and xxhash let go of the GIL)
while its bytes are written: its name is only known once both are done.

O_DIRECT. A large object (``DIRECT_AT``, 8 MiB, or more) can be written
around the page cache. Whether that pays depends on the machine: where
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

from .._base import files as _files

_HASH_WHILE_WRITING = 1 << 20  # bytes; below this a thread costs more than it saves
_WRITERS = 8  # threads writing the leaves of one value


def direct_io_default():
    """The default of ``Store(direct_io=)``: ``SOMATIZE_DIRECT_IO`` if set, else on."""
    return os.environ.get("SOMATIZE_DIRECT_IO", "1").strip().lower() not in ("0", "false", "no", "off", "")


class Writer:
    """Writes the objects of a store whose root is ``root`` (a Path)."""

    def __init__(self, root, direct_io):
        self.root = root
        self.tmp = root / "tmp"
        self.direct_io = direct_io

    def path_of(self, digest):
        hexes = digest[7:]
        return self.root / "objects" / hexes[:2] / hexes[2:]

    def put(self, parts):
        """Write a ``Split``'s leaves, then its top object; the top's digest."""
        leaves = parts.leaves
        dirs = set()
        if len(leaves) > 1:
            # each fsync waits on the disk; waiting in parallel lets the
            # filesystem commit many files at once
            with ThreadPoolExecutor(min(_WRITERS, len(leaves))) as pool:
                for made in pool.map(lambda leaf: self.write(leaf, sync_dir=False), leaves):
                    dirs |= made
        elif leaves:
            dirs = self.write(leaves[0], sync_dir=False)
        for d in dirs:  # leaves reach the disk before the manifest naming them
            _files.sync_dir(d)
        top = parts.top()
        self.write(top)
        return top.digest

    def write(self, obj, sync_dir=True):
        """Write ``obj`` unless already there; the folders left to flush."""
        if obj.size < _HASH_WHILE_WRITING or obj._digest is not None:
            path = self.path_of(obj.digest)
            made = self._folder(path)
            if _files.has_size(path, obj.size):  # one of another size is truncated: replaced
                return set()
            return self._rename(_files.write_temp(self.tmp, obj.parts, 0o444), path, made, sync_dir)
        # Large: hash in a thread while the bytes go to a temp file and to
        # disk. A copy that turns out to exist already cost a write, not a read.
        body = list(obj.parts)  # seal() appends the checksum and digest once known
        hasher = threading.Thread(target=obj.seal)
        hasher.start()
        tmp = None
        if self.direct_io and obj.size >= _files.DIRECT_AT:
            def parts():
                yield from body
                hasher.join()
                yield from obj.parts[len(body):]

            try:
                tmp = _files.write_temp_direct(self.tmp, parts(), 0o444)
            finally:
                hasher.join()
        if tmp is None:
            tmp = self._write_temp_beside(obj, body, hasher)
        path = self.path_of(obj.digest)
        try:
            made = self._folder(path)
        except BaseException:
            _files.unlink(tmp)
            raise
        if _files.has_size(path, obj.size):  # another writer placed it meanwhile, or it was there
            _files.unlink(tmp)
            return set()
        return self._rename(tmp, path, made, sync_dir)

    def _write_temp_beside(self, obj, body, hasher):
        """The temp file of a large object written while ``hasher`` seals it."""
        tmp, fd = _files.new_temp(self.tmp, 0o444)
        try:
            try:
                _files.write_all(fd, body)
            finally:
                hasher.join()
            _files.write_all(fd, obj.parts[len(body):])
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _files.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def _folder(self, path):
        """Make the object's folder, following no link out of the store; the
        folders whose entries changed."""
        return _files.ensure_dirs(self.root, ("objects", path.parent.name))

    def _rename(self, tmp, path, made, sync_dir):
        _files.replace(tmp, path)
        dirs = {path.parent, *(self.root.joinpath(*d) for d in made)}
        if sync_dir:
            for d in dirs:
                _files.sync_dir(d)
            return set()
        return dirs
