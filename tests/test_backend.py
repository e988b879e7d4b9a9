"""The storage seam's conformance suite: every promise of the interface the
Store and the Recorder write and read through (``somatize/_base/backend.py``),
asked of every backend. A second backend is one more entry in ``BACKENDS``:
a class that makes an empty store's backend, opens the same store again (a
second reader, or the next process), says which hostile things its storage
can hold (``plant``) and whether other processes can open it.

A store in a bucket (``_base/bucket.BucketBackend``, issue 33) keeps only
the Store's objects, names and marker through the seam; a run there is
written to a local copy (the local backend) and uploaded by segments, so
appending, staging, syncing and locks are not its promises. The promises
it shares (create-if-absent, by a name known late, racing; replace old or
new; walk; remove) are asked of it here too, against ``memory://`` and a
real S3 server on 127.0.0.1 (the ``shared`` fixture). The rest are not:
a bucket holds no link, FIFO or folder where a key belongs (there is
nothing to plant), a PUT is atomic (no copy cut short to replace), and a
read past its limit is the bucket's ``DamagedError`` naming the URL
(tests/test_bucket.py asks those of the bucket itself)."""

import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest

from somatize._base import files
from somatize._base.backend import LocalBackend
from somatize._base.bucket import Bucket, BucketBackend


class Local:
    """The local file system: a folder, where links and FIFOs can be planted."""

    kinds = ("a link", "a FIFO", "a folder")  # what can stand where a file belongs
    processes = True  # other processes open the same store

    def __init__(self, tmp_path):
        self.root = tmp_path / "store"
        self.root.mkdir()
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        (self.outside / "secret").write_bytes(b"not the store's")
        self.fs = self.again()
        self.fs.make(("tmp",))

    def again(self):
        """Another backend on the same store: what a second reader, or the next process, opens."""
        return LocalBackend(self.root)

    def opened_in_a_child(self):
        """Python that opens this store's backend as ``fs`` in another process."""
        return f"from somatize._base.backend import LocalBackend\nfs = LocalBackend({str(self.root)!r})\n"

    def plant(self, parts, kind):
        """Put ``kind`` at ``parts`` (its folders made): a link (to a file
        outside the store, or a folder when ``parts`` should be one), a FIFO,
        a folder."""
        path = self.root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "a link":
            os.symlink(self.outside / "secret", path)
        elif kind == "a folder link":
            os.symlink(self.outside, path)
        elif kind == "a FIFO":
            os.mkfifo(path)
        elif kind == "a folder":
            path.mkdir()
        return str(path)


class InABucket:
    """A bucket (``memory://``, or the S3 server): nothing can be planted in it."""

    kinds = ()
    processes = True

    def __init__(self, url):
        self.url = url
        self.fs = self.again()

    def again(self):
        return BucketBackend(Bucket(self.url))


BACKENDS = {"local": Local}
_buckets = iter(range(10**9))


@pytest.fixture(params=sorted(BACKENDS))
def store(request, tmp_path):
    return BACKENDS[request.param](tmp_path)


@pytest.fixture(params=["local", "memory", "s3"])
def shared(request, tmp_path):
    """A backend for the promises a bucket shares (the module docstring)."""
    if request.param == "local":
        return Local(tmp_path)
    if request.param == "memory":
        return InABucket(f"memory://backend-{next(_buckets)}/store")
    return InABucket(request.getfixturevalue("s3_url"))


def never_waits(call, seconds=10):
    """``call()``'s result or exception, failing the test when it blocks (a FIFO opened to wait on)."""
    out = {}

    def run():
        try:
            out["value"] = call()
        except BaseException as e:
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call waited (on a FIFO?)"
    if "error" in out:
        raise out["error"]
    return out["value"]


def appended(fs, parts, *chunks, sync=True):
    handle, _ = fs.open_append(parts)
    try:
        fs.append(handle, list(chunks))
        if sync:
            fs.sync([handle])
    finally:
        fs.close(handle)


OBJECT = ("objects", "ab", "cdef")


# ---- create-if-absent ----------------------------------------------------------------------------


def test_create_puts_a_file_once_and_then_says_it_is_already_there(shared):
    fs = shared.fs
    assert fs.create(OBJECT, [b"hel", b"lo"], 5) is True
    assert fs.create(OBJECT, [b"other"], 5) is False  # already there: nothing written
    assert bytes(shared.again().read(OBJECT)) == b"hello"


def test_create_replaces_a_file_cut_short(store):
    fs = store.fs
    fs.make(OBJECT[:-1])
    appended(fs, OBJECT, b"he")  # a copy a crash cut short
    assert fs.create(OBJECT, [b"hello"], 5) is True
    assert bytes(fs.read(OBJECT)) == b"hello"


def test_create_by_a_name_known_once_the_bytes_are_written(shared):
    fs = shared.fs
    written = []

    def chunks():
        for c in (b"ab", b"cd"):
            written.append(c)
            yield c

    def parts():
        assert written == [b"ab", b"cd"]  # every chunk written before the name is asked
        return ("objects", "12", "abcd")

    assert fs.create(parts, chunks(), 4) is True
    assert fs.create(lambda: ("objects", "12", "abcd"), iter([b"abcd"]), 4) is False
    assert bytes(fs.read(("objects", "12", "abcd"))) == b"abcd"
    assert fs.list(("tmp",)) == []  # the bytes written for nothing left nothing behind


def test_creates_of_one_name_racing_leave_it_whole(shared):
    fs = shared.fs
    body = os.urandom(1 << 20)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(fs.create(OBJECT, [body], len(body))))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert True in answers and len(answers) == 8
    assert bytes(fs.read(OBJECT)) == body
    assert fs.create(OBJECT, [body], len(body)) is False


def test_creates_leave_their_folders_to_sync_together_when_asked(store):
    fs = store.fs
    later: set = set()
    for i in range(3):
        assert fs.create(("objects", f"{i:02x}", "x"), [b"x"], 1, later=later)
    fs.sync(folders=sorted(later))
    assert {("objects", f"{i:02x}") for i in range(3)} <= later
    assert [bytes(store.again().read(("objects", f"{i:02x}", "x"))) for i in range(3)] == [b"x"] * 3


# ---- replace: atomic ------------------------------------------------------------------------------


def test_replace_is_old_or_new_never_a_mix(shared):
    fs, reader = shared.fs, shared.again()
    parts = ("names", "a", "b")
    old, new = b"o" * (1 << 20), b"n" * (1 << 20) + b"!"
    fs.replace(parts, old)
    stop, seen = threading.Event(), set()

    def read():
        while not stop.is_set():
            got = bytes(reader.read(parts))
            assert got in (old, new), (len(got), got[:10], got[-10:])
            seen.add(got[:1])

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for i in range(20):
            fs.replace(parts, new if i % 2 else old)
    finally:
        stop.set()
        thread.join()
    assert bytes(reader.read(parts)) == new
    assert fs.list(("tmp",)) == []


def test_replace_makes_its_folders_and_refuses_a_file_in_the_way(store):
    fs = store.fs
    fs.replace(("names", "a", "b", "c"), b"1")
    assert bytes(fs.read(("names", "a", "b", "c"))) == b"1"
    with pytest.raises(files.FileInTheWay):
        fs.replace(("names", "a", "b", "c", "d"), b"2")  # a file where a folder belongs
    with pytest.raises(IsADirectoryError):
        fs.replace(("names", "a", "b"), b"3")  # a folder where the file would go


def test_a_replace_killed_at_any_moment_leaves_the_old_bytes_or_the_new(store):
    if not store.processes:
        pytest.skip("this backend is not shared by processes")
    parts = ("names", "r")
    old, new = b"o" * (4 << 20), b"n" * (4 << 20)
    store.fs.replace(parts, old)
    code = store.opened_in_a_child() + (
        "import sys\nsys.stdout.write('go\\n'); sys.stdout.flush()\n"
        f"while True:\n    fs.replace({parts!r}, {new[:1]!r} * {len(new)})\n"
        f"    fs.replace({parts!r}, {old[:1]!r} * {len(old)})\n")
    for delay in (0.0, 0.003, 0.01, 0.03):
        with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) as child:
            assert child.stdout.readline() == b"go\n"
            time.sleep(delay)
            child.send_signal(signal.SIGKILL)
        assert bytes(store.again().read(parts)) in (old, new)


# ---- append, sync, truncate -------------------------------------------------------------------------


def test_append_is_durable_after_sync_and_read_in_order(store):
    fs = store.fs
    parts = ("runs", "r", "facts.log")
    fs.make(parts[:-1])
    handle, made = fs.open_append(parts)
    assert made
    fs.append(handle, [b"one", memoryview(b"two")])
    fs.append(handle, [b"three"])
    fs.sync([handle], folders=[parts[:-1]])
    fs.close(handle)
    assert store.again().read_range(parts, 1 << 20) == b"onetwothree"
    handle, made = fs.open_append(parts)  # opened again: appended after what is there
    assert not made
    fs.append(handle, [b"!"])
    fs.sync([handle])
    fs.close(handle)
    assert store.again().read_range(parts, 1 << 20) == b"onetwothree!"


def test_appends_synced_before_a_kill_are_all_there(store):
    if not store.processes:
        pytest.skip("this backend is not shared by processes")
    parts = ("runs", "r", "facts.log")
    code = store.opened_in_a_child() + (
        "import os, signal\n"
        f"fs.make({parts[:-1]!r})\n"
        f"h, _ = fs.open_append({parts!r})\n"
        "for i in range(100):\n    fs.append(h, [b'%03d' % i])\n"
        f"fs.sync([h], folders=[{parts[:-1]!r}])\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", code])
    assert done.returncode == -signal.SIGKILL
    assert store.again().read_range(parts, 1 << 20) == b"".join(b"%03d" % i for i in range(100))


def test_sync_reaches_the_disk_for_every_handle_and_folder(tmp_path, monkeypatch):
    """The local backend's sync: an fsync of each file and folder (or one
    syncfs of their file system, ``files.sync_all``)."""
    fs = LocalBackend(tmp_path)
    fs.make(("runs", "r"))
    handles = [fs.open_append(("runs", "r", f"f{i}"))[0] for i in range(2)]
    synced = []
    real = os.fsync
    monkeypatch.setattr(files, "SYNCFS_DIRTY_AT", -1)  # an fsync each, so each shows
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    fs.sync(handles, folders=[("runs", "r")])
    for h in handles:
        fs.close(h)
    assert sorted(synced) == sorted([str(tmp_path / "runs" / "r" / "f0"), str(tmp_path / "runs" / "r" / "f1"),
                                     str(tmp_path / "runs" / "r")])


def test_truncate_cuts_back_only_what_is_longer(store):
    fs = store.fs
    parts = ("runs", "r", "index.bin")
    fs.make(parts[:-1])
    handle, _ = fs.open_append(parts)
    fs.append(handle, [b"0123456789"])
    assert fs.truncate(handle, 4) is True
    assert fs.truncate(handle, 8) is False  # never lengthened
    fs.append(handle, [b"x"])
    fs.sync([handle])
    fs.close(handle)
    assert fs.read_range(parts, 100) == b"0123x"


def test_open_append_without_make_leaves_a_missing_file_missing(store):
    fs = store.fs
    fs.make(("runs", "r"))
    with pytest.raises(FileNotFoundError):
        fs.open_append(("runs", "r", "facts.log"), make=False)
    assert fs.list(("runs", "r")) == []


# ---- stage and place -----------------------------------------------------------------------------


def test_a_staged_replacement_is_in_place_only_once_placed(store):
    fs = store.fs
    parts = ("runs", "r", "summary.json")
    fs.make(parts[:-1])
    fs.replace(parts, b"old")
    staged = fs.stage(parts)
    fs.append(staged, [b"new"])
    fs.sync([staged])
    assert store.again().read_range(parts, 100) == b"old"
    fs.place(staged)
    fs.close(staged)
    assert store.again().read_range(parts, 100) == b"new"
    staged = fs.stage(parts)  # a second staging under the same name starts empty
    fs.append(staged, [b"2"])
    fs.place(staged)
    fs.close(staged)
    assert fs.read_range(parts, 100) == b"2"


# ---- list and walk: no link followed, only files read -----------------------------------------------


def test_list_says_what_each_entry_is_and_follows_no_link(store):
    fs = store.fs
    fs.replace(("names", "file"), b"x")
    fs.make(("names", "folder"))
    for kind in store.kinds:
        if kind != "a folder":
            store.plant(("names", kind), kind)
    listed = dict(fs.list(("names",)))
    assert listed["file"] == "file" and listed["folder"] == "dir"
    for kind in store.kinds:
        if kind != "a folder":
            assert listed[kind] == kind  # a link is a link, never what it points at
    if "a link" in store.kinds:
        where = store.plant(("names", "out"), "a folder link")
        with pytest.raises(files.Refused) as e:
            fs.list(("names", "out"))
        assert e.value.where == where
        with pytest.raises(files.Refused) as e:
            fs.read(("names", "out", "secret"))
        assert e.value.where == where  # the folder on the way is named, nothing read through it


def test_walk_finds_every_file_below_and_nothing_else(shared):
    fs = shared.fs
    for parts in (("names", "a"), ("names", "b", "c"), ("names", "b", "d", "e")):
        fs.replace(parts, b"1")
    for kind in shared.kinds:
        if kind != "a folder":
            shared.plant(("names", "b", kind), kind)
    if "a link" in shared.kinds:
        shared.plant(("names", "out"), "a folder link")
    assert sorted(fs.walk(("names",))) == [("a",), ("b", "c"), ("b", "d", "e")]
    assert fs.walk(("nothing",)) == []


# ---- a lock held by one writer -----------------------------------------------------------------------


LOCK = ("runs", "r", "lock")


def test_a_lock_is_held_by_one_writer_and_let_go_when_closed(store):
    fs = store.fs
    fs.make(LOCK[:-1])
    assert fs.held(LOCK) is False
    first = fs.lock(LOCK, b"me\n")
    assert first is not None
    assert fs.lock(LOCK) is None  # another writer of this very process is refused
    assert fs.held(LOCK) and store.again().held(LOCK)  # asking takes nothing, drops nothing
    assert fs.held(LOCK)
    assert fs.read_range(LOCK, 100) == b"me\n"
    fs.close(first)
    assert not fs.held(LOCK)
    second = fs.lock(LOCK)
    assert second is not None
    fs.close(second)


def test_a_lock_held_by_another_process_refuses_until_it_ends(store):
    if not store.processes:
        pytest.skip("this backend is not shared by processes")
    fs = store.fs
    fs.make(LOCK[:-1])
    code = store.opened_in_a_child() + (
        f"import sys\nh = fs.lock({LOCK!r}, b'child')\nprint('held' if h is not None else 'refused', flush=True)\n"
        "sys.stdin.read()\n")
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout.readline() == b"held\n"
            assert fs.held(LOCK) and fs.lock(LOCK) is None
        finally:
            child.kill()
    assert not fs.held(LOCK)  # its process ended: the lock is let go
    handle = fs.lock(LOCK)
    assert handle is not None
    fs.close(handle)


# ---- reads bounded by the bytes present -----------------------------------------------------------


def test_reads_are_bounded_by_the_bytes_present(store):
    fs = store.fs
    parts = ("runs", "r", "facts.log")
    fs.make(parts[:-1])
    appended(fs, parts, b"0123456789")
    tracemalloc.start()
    try:
        assert fs.read_range(parts, 1 << 50) == b"0123456789"  # a limit asks nothing of memory
        assert fs.read_range(parts, 1 << 50, start=7) == b"789"
        assert fs.read_range(parts, 4, start=2) == b"2345"
        assert fs.read_range(parts, 10, start=1 << 40) == b""
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()
    assert fs.size(parts) == 10 and fs.size(("runs", "r", "none")) is None
    assert bytes(fs.read(parts, limit=10)) == b"0123456789"
    with pytest.raises(files.Refused) as e:
        fs.read(parts, limit=9)
    assert e.value.where == fs.where(parts) and "10 bytes" in str(e.value)
    with pytest.raises(FileNotFoundError):
        fs.read_range(("runs", "r", "none"), 10)


def test_version_changes_whenever_the_file_does(store):
    fs = store.fs
    parts = ("runs", "r", "summary.json")
    assert fs.version(parts) is None
    fs.replace(parts, b"1")
    one = fs.version(parts)
    assert one is not None and fs.version(parts) == one
    fs.replace(parts, b"2")
    assert fs.version(parts) != one
    folder = fs.open_folder(("runs", "r"))
    try:
        assert fs.version(("summary.json",), at=folder) == fs.version(parts)
    finally:
        fs.close(folder)
    fs.make(("runs", "r", "series"))
    assert fs.version(("runs", "r", "series")) is None  # a folder is no file


# ---- what does not belong: refused, naming the path, never waited on ---------------------------------


READS = {
    "read": lambda fs, parts: fs.read(parts),
    "read_range": lambda fs, parts: fs.read_range(parts, 100),
    "size": lambda fs, parts: fs.size(parts),
    "open_append": lambda fs, parts: fs.open_append(parts),
    "lock": lambda fs, parts: fs.lock(parts),
}


@pytest.mark.parametrize("call", READS)
@pytest.mark.parametrize("kind", ["a link", "a FIFO", "a folder"])
def test_what_is_no_file_where_a_file_belongs_is_refused_naming_its_path(store, kind, call):
    if kind not in store.kinds:
        pytest.skip(f"this backend cannot hold {kind}")
    fs = store.fs
    parts = ("runs", "r", "facts.log")
    where = store.plant(parts, kind)
    with pytest.raises(files.Refused) as e:
        never_waits(lambda: READS[call](fs, parts))
    assert e.value.where == where and kind in str(e.value)
    assert never_waits(lambda: fs.held(parts)) is False  # a lock that is no file is nobody's
    held = fs.open_folder(("runs", "r"))
    try:
        with pytest.raises(files.Refused) as e:
            never_waits(lambda: fs.read_range(parts[-1:], 100, at=held))
        assert e.value.where == where
    finally:
        fs.close(held)
    if kind == "a link":
        assert (store.outside / "secret").read_bytes() == b"not the store's"  # nothing written through it


def test_a_folder_on_the_way_that_is_a_link_is_refused_naming_it(store):
    if "a link" not in store.kinds:
        pytest.skip("this backend cannot hold a link")
    fs = store.fs
    where = store.plant(("runs", "r"), "a folder link")
    for call in (lambda: fs.read(("runs", "r", "secret")), lambda: fs.open_folder(("runs", "r")),
                 lambda: fs.open_append(("runs", "r", "new")), lambda: fs.make(("runs", "r", "series"))):
        with pytest.raises(files.Refused) as e:
            call()
        assert e.value.where == where
    assert sorted(p.name for p in store.outside.iterdir()) == ["secret"]  # nothing made through it


def test_make_says_which_folders_changed_and_refuses_a_file_in_the_way(store):
    fs = store.fs
    assert fs.make(("runs", "r", "series")) == {(), ("runs",), ("runs", "r")}
    assert fs.make(("runs", "r", "series")) == set()
    fs.replace(("runs", "f"), b"x")
    with pytest.raises(files.FileInTheWay):
        fs.make(("runs", "f", "series"))


def test_remove_takes_a_file_or_a_link_never_what_it_points_at(shared):
    fs = shared.fs
    fs.replace(("runs", "r", "index.bin"), b"x")
    fs.remove(("runs", "r", "index.bin"))
    fs.remove(("runs", "r", "index.bin"))  # gone already: nothing
    assert fs.size(("runs", "r", "index.bin")) is None
    if "a link" in shared.kinds:
        shared.plant(("runs", "r", "link"), "a link")
        fs.remove(("runs", "r", "link"))
        assert fs.list(("runs", "r")) == [] and (shared.outside / "secret").exists()
