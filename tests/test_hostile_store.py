"""A store someone else wrote: links out at every level, FIFOs, devices,
folders where files belong and the other way round, absurd headers.

Each case builds a real store, plants one hostile thing, then runs every
operation (``Store(path)``, ``Store(path, readonly=True)``, ``names()``,
``runs()``, ``lookup``, ``recall``, ``check()``, ``keep``) in a child process that
(1) records every ``open`` and removal through ``sys.addaudithook``,
(2) runs under ``RLIMIT_AS`` so reading without bound ends in MemoryError,
(3) is guarded by a timeout, so a hang fails the test instead of the suite.
Every operation must end in a clean return or a SomatizeError; nothing
outside the store may be opened, listed or removed; a value recalled must be
exactly the one kept under that name; and the hostile thing must be noticed
(check() lists it, or an operation refuses), so no case passes by doing nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from somatize import Store
from somatize._base.errors import SomatizeError
from somatize._store.objects import TREE, Encoded

ROOT = Path(__file__).resolve().parents[1]
GUARD_S = 120  # a guard against hangs, not a measurement
MEMORY_CAP = 1536 << 20  # RLIMIT_AS of the child: far above what any case needs

CHILD = textwrap.dedent(r"""
    import json, os, resource, sys
    store_path, outside, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import numpy as np
    from somatize import Store
    from somatize._base.errors import SomatizeError

    touched = []
    WATCHED = {"open", "os.remove", "os.rmdir", "os.rename", "os.replace", "os.listdir", "os.scandir"}

    def hook(event, args):
        if event not in WATCHED or not args:
            return
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return
        # a name opened relative to a folder descriptor carries only its own
        # name: every file outside is named OUTSIDE-…, a name the store never uses
        if os.path.isabs(path):
            flags = args[2] if event == "open" and len(args) > 2 and isinstance(args[2], int) else 0
            if flags & os.O_NOFOLLOW:  # the last part is not followed: where it is, is where it stays
                path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
            else:
                path = os.path.realpath(path)
        if "OUTSIDE" in path or path.startswith(outside + os.sep):
            touched.append(f"{event} {args[0]}")

    sys.addaudithook(hook)
    kept = json.load(open(os.path.join(os.path.dirname(store_path), "kept.json")))
    outcomes = {}
    found = []  # the problems check() listed

    def run(label, f):
        try:
            value = f()
        except SomatizeError as e:
            outcomes[label] = "refused: " + type(e).__name__
            return None
        except BaseException as e:
            outcomes[label] = f"BROKE: {type(e).__name__}: {str(e)[:300]}"
            return None
        outcomes[label] = "ok"
        return value

    def same(name, value):
        want = kept[name]
        if "any" in want:  # a manifest, planted or not: any value, as long as it is one
            return True
        if isinstance(value, np.ndarray):
            return value.shape == (want["n"],) and bool((value == want["fill"]).all())
        return value == want["plain"]

    writable = run("Store(path)", lambda: Store(store_path))
    readonly = run("Store(path, readonly=True)", lambda: Store(store_path, readonly=True))
    for label, store in (("", writable), ("readonly ", readonly)):
        if store is None:
            continue
        names = run(label + "names()", store.names) or []
        if any("OUTSIDE" in n for n in names):
            touched.append(f"names() listed {names}")
        runs = run(label + "runs()", store.runs) or []
        if "a-run" in runs:  # only ever made outside the store
            touched.append(f"runs() listed {runs}")
        for name in kept:
            run(f"{label}lookup({name!r})", lambda: store.lookup(name))
            value = run(f"{label}recall({name!r})", lambda: store.recall(name))
            if outcomes[f"{label}recall({name!r})"] == "ok" and not same(name, value):
                outcomes[f"{label}recall({name!r})"] = "BROKE: returned another value"
        problems = run(label + "check()", store.check)
        if outcomes[label + "check()"] != "ok":  # check reports; it never raises
            outcomes[label + "check()"] = "BROKE: check() raised, " + outcomes[label + "check()"]
        elif not all(isinstance(p, str) for p in problems):
            outcomes[label + "check()"] = "BROKE: not a list of lines"
        else:
            found.extend(problems)
    if writable is not None:
        run("keep('new', …)", lambda: writable.keep("new", np.full(300, 7.0)))
        run("keep('small', …)", lambda: writable.keep("small", 5))
        run("keep('d/y', …)", lambda: writable.keep("d/y", [1, 2]))
    print(json.dumps({"outcomes": outcomes, "touched": touched, "found": found}))
""")


def _outside(tmp_path):
    """A folder outside the store, full of old files a sweep would remove
    and of bytes that would pass for a ref or an object if followed."""
    out = tmp_path / "OUTSIDE-folder"
    out.mkdir()
    for i in range(3):
        f = out / f"OUTSIDE-old-{i}"
        f.write_bytes(b"precious")
        os.utime(f, (1, 1))  # older than any sweep's cutoff
    return out


def _healthy(tmp_path):
    """A store with a small array, a large (mapped) one, a nested name, a
    manifest and a plain int; what was kept is written beside it."""
    path = tmp_path / "store"
    store = Store(path)
    kept = {
        "a": np.full(1000, 1.0),
        "big": np.full((2 << 20) // 8, 2.0),  # 2 MiB: read by mapping
        "d/x": np.full(500, 3.0),
        "n": 41,
    }
    for name, value in kept.items():
        store.keep(name, value)
    store.keep("tree", {"w": kept["a"]})
    described = {n: ({"n": v.size, "fill": float(v[0])} if isinstance(v, np.ndarray) else {"plain": v})
                 for n, v in kept.items()}
    described["tree"] = {"any": True}
    (tmp_path / "kept.json").write_text(json.dumps(described))
    return store


def _object_of(store, name):
    return store._object_path(store.lookup(name))


def _fifo(path):
    path.unlink() if path.exists() or path.is_symlink() else None
    os.mkfifo(path)


def _dev_zero(path):
    """A device file that reads forever: mknod when allowed, else a link."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    try:
        os.mknod(path, 0o20666, os.makedev(1, 5))
    except (PermissionError, OSError):
        path.symlink_to("/dev/zero")


def _swap_for_link(path, target):
    """Move ``path`` (file or folder) to ``target`` outside, link to it."""
    shutil.move(path, target)
    path.symlink_to(target)


def _plant_bytes(store, raw):
    """An object file of format 1 (still read) whose checksum and digest are
    right for ``raw`` (a body): what a hostile writer can make."""
    import hashlib

    import xxhash

    whole = bytes(raw) + xxhash.xxh3_128(bytes(raw)).digest()
    digest = "sha256:" + hashlib.sha256(whole).hexdigest()
    path = store._object_path(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(whole)
    return digest


def _plant_encoded(store, obj):
    digest = obj.seal()
    path = store._object_path(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(bytes(p) for p in obj.parts))
    return digest


def _header_object(header, payload=b""):
    import struct

    import orjson

    h = orjson.dumps(header)
    head = b"SMZ1" + struct.pack("<I", len(h)) + h
    head += bytes(-len(head) % 64)
    return head + payload + bytes(-len(payload) % 64)


# ---- the cases ----------------------------------------------------------------------


def tmp_links_out(store, out):
    shutil.rmtree(store.path / "tmp")
    (store.path / "tmp").symlink_to(out)


def names_links_out(store, out):
    _swap_for_link(store.path / "names", out / "OUTSIDE-names")


def objects_links_out(store, out):
    _swap_for_link(store.path / "objects", out / "OUTSIDE-objects")


def an_object_folder_links_out(store, out):
    _swap_for_link(_object_of(store, "a").parent, out / "OUTSIDE-ab")


def a_name_folder_links_out(store, out):
    _swap_for_link(store.path / "names" / "d", out / "OUTSIDE-d")


def a_name_file_links_out(store, out):
    # the file outside holds a real digest: followed, "a" would recall big's value
    (out / "OUTSIDE-ref").write_text(store.lookup("big"))
    (store.path / "names" / "a").unlink()
    (store.path / "names" / "a").symlink_to(out / "OUTSIDE-ref")


def an_object_file_links_out(store, out):
    # the file outside holds another whole object: followed, "big" would be "a"-ish
    path = _object_of(store, "big")
    other = out / "OUTSIDE-object"
    shutil.copyfile(_object_of(store, "d/x"), other)
    path.unlink()
    path.symlink_to(other)


def a_name_links_to_a_name_outside_by_relative_path(store, out):
    (out / "OUTSIDE-ref").write_text(store.lookup("big"))
    (store.path / "names" / "n").unlink()
    (store.path / "names" / "n").symlink_to(os.path.relpath(out / "OUTSIDE-ref", store.path / "names"))


def marker_links_out(store, out):
    (out / "OUTSIDE-marker").write_bytes((store.path / "SOMATIZE").read_bytes())
    (store.path / "SOMATIZE").unlink()
    (store.path / "SOMATIZE").symlink_to(out / "OUTSIDE-marker")


def runs_links_out(store, out):
    (out / "OUTSIDE-runs" / "a-run").mkdir(parents=True)
    (store.path / "runs").symlink_to(out / "OUTSIDE-runs")


def names_is_a_fifo(store, out):
    shutil.rmtree(store.path / "names")
    os.mkfifo(store.path / "names")


def objects_is_a_fifo(store, out):
    shutil.rmtree(store.path / "objects")
    os.mkfifo(store.path / "objects")


def marker_is_a_fifo(store, out):
    _fifo(store.path / "SOMATIZE")


def a_name_is_a_fifo(store, out):
    _fifo(store.path / "names" / "a")


def an_object_is_a_fifo(store, out):
    _fifo(_object_of(store, "a"))


def a_big_object_is_a_fifo(store, out):
    _fifo(_object_of(store, "big"))


def a_lock_is_a_fifo(store, out):
    (store.path / "runs" / "r").mkdir(parents=True)
    os.mkfifo(store.path / "runs" / "r" / "lock")
    os.mkfifo(store.path / "tmp" / "lock")


def marker_is_a_device(store, out):
    _dev_zero(store.path / "SOMATIZE")


def a_name_is_a_device(store, out):
    _dev_zero(store.path / "names" / "a")


def a_name_links_to_dev_zero(store, out):
    (store.path / "names" / "n").unlink()
    (store.path / "names" / "n").symlink_to("/dev/zero")


def an_object_is_a_device(store, out):
    _dev_zero(_object_of(store, "big"))


def an_object_links_to_dev_zero(store, out):
    path = _object_of(store, "a")
    path.unlink()
    path.symlink_to("/dev/zero")


def marker_is_a_folder(store, out):
    (store.path / "SOMATIZE").unlink()
    (store.path / "SOMATIZE").mkdir()


def an_object_is_a_folder(store, out):
    path = _object_of(store, "a")
    path.unlink()
    path.mkdir()


def objects_is_a_file(store, out):
    shutil.rmtree(store.path / "objects")
    (store.path / "objects").write_bytes(b"x")


def names_is_a_file(store, out):
    shutil.rmtree(store.path / "names")
    (store.path / "names").write_bytes(b"x")


def tmp_is_a_file(store, out):
    shutil.rmtree(store.path / "tmp")
    (store.path / "tmp").write_bytes(b"x")


def an_object_folder_is_a_file(store, out):
    folder = _object_of(store, "a").parent
    shutil.rmtree(folder)
    folder.write_bytes(b"x")


def a_name_is_huge(store, out):
    with open(store.path / "names" / "a", "wb") as f:
        f.truncate(1 << 40)  # sparse: a terabyte of zeros


def an_object_is_huge_and_sparse(store, out):
    path = _object_of(store, "big")
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.truncate(1 << 40)


def a_header_longer_than_its_file(store, out):
    path = _object_of(store, "a")
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[4:8] = (0xFFFFFFF0).to_bytes(4, "little")
    path.write_bytes(bytes(data))


def a_header_of_five_million_buffers(store, out):
    raw = _header_object({"codec": "numpy", "meta": {"dtype": "<f8", "shape": [0]}, "sizes": [0] * 5_000_000})
    _point(store, "a", _plant_bytes(store, raw))


def a_shape_that_overflows(store, out):
    raw = _header_object({"codec": "numpy", "meta": {"dtype": "|u1", "shape": [8, 2**61 + 1]}, "sizes": [8]},
                         b"\0" * 8)
    _point(store, "a", _plant_bytes(store, raw))


def buffer_sizes_beyond_the_file(store, out):
    raw = _header_object({"codec": "numpy", "meta": {"dtype": "|u1", "shape": [8]}, "sizes": [2**62, 2**62]})
    _point(store, "a", _plant_bytes(store, raw))


def a_manifest_of_3000_references_to_one_big_leaf(store, out):
    leaf = store.lookup("big")
    tree = ["l", *(["r", leaf] for _ in range(3000))]
    _point(store, "tree", _plant_encoded(store, Encoded(TREE, {"tree": tree}, [])))


def a_manifest_referencing_a_manifest(store, out):
    _point(store, "tree", _plant_encoded(store, Encoded(TREE, {"tree": ["l", ["r", store.lookup("tree")]]}, [])))


def forged_trees(store, out):
    for name, tree in (("a", ["i", "9" * 5000]), ("d/x", ["b", "numpy", {"dtype": "<f8"}, ["AAAA"]]),
                       ("n", ["r", 5])):
        _point(store, name, _plant_encoded(store, Encoded(TREE, {"tree": tree}, [])))


def _point(store, name, digest):
    path = store.path.joinpath("names", *name.split("/"))
    path.unlink()
    path.write_text(digest)


CASES = [
    tmp_links_out, names_links_out, objects_links_out, an_object_folder_links_out,
    a_name_folder_links_out, a_name_file_links_out, an_object_file_links_out,
    a_name_links_to_a_name_outside_by_relative_path, marker_links_out, runs_links_out,
    names_is_a_fifo, objects_is_a_fifo, marker_is_a_fifo, a_name_is_a_fifo, an_object_is_a_fifo,
    a_big_object_is_a_fifo, a_lock_is_a_fifo,
    marker_is_a_device, a_name_is_a_device, a_name_links_to_dev_zero, an_object_is_a_device,
    an_object_links_to_dev_zero,
    marker_is_a_folder, an_object_is_a_folder, objects_is_a_file, names_is_a_file, tmp_is_a_file,
    an_object_folder_is_a_file, a_name_is_huge, an_object_is_huge_and_sparse,
    a_header_longer_than_its_file, a_header_of_five_million_buffers, a_shape_that_overflows,
    buffer_sizes_beyond_the_file, a_manifest_of_3000_references_to_one_big_leaf,
    a_manifest_referencing_a_manifest, forged_trees,
]


def _snapshot(folder):
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("plant", CASES, ids=[c.__name__ for c in CASES])
def test_a_hostile_store_is_refused_cleanly_and_nothing_outside_is_touched(tmp_path, plant):
    store = _healthy(tmp_path)
    out = _outside(tmp_path)
    plant(store, out)
    before = _snapshot(out)
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(store.path), str(out), str(MEMORY_CAP)],
            capture_output=True, text=True, timeout=GUARD_S,
            env={**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{plant.__name__}: an operation hung (no answer in {GUARD_S} s)")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    broke = {op: how for op, how in report["outcomes"].items() if how.startswith("BROKE")}
    assert broke == {}, f"{plant.__name__}: {broke}"
    assert report["touched"] == [], f"{plant.__name__}: reached outside the store: {report['touched']}"
    assert _snapshot(out) == before  # nothing outside removed or changed
    # not vacuous: the hostile thing is noticed, by check() or by a refusal.
    # tmp/ and runs/ are never read here, so a FIFO or link there harms no
    # reader (and runs() lists nothing through it); 3,000 references to one
    # 2 MiB leaf are refused by recall (repeated_limit, see the tests below)
    noticed = report["found"] or any(how.startswith("refused") for how in report["outcomes"].values())
    assert noticed or plant in (a_lock_is_a_fifo, runs_links_out)


def test_a_leaf_referenced_3000_times_is_read_and_decoded_once(tmp_path):
    """Issue: each reference re-read and decoded its leaf (3.5 s, 2.9 GB for
    3,000 references to 1 MB). Now the references share one value, as they
    share one object: the test counts decodes through a codec of its own."""
    decoded = []

    class Counted:
        def __init__(self, b):
            self.b = b

    class CountedCodec:
        name = "test-counted"
        types = (Counted,)
        explicit = False

        def encode(self, v):
            return {}, [v.b]

        def decode(self, meta, buffers):
            decoded.append(1)
            return Counted(bytes(buffers[0]))

    from somatize import register_codec

    register_codec(CountedCodec())
    store = Store(tmp_path / "s")
    leaf = store.put(Counted(b"x" * 1000))
    tree = ["l", *(["r", leaf] for _ in range(3000))]
    digest = _plant_encoded(store, Encoded(TREE, {"tree": tree}, []))
    back = store.recall(digest)
    assert len(back) == 3000 and back[0].b == b"x" * 1000
    assert len(decoded) == 1 and all(item is back[0] for item in back)


def test_a_reference_bomb_is_refused_before_a_leaf_is_read_and_recalls_shared_when_allowed(tmp_path):
    """Issue 23: a manifest referring 4,000 times to one 1 MiB leaf would
    hand back 4 GiB to whatever copies the value. The recall counts that
    from the tree and the leaf's size first and refuses, naming the object
    and the limit to raise; raised, the 4,000 items are one value."""
    decoded = []

    class Counted:
        def __init__(self, b):
            self.b = b

    class CountedCodec:
        name = "test-counted-bomb"
        types = (Counted,)
        explicit = False

        def encode(self, v):
            return {}, [v.b]

        def decode(self, meta, buffers):
            decoded.append(1)
            return Counted(buffers[0])  # a view of the object's bytes, not a copy

    from somatize import register_codec

    register_codec(CountedCodec())
    store = Store(tmp_path / "s")
    leaf = store.put(Counted(b"x" * (1 << 20)))
    digest = _plant_encoded(store, Encoded(TREE, {"tree": ["l", *(["r", leaf] for _ in range(4000))]}, []))
    (store.path / "names" / "bomb").write_text(digest)
    with pytest.raises(SomatizeError) as refused:
        store.recall("bomb")
    said = str(refused.value)
    assert digest in said and "'bomb'" in said and "4,000 times" in said and "repeated_limit" in said
    assert decoded == []  # refused before the leaf was read or decoded
    raised = re.search(r"repeated_limit=(\d+) << 30\)$", said)  # the fix the message names
    back = store.recall("bomb", repeated_limit=int(raised.group(1)) << 30)
    assert len(back) == 4000 and len(decoded) == 1 and all(item is back[0] for item in back)
    assert bytes(back[0].b) == b"x" * (1 << 20)
    assert len(store.recall(digest, repeated_limit=None)) == 4000
    # a value repeating a small part is no bomb: recalled as kept, by default
    small = np.arange(1000.0)
    again = store.recall(store.put({"a": small, "b": [small] * 50}))
    assert all(x is again["a"] for x in again["b"]) and (again["a"] == small).all()


def test_opening_a_store_whose_tmp_links_out_removes_nothing_there(tmp_path):
    """Issue: Store(path) swept the folder tmp/ linked to, removing every file
    older than an hour out there."""
    store = _healthy(tmp_path)
    out = _outside(tmp_path)
    tmp_links_out(store, out)
    with pytest.raises(SomatizeError, match="tmp.*a link.*Remove it"):
        Store(store.path)
    assert sorted(p.name for p in out.iterdir()) == ["OUTSIDE-old-0", "OUTSIDE-old-1", "OUTSIDE-old-2"]
