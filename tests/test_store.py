"""The Store keeps values whole, refuses what it cannot keep, and never hands
back bytes it did not write."""

import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from as_nobody import as_nobody

from somatize import Store, register_codec
from somatize._base.errors import DamagedError, SomatizeError, SomatizeKeyError, SomatizeTypeError, SomatizeValueError
from somatize._base.files import MAP_AT as _MAP_AT
from somatize._store.objects import INLINE_MAX, Encoded
from somatize._store.store import as_store, digest_of

BIG = np.arange(INLINE_MAX, dtype=np.float64)  # larger than INLINE_MAX bytes: a leaf object of its own


def objects(store):
    return sorted(p for p in (store.path / "objects").rglob("*") if p.is_file())


def same(a, b):
    """Equal in value and in type, all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


SCALARS = [None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**63, 2**64 + 1, -(2**200), 1.5, -0.0, 1e-310,
           float("nan"), float("inf"), float("-inf"), "", "héllo ✓ \u2028", b"", b"\x00\xff" * 3]


@pytest.mark.parametrize("value", SCALARS, ids=repr)
def test_a_scalar_comes_back_as_it_was(store, value):
    store.keep("v", value)
    assert same(store.recall("v"), value)


ARRAYS = {
    "float64": np.linspace(-1, 1, 1000),
    "int8": np.arange(-100, 100, dtype=np.int8),
    "bool": np.arange(600) % 3 == 0,
    "complex": np.arange(100) * (1 + 2j),
    "0-d": np.array(3.25),
    "empty": np.empty((0, 3), np.float32),
    "2-d": np.arange(600.0).reshape(20, 30),
    "strided": np.arange(2000.0)[::3],
    "transposed": np.arange(600.0).reshape(20, 30).T,
    "big-endian f8": np.arange(500, dtype=">f8"),
    "big-endian i4": np.arange(500, dtype=">i4"),
    "unicode": np.array(["a", "bcd", "é"]),
    "small": np.array([1, 2, 3], np.uint16),
}


@pytest.mark.parametrize("name", ARRAYS)
def test_an_array_comes_back_with_its_dtype_shape_and_values(store, name):
    a = ARRAYS[name]
    store.keep("top", a)
    store.keep("nested", {"x": [a]})
    assert same(store.recall("top"), a)
    assert same(store.recall("nested")["x"][0], a)


def test_random_doubles_come_back_bit_for_bit(store):
    bits = np.random.default_rng(1).integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True)
    floats = [float(x) for x in bits.view(np.float64)]
    back = store.recall(store.put(floats))
    assert np.array_equal(np.array(back).view(np.uint64), np.array(floats).view(np.uint64))


def test_structures_keep_their_kinds_and_order(store):
    value = {"z": 1, "a": (1, (2, [3, {"k": ()}])), "m": [], "e": {}, "b": [None, (), [()]], "np": np.float32(2.5)}
    store.keep("v", value)
    back = store.recall("v")
    assert same(back, value)
    assert list(back) == ["z", "a", "m", "e", "b", "np"]


def test_subclasses_of_containers_come_back_as_their_base(store):
    from collections import OrderedDict, namedtuple

    Point = namedtuple("Point", "x y")
    back = store.recall(store.put(OrderedDict(b=Point(1, 2.0), a=[1])))
    assert type(back) is dict and type(back["b"]) is tuple
    assert back == {"b": (1, 2.0), "a": [1]} and list(back) == ["b", "a"]


def test_a_recalled_array_is_writable_and_writing_it_changes_nothing_kept(store):
    for size in (1000, _MAP_AT // 8 + 1000):  # read into memory, and mapped
        a = np.arange(size, dtype=np.float64)
        store.keep("a", a)
        back = store.recall("a")
        back[:] = -1
        assert same(store.recall("a"), a)
        assert store.check() == []


def test_a_recalled_array_outlives_its_store_folder(tmp_path):
    store = Store(tmp_path / "gone")
    a = np.arange(_MAP_AT // 8 * 2, dtype=np.float64)
    store.keep("a", {"w": a})
    back = store.recall("a")["w"]
    del store
    shutil.rmtree(tmp_path / "gone")
    assert np.array_equal(back, a)


def test_objects_are_read_only_files(store):
    store.keep("a", {"w": BIG, "n": 1})
    assert {p.stat().st_mode & 0o777 for p in objects(store)} == {0o444}


def test_parts_shared_by_two_values_are_stored_once(store):
    first = {"body": BIG, "head": np.ones(100)}
    store.keep("one", first)
    before = objects(store)
    assert len(before) == 3  # two leaves and a manifest
    store.keep("two", {"renamed": {"deeper": BIG.copy()}, "list": [BIG]})
    after = objects(store)
    assert len(after) == len(before) + 1  # only the new manifest
    assert sum(p.stat().st_size for p in after) < 2 * BIG.nbytes + 2 * 800 + 4096
    assert same(store.recall("two")["list"][0], BIG)


def test_keeping_one_value_twice_writes_nothing_new(store):
    d1 = store.keep("a", {"x": BIG})
    files = objects(store)
    mtimes = [p.stat().st_mtime_ns for p in files]
    d2 = store.keep("b", {"x": BIG.copy()})
    assert d1 == d2
    assert objects(store) == files and [p.stat().st_mtime_ns for p in files] == mtimes


def test_names_may_hold_slashes_and_list_sorted(store):
    for name in ("b-run/weights", "a-run/weights", "a-run/x/deep", "top"):
        store.keep(name, name)
    assert store.names() == ["a-run/weights", "a-run/x/deep", "b-run/weights", "top"]
    assert store.names(prefix="a-run/") == ["a-run/weights", "a-run/x/deep"]
    assert store.recall("a-run/x/deep") == "a-run/x/deep"


def test_keeping_a_name_again_moves_it(store):
    d1 = store.keep("n", 1)
    d2 = store.keep("n", 2)
    assert d1 != d2
    assert store.lookup("n") == d2 and store.recall("n") == 2
    assert store.recall(d1) == 1  # the old object stays


def test_lookup_answers_none_for_unknown_names(store):
    store.keep("a/b", 1)
    assert store.lookup("missing") is None
    assert store.lookup("a") is None  # a folder of names is not a name
    assert store.lookup("../x") is None


@pytest.mark.parametrize(
    "name, fix",
    [
        ("", 'write e.g. "a-run/weights"'),
        ("/abs/x", "write 'abs/x'"),
        ("a/../b", "cannot have '.' or '..'"),
        ("a//b", "write 'a/b'"),
        ("a/", "write 'a'"),
        ("a\x00b", "control characters"),
        ("a\\b", "write 'a/b'"),
        ("sha256:" + "0" * 64, "drop that prefix"),
        ("x" * 300, "at most 255 bytes"),
    ],
)
def test_a_bad_name_is_refused_with_the_fix(store, name, fix):
    with pytest.raises(SomatizeValueError, match="not allowed") as e:
        store.keep(name, 1)
    assert fix in str(e.value)
    assert objects(store) == []  # refused before anything was written


def test_a_name_cannot_also_be_a_folder_of_names(store):
    store.keep("a/b", 1)
    with pytest.raises(SomatizeValueError, match=r"'a'.*folder of names.*Pick another name"):
        store.keep("a", 2)
    store.keep("c", 1)
    with pytest.raises(SomatizeValueError, match=r"'c' is already a name.*'c-d'"):
        store.keep("c/d", 2)
    assert store.recall("a/b") == 1 and store.recall("c") == 1


def test_a_linked_folder_under_names_is_never_written_through(store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.path / "names" / "a").symlink_to(outside)
    with pytest.raises(DamagedError, match="is a link.*never writes through a link"):
        store.keep("a/b", 1)
    assert list(outside.iterdir()) == []


def test_an_unknown_name_suggests_close_ones(store):
    store.keep("a-run/weights", 1)
    store.keep("unrelated", 1)
    with pytest.raises(KeyError) as e:
        store.recall("a-run/weigths")
    assert isinstance(e.value, SomatizeKeyError)
    message = str(e.value)
    assert "'a-run/weights'" in message and "unrelated" not in message and "store.names()" in message


def test_an_unknown_or_malformed_digest_is_refused(store):
    with pytest.raises(SomatizeKeyError, match="no object sha256:0{64}"):
        store.recall("sha256:" + "0" * 64)
    with pytest.raises(SomatizeValueError, match="64 lowercase hex"):
        store.recall("sha256:ABC")


def test_a_value_without_a_codec_is_refused_with_how_to_register(store):
    class Thing:
        pass

    with pytest.raises(SomatizeTypeError) as e:
        store.keep("x", {"a": [1, Thing()]})
    assert "value['a'][1]" in str(e.value) and "register_codec" in str(e.value)
    with pytest.raises(SomatizeTypeError, match="register_codec"):
        store.keep("x", Thing())
    assert objects(store) == [] and store.names() == []


def test_values_that_cannot_be_trees_are_refused_clearly(store):
    with pytest.raises(SomatizeTypeError, match=r"key 1 .*str\(k\)"):
        store.keep("x", {1: "a"})
    cycle = [1]
    cycle.append(cycle)
    with pytest.raises(SomatizeValueError, match="contains itself"):
        store.keep("x", cycle)
    deep = []
    for _ in range(400):
        deep = [deep]
    with pytest.raises(SomatizeValueError, match="more than 200 levels deep.*flatten it"):
        store.keep("x", deep)
    for _ in range(250):
        deep = deep[0]
    assert store.recall(store.put(deep)) == deep  # 151 levels: kept
    with pytest.raises(SomatizeValueError, match="to_bytes"):
        store.keep("x", 10**5000)


def test_data_is_kept_as_its_value_and_opaque_is_refused(store):
    from somatize import Data, Opaque

    assert store.recall(store.keep("d", {"x": Data(BIG)}))["x"].tolist() == BIG.tolist()
    assert store.digest_of(Data(BIG)) == store.digest_of(BIG)
    with pytest.raises(SomatizeTypeError, match=r"value\['o'\] is an Opaque.*Data\(x\)"):
        store.keep("o", {"o": Opaque(BIG)})
    with pytest.raises(SomatizeTypeError, match="Opaque"):
        store.keep("o", Opaque(1))


def test_digest_of_is_what_put_returns_and_writes_nothing(store):
    values = [1, "x", {"a": BIG, "b": (1, float("nan"))}, BIG, b"abc" * 1000]
    digests = [store.digest_of(v) for v in values]
    assert objects(store) == []
    assert digests == [digest_of(v) for v in values]
    assert digests == [store.put(v) for v in values]
    assert len(set(digests)) == len(values)
    assert digest_of({"a": 1, "b": 2}) != digest_of({"b": 2, "a": 1})  # order is content


def test_link_points_a_name_at_a_kept_object(store):
    d = store.put({"w": BIG})
    store.link("runs-best", d)
    assert same(store.recall("runs-best"), {"w": BIG})
    with pytest.raises(SomatizeKeyError, match=r"store\.put\(value\)"):
        store.link("other", "sha256:" + "1" * 64)
    with pytest.raises(SomatizeValueError, match="64 lowercase hex"):
        store.link("other", "1234")
    assert store.lookup("other") is None


def flip_byte(path, offset):
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def leaf_path(store, digest):
    return store.path / "objects" / digest[7:9] / digest[9:]


@pytest.mark.parametrize("size", [2000, _MAP_AT // 8 + 10])
def test_a_damaged_part_raises_and_is_reported(store, size):
    a = np.arange(size, dtype=np.float64)
    store.keep("run/w", {"w": a})
    path = leaf_path(store, digest_of(a))
    flip_byte(path, path.stat().st_size // 2)
    with pytest.raises(DamagedError) as e:
        store.recall("run/w")
    assert str(path) in str(e.value) and "'run/w'" in str(e.value) and "check" in str(e.value)
    (problem,) = store.check()
    assert problem.startswith(str(path)) and "damaged" in problem


def test_a_damaged_manifest_raises_and_is_reported(store):
    d = store.keep("m", {"a": 1, "b": "text"})
    path = leaf_path(store, d)
    flip_byte(path, 20)
    with pytest.raises(DamagedError, match="'m'"):
        store.recall("m")
    with pytest.raises(DamagedError):
        store.recall(d)
    (problem,) = store.check()
    assert str(path) in problem


@pytest.mark.parametrize("keep", [1, 100, 4000])
def test_a_truncated_object_raises_and_is_reported(store, keep):
    d = store.keep("t", np.arange(1000.0))
    path = leaf_path(store, d)
    os.chmod(path, 0o644)
    os.truncate(path, keep)
    with pytest.raises(DamagedError, match="damaged"):
        store.recall("t")
    (problem,) = store.check()
    assert str(path) in problem


def test_keeping_again_repairs_a_truncated_object_and_a_deleted_damaged_one(store):
    a = np.arange(1000.0)
    d = store.keep("t", a)
    path = leaf_path(store, d)
    os.chmod(path, 0o644)
    os.truncate(path, 100)
    store.keep("t", a)
    assert same(store.recall("t"), a)
    flip_byte(path, 500)
    assert store.check()[0].endswith("delete it and keep the value again")
    path.unlink()
    store.keep("t", a)
    assert same(store.recall("t"), a) and store.check() == []


def test_a_dangling_name_and_a_missing_part_are_reported(store):
    store.keep("whole", {"w": BIG})
    d = store.keep("gone", np.ones(1000))
    leaf_path(store, d).unlink()
    (dangling,) = store.check()
    assert str(store.path / "names" / "gone") in dangling and "dangling" in dangling
    with pytest.raises(DamagedError, match="missing"):
        store.recall("gone")
    leaf_path(store, digest_of(BIG)).unlink()
    problems = store.check()
    assert any(digest_of(BIG) in p and "manifest" in p for p in problems)
    with pytest.raises(DamagedError, match=r"'whole', is missing"):
        store.recall("whole")


def test_check_reports_names_the_store_would_not_write(store):
    d = store.keep("good", 1)
    (store.path / "names" / "bad\tname").write_text(d)
    (store.path / "names" / "not-a-ref").write_text("hello")
    problems = store.check()
    assert len(problems) == 2
    assert any(str(store.path / "names" / "bad\tname") in p and "control characters" in p for p in problems)
    assert any(str(store.path / "names" / "not-a-ref") in p and "does not hold a digest" in p for p in problems)


def test_check_is_clean_on_a_sound_store_and_ignores_temp_files(store):
    for i in range(5):
        store.keep(f"run/{i}", {"i": i, "w": BIG * i})
    (store.path / "tmp" / "leftover-of-a-crash").write_bytes(b"half")
    assert store.check() == []


def test_stale_temp_files_are_swept_when_a_store_opens(store):
    tmp = store.path / "tmp"
    old, fresh = tmp / "old", tmp / "fresh"
    old.write_bytes(b"x")
    fresh.write_bytes(b"x")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    Store(store.path)
    assert not old.exists() and fresh.exists()


def test_an_object_with_an_unknown_codec_is_refused_by_name(store):
    obj = Encoded("no-such-codec", {}, [b"x" * 10])
    store._writer.write(obj)
    store.link("odd", obj.digest)
    with pytest.raises(SomatizeValueError, match="no codec named 'no-such-codec'"):
        store.recall("odd")


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


class PairCodec:
    name = "test-pair"
    types = (Pair,)
    explicit = False

    def encode(self, p):
        return {"a": p.a}, [p.b]

    def decode(self, meta, buffers):
        return Pair(meta["a"], bytes(buffers[0]))


def test_a_newly_registered_codec_needs_no_change_to_the_store(store):
    register_codec(PairCodec())
    store.keep("x", {"body": {"w": Pair(3, b"q" * 1000)}, "small": Pair(4, b"s")})
    back = store.recall("x")
    assert (back["body"]["w"].a, back["body"]["w"].b) == (3, b"q" * 1000)
    assert (back["small"].a, back["small"].b) == (4, b"s")


def test_tensors_are_kept_tensor_by_tensor_once_the_torch_codec_is_registered(store):
    torch = pytest.importorskip("torch")
    import somatize.torch  # noqa: F401  registers the codec

    body = torch.arange(1000, dtype=torch.float32)
    d1 = store.keep("one", {"body": {"w": body}, "head": {"w": torch.ones(3)}})
    n = len(objects(store))
    store.keep("two", {"body": {"w": body.clone()}, "head": {"w": torch.zeros(3)}})
    assert len(objects(store)) == n + 1  # the shared body is stored once
    back = store.recall(d1)
    assert torch.equal(back["body"]["w"], body) and back["body"]["w"].dtype == torch.float32


def test_store_takes_str_or_path_and_shows_it(tmp_path):
    s1 = Store(str(tmp_path / "s"))
    s2 = Store(tmp_path / "s")
    assert s1.path == s2.path == tmp_path / "s"
    assert str(tmp_path / "s") in repr(s1)
    assert as_store(s1) is s1 and as_store(tmp_path / "s").path == s1.path
    with pytest.raises(SomatizeTypeError, match="Store or a path"):
        as_store(3)
    assert (tmp_path / "s" / "SOMATIZE").read_bytes() == b'{"format":2}'


def test_a_file_is_not_a_store(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"")
    with pytest.raises(SomatizeValueError, match=f"{f}'.*is a file.*folder"):
        Store(f)
    with pytest.raises(SomatizeValueError, match=f"'{f}' is a file"):
        Store(f / "below")


def test_a_folder_of_other_files_is_not_made_a_store(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SomatizeValueError, match=r"notes\.txt.*not a store.*Store\("):
        Store(tmp_path)
    assert not (tmp_path / "objects").exists()


def test_hidden_files_do_not_stop_a_folder_becoming_a_store(tmp_path):
    (tmp_path / ".ipynb_checkpoints").mkdir()
    Store(tmp_path).keep("x", 1)
    assert Store(tmp_path).recall("x") == 1


def test_a_store_of_another_format_is_refused(tmp_path):
    Store(tmp_path)
    (tmp_path / "SOMATIZE").write_bytes(b'{"format": 3}')
    with pytest.raises(SomatizeValueError, match="format 3.*Upgrade"):
        Store(tmp_path)


def test_a_store_of_format_1_is_read_and_marked_2_once_written_into(tmp_path):
    """Objects are SMZ2 now, which somatize of format 1 would call damaged
    (advising to delete them): opening such a store to write marks it 2, so
    an older somatize refuses it, saying to upgrade."""
    import struct

    import orjson
    import xxhash

    store = Store(tmp_path)
    header = orjson.dumps({"codec": "numpy", "meta": {"dtype": "<f8", "shape": [2]}, "sizes": [16]})
    head = b"SMZ1" + struct.pack("<I", len(header)) + header
    body = head + bytes(-len(head) % 64) + np.array([1.0, 2.0]).tobytes() + bytes(48)
    whole = body + xxhash.xxh3_128(body).digest()  # format 1: no digest at the end
    digest = "sha256:" + hashlib.sha256(whole).hexdigest()
    store._object_path(digest).parent.mkdir(parents=True, exist_ok=True)
    store._object_path(digest).write_bytes(whole)
    store.link("old", digest)
    (tmp_path / "SOMATIZE").write_bytes(b'{"format": 1}')
    assert Store(tmp_path, readonly=True).recall("old").tolist() == [1.0, 2.0]
    assert (tmp_path / "SOMATIZE").read_bytes() == b'{"format": 1}'  # reading writes nothing
    assert Store(tmp_path).recall("old").tolist() == [1.0, 2.0]
    assert (tmp_path / "SOMATIZE").read_bytes() == b'{"format":2}'
    assert Store(tmp_path).check() == []


NOT_WRITABLE = """
import sys
from somatize import Store
try:
    Store(sys.argv[1])
except PermissionError as e:
    print(type(e).__name__, e)
"""


@pytest.fixture
def public_dir():
    """A folder an ordinary user can reach (pytest's base temp is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="somatize-test-"))
    base.chmod(0o755)
    yield base
    for p in base.rglob("*"):
        p.chmod(0o755)
    shutil.rmtree(base)


@pytest.mark.parametrize("where", ["locked", "locked/below"])
def test_a_folder_that_cannot_be_written_is_refused_by_path(public_dir, where):
    (public_dir / "locked").mkdir(mode=0o555)
    target = public_dir / where
    done = as_nobody("-c", NOT_WRITABLE, target)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("StoreNotWritable") and str(target) in out and "you can" in out


def test_errors_belong_to_the_family(store):
    with pytest.raises(SomatizeError):
        store.recall("nothing")


def test_an_empty_folder_from_mkdtemp_becomes_a_store(public_dir):
    empty = Path(tempfile.mkdtemp(dir=public_dir))
    Store(empty).keep("x", 1)
    assert Store(empty).recall("x") == 1


def test_the_refusal_of_someone_elses_folder_says_why_and_what_to_pass(tmp_path):
    (tmp_path / "a.csv").write_text("1,2")
    with pytest.raises(SomatizeValueError) as e:
        Store(tmp_path)
    message = str(e.value)
    assert "a.csv" in message and "SOMATIZE" in message
    assert repr(str(tmp_path / "store")) in message  # a folder that would work
    Store(tmp_path / "store")  # and it does


def snapshot(root):
    """Every path under ``root`` with its bytes and mtime: any write shows."""
    return {p: (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_a_readonly_store_reads_everything_and_writes_nothing(tmp_path):
    store = Store(tmp_path / "s")
    store.keep("run/w", {"w": BIG, "n": 1})
    stale = store.path / "tmp" / "old-leftover"
    stale.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200,) * 2)  # opening a writable store would sweep it
    before = snapshot(store.path)

    reader = Store(store.path, readonly=True)
    assert same(reader.recall("run/w"), {"w": BIG, "n": 1})
    assert reader.names() == ["run/w"] and reader.check() == []
    assert "readonly=True" in repr(reader)
    assert snapshot(store.path) == before


@pytest.mark.parametrize("call", [lambda s: s.keep("a", 1), lambda s: s.put(1),
                                  lambda s: s.link("a", "sha256:" + "0" * 64)])
def test_a_readonly_store_refuses_to_keep_naming_the_writable_form(tmp_path, call):
    path = tmp_path / "s"
    Store(path)
    before = snapshot(path)
    with pytest.raises(PermissionError) as e:
        call(Store(path, readonly=True))
    assert isinstance(e.value, SomatizeError) and f"Store({str(path)!r})" in str(e.value)
    assert snapshot(path) == before


def test_readonly_opens_only_a_store_that_exists(tmp_path):
    with pytest.raises(SomatizeValueError, match=r"no such folder.*drop readonly=True"):
        Store(tmp_path / "nothing", readonly=True)
    (tmp_path / "plain").mkdir()
    with pytest.raises(SomatizeValueError, match=r"no SOMATIZE marker.*Store\(path\) made"):
        Store(tmp_path / "plain", readonly=True)
    assert not (tmp_path / "nothing").exists() and list((tmp_path / "plain").iterdir()) == []


READ_AS_NOBODY = """
import sys
from somatize import Store
try:
    Store(sys.argv[1])
except PermissionError as e:
    print("refused:", e)
print("recalled:", Store(sys.argv[1], readonly=True).recall("x"))
"""


def test_a_store_one_may_only_read_opens_readonly(public_dir):
    path = public_dir / "theirs"
    Store(path).keep("x", 42)
    for p in [path, *path.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    done = as_nobody("-c", READ_AS_NOBODY, path)
    assert done.returncode == 0, done.stderr
    refused, recalled = done.stdout.splitlines()
    assert "readonly=True" in refused and str(path) in refused
    assert recalled == "recalled: 42"


# ---- large objects go around the page cache ------------------------------------------


def _odd_big_array(seed):
    # 9 MiB + 13 floats: over the O_DIRECT threshold, and not a whole number
    # of 4 KiB blocks, so the last block is padded and the file cut back
    return np.random.default_rng(seed).random((9 << 20) // 8 + 13)


def test_a_large_object_written_around_the_page_cache_reads_back_whole(tmp_path):
    from somatize._base import files as _files

    a = _odd_big_array(0)
    assert a.nbytes >= _files.DIRECT_AT
    store = Store(tmp_path / "s")
    digest = store.keep("big", a)
    path = store._object_path(digest)
    assert np.array_equal(store.recall("big"), a)
    data = path.read_bytes()  # the digest covers all but the last 32 bytes, which repeat it
    assert "sha256:" + hashlib.sha256(data[:-32]).hexdigest() == digest and data[-32:].hex() == digest[7:]
    assert store.check() == []
    assert list((tmp_path / "s" / "tmp").iterdir()) == []


def test_without_o_direct_a_large_keep_takes_the_buffered_path(tmp_path, monkeypatch):
    # macOS has no O_DIRECT; Linux file systems that refuse it fail the open
    # the same way (write_temp_direct returns None either way)
    from somatize._base import files as _files

    a = _odd_big_array(1)
    with_direct = Store(tmp_path / "direct").keep("big", a)
    monkeypatch.delattr(os, "O_DIRECT")
    assert _files.write_temp_direct(tmp_path, [b"x"]) is None
    store = Store(tmp_path / "s")
    assert store.keep("big", a) == with_direct  # the same bytes either way
    assert np.array_equal(store.recall("big"), a)
    assert store.check() == []


def test_an_object_naming_an_object_dtype_is_refused_not_unpickled(tmp_path):
    store = Store(tmp_path)
    obj = Encoded("numpy", {"dtype": "|O", "shape": [1]}, [b"\0" * 8])
    digest = obj.seal()
    path = store._object_path(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(bytes(p) for p in obj.parts))
    with pytest.raises(DamagedError, match=r"dtype '\|O'.*never.*pickle"):
        store.recall(digest)


def test_a_store_lists_its_runs(tmp_path):
    from somatize import Recorder

    store = Store(tmp_path)
    assert store.runs() == []
    for run in ("b-run", "a-run"):
        with Recorder(store, run=run) as r:
            r({"fact": "x", "value": 1.0})
    store.keep("a-run/weights", {"w": 1})  # a name that looks like a run is not a run
    assert store.runs() == ["a-run", "b-run"]
    assert Store(tmp_path, readonly=True).runs() == ["a-run", "b-run"]


def test_many_data_wrapped_leaves_each_keep_their_own_bytes(tmp_path):
    # Data(t) unwraps to a temporary per leaf; a temporary's id is reused once
    # it is freed, so leaves must never be told apart by id alone
    class Temp:
        def __init__(self, v):
            self.v = v

    class TempCodec:
        name = "test-temp"
        types = (Temp,)
        explicit = True

        def encode(self, value):
            return {}, [value.v]

        def decode(self, meta, buffers):
            return Temp(np.frombuffer(buffers[0], np.float64).copy())

        def as_data(self, value):
            return Temp(value.v.copy())  # a new object every time, as tensor.detach()

    from somatize import Data

    register_codec(TempCodec())
    big = INLINE_MAX // 8 + 1
    value = {f"k{i}": Data(Temp(np.full(big, float(i)))) for i in range(6)}
    store = Store(tmp_path)
    back = store.recall(store.keep("many", value))
    assert [float(back[f"k{i}"].v[0]) for i in range(6)] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    as_list = store.recall(store.keep("list", [Data(Temp(np.full(big, float(i)))) for i in range(6)]))
    assert [float(t.v[0]) for t in as_list] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _plant(store, codec, meta, buffers):
    """A well-formed object (right checksum, right name) with whatever header
    a hostile or buggy writer chose."""
    obj = Encoded(codec, meta, buffers)
    digest = obj.seal()
    path = store._object_path(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(bytes(p) for p in obj.parts))
    return digest


@pytest.mark.parametrize("meta, payload", [
    ({"dtype": "<f8", "shape": [1000]}, b"\0" * 8),     # says more than it holds
    ({"dtype": "<f8", "shape": [-1]}, b"\0" * 8),       # a shape numpy would infer
    ({"dtype": "<f8", "shape": "x"}, b"\0" * 8),
])
def test_an_array_whose_header_disagrees_with_its_bytes_is_refused(tmp_path, meta, payload):
    store = Store(tmp_path)
    with pytest.raises(DamagedError, match="not written by somatize or is damaged"):
        store.recall(_plant(store, "numpy", meta, [payload]))


def test_a_manifest_nested_too_deep_is_damaged_not_a_recursion_error(tmp_path):
    from somatize._store.objects import MAX_DEPTH, TREE

    tree = ["l", 1]
    for _ in range(MAX_DEPTH + 5):
        tree = ["l", tree]
    store = Store(tmp_path)
    with pytest.raises(DamagedError, match="nested more than"):
        store.recall(_plant(store, TREE, {"tree": tree}, []))


@pytest.mark.parametrize("size", [100, 2 << 20])  # read whole / mapped
def test_an_object_file_copied_over_another_is_named_by_check(tmp_path, size):
    store = Store(tmp_path)
    a = store.keep("a", np.full(size // 8, 1.0))
    b = store.keep("b", np.full(size // 8, 2.0))
    shutil.copyfile(store._object_path(a), store._object_path(b))
    problems = store.check()
    assert len(problems) == 1 and str(store._object_path(b)) in problems[0]
    # a small object is re-hashed on every recall; a large one (mapped, only
    # its checksum verified) carries its digest in its last 32 bytes
    with pytest.raises(DamagedError, match="another object's bytes"):
        store.recall("b")


# ---- decoding errors: damage, or a codec's own -----------------------------------------


class Fussy:
    def __init__(self, b):
        self.b = b


class FussyCodec:
    """A user's codec whose decode has a bug: it raises on sound bytes."""

    name = "test-fussy"
    types = (Fussy,)
    explicit = False

    def encode(self, v):
        return {}, [v.b]

    def decode(self, meta, buffers):
        raise TypeError("fussy cannot read this")


@pytest.mark.parametrize("shape", ["bare", "in a dict"])
def test_a_user_codecs_own_exception_is_its_own_not_store_damage(tmp_path, shape):
    """Issue 7: a TypeError inside a user codec's decode was reported as a
    damaged manifest, with advice to delete sound data."""
    from somatize._base.errors import CodecError

    register_codec(FussyCodec())
    store = Store(tmp_path)
    value = Fussy(b"x" * 1000)
    digest = store.keep("f", value if shape == "bare" else {"f": value})
    with pytest.raises(CodecError) as raised:
        store.recall("f")
    message = str(raised.value)
    assert not isinstance(raised.value, DamagedError)
    assert "'test-fussy'" in message and "TypeError" in message and "'f'" in message
    assert "delete" not in message  # nothing to repair: the bytes are whole
    assert isinstance(raised.value.__cause__, TypeError)
    assert store.check() == [] and digest


@pytest.mark.parametrize("codec, meta, buffers", [
    ("bytes", {}, [b"a", b"b"]),            # two buffers where one belongs
    ("bytes", {}, []),
    ("numpy", {"shape": [1]}, [b"\0"]),     # no dtype
    ("numpy", ["not", "a", "dict"], [b"\0"]),
    ("numpy", {"dtype": "|u1", "shape": [1]}, [b"\0", b"\0"]),
    ("numpy", {"dtype": "|u1", "shape": [1] * 100}, [b"\0"]),   # more dimensions than numpy has
    ("numpy-scalar", {}, [b"\0"]),
])
def test_a_forged_object_of_a_builtin_codec_is_damaged_not_a_bare_error(tmp_path, codec, meta, buffers):
    store = Store(tmp_path)
    digest = _plant(store, codec, meta, buffers)
    with pytest.raises(DamagedError, match=f"{digest[7:]}.*damaged.*store.check"):
        store.recall(digest)


def test_a_shape_whose_size_overflows_64_bits_is_damaged(tmp_path):
    """Issue: [8, 2**61 + 1] wrapped around in np.prod to 8 and passed the size check."""
    store = Store(tmp_path)
    digest = _plant(store, "numpy", {"dtype": "|u1", "shape": [8, 2**61 + 1]}, [b"\0" * 8])
    with pytest.raises(DamagedError, match="shape"):
        store.recall(digest)


def test_a_header_declaring_millions_of_buffers_is_refused_by_its_count(tmp_path):
    from somatize._store.objects import MAX_BUFFERS

    store = Store(tmp_path)
    digest = _plant(store, "bytes", {}, [b""] * (MAX_BUFFERS + 1))
    with pytest.raises(DamagedError, match=f"{MAX_BUFFERS + 1:,} buffers"):
        store.recall(digest)


# ---- names from users ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a/" * 3000 + "x", "b" * 256, "é" * 128, "x/" + "y" * 300])
def test_a_name_too_long_is_refused_saying_the_limit(store, name):
    with pytest.raises(SomatizeValueError, match="at most (255|1024) bytes"):
        store.keep(name, 1)
    assert store.lookup(name) is None
    with pytest.raises(SomatizeValueError, match="at most"):
        store.recall(name)


def test_names_refuses_a_prefix_that_is_not_text(store):
    with pytest.raises(SomatizeTypeError, match="names\\(prefix=\\) takes a str.*int"):
        store.names(prefix=5)


def test_a_name_is_one_name_in_either_unicode_normalisation(store):
    import unicodedata

    composed, decomposed = unicodedata.normalize("NFC", "café/é"), unicodedata.normalize("NFD", "café/é")
    assert composed != decomposed
    store.keep(decomposed, 1)
    assert store.recall(composed) == 1 and store.lookup(composed) == store.lookup(decomposed)
    store.keep(composed, 2)
    assert store.recall(decomposed) == 2
    assert store.names() == [composed] and store.names(prefix=unicodedata.normalize("NFD", "café")) == [composed]


# ---- one reading of "a Store or a path" -------------------------------------------------


def test_store_root_reads_a_path_without_making_a_store(tmp_path):
    from somatize._store.names import MARKER, store_root

    with pytest.raises(SomatizeValueError, match=f"not a somatize store.*{MARKER}"):
        store_root(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()
    s = Store(tmp_path / "s")
    assert store_root(tmp_path / "s") == s.path == store_root(s)
    with pytest.raises(SomatizeTypeError, match="store= takes a Store or a path"):
        store_root(3)


def test_as_store_opens_a_path_once_and_heals_a_deleted_store(tmp_path):
    """A path is opened once per process; deleting the store's folder under
    that Store (a notebook cleaning up) makes the next keep make it again,
    not fail with a bare FileNotFoundError."""
    path = tmp_path / "s"
    first = as_store(path)
    assert as_store(str(path)) is first and as_store(first) is first
    first.keep("x", 1)
    shutil.rmtree(path)
    assert first.lookup("x") is None
    first.keep("x", 2)
    assert first.recall("x") == 2 and first.check() == []
    shutil.rmtree(path / "tmp")
    first.keep("y", np.arange(10_000.0))
    assert first.recall("y")[-1] == 9999.0


def test_direct_io_is_a_switch_and_both_ways_write_the_same_object(tmp_path):
    a = _odd_big_array(2)
    direct = Store(tmp_path / "direct", direct_io=True)
    buffered = Store(tmp_path / "buffered", direct_io=False)
    assert direct.keep("big", a) == buffered.keep("big", a)
    assert np.array_equal(buffered.recall("big"), a) and buffered.check() == []
    code = "import sys; from somatize import Store; print(Store(sys.argv[1]).backend.direct_io)"
    for env, want in (("0", "False"), ("1", "True")):
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "env")], capture_output=True,
                             text=True, check=True, env={**os.environ, "SOMATIZE_DIRECT_IO": env}).stdout
        assert out.strip() == want


def test_check_names_a_manifest_that_references_a_manifest(tmp_path):
    from somatize._store.objects import TREE

    store = Store(tmp_path)
    inner = store.put({"x": np.arange(100.0)})
    outer = _plant(store, TREE, {"tree": ["l", ["r", inner]]}, [])
    problems = store.check()
    assert len(problems) == 1 and outer[7:] in problems[0].replace("/", "") and "another manifest" in problems[0]


def test_somatize_check_on_a_store_whose_marker_is_garbage_reports_it(tmp_path):
    Store(tmp_path / "s")
    (tmp_path / "s" / "SOMATIZE").write_bytes(b"not json")
    completed = subprocess.run([sys.executable, "-m", "somatize.cli", "check", str(tmp_path / "s")],
                               capture_output=True, text=True, timeout=60)
    assert completed.returncode == 1 and "Traceback" not in completed.stderr
    assert "SOMATIZE" in completed.stdout and "could not be opened" in completed.stdout


def test_a_name_kept_unnormalised_by_an_older_somatize_is_still_found(store):
    import unicodedata

    decomposed = unicodedata.normalize("NFD", "café")
    digest = store.put(3)
    (store.path / "names" / decomposed).write_text(digest)  # as written before names were NFC
    assert store.recall(decomposed) == 3 and store.lookup(decomposed) == digest


def test_tmp_replaced_by_a_link_after_opening_is_never_written_through(store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(store.path / "tmp")
    (store.path / "tmp").symlink_to(outside)
    with pytest.raises(DamagedError, match="tmp.*a link"):
        store.keep("x", np.arange(1000.0))
    assert list(outside.iterdir()) == []


def test_runs_lists_no_folder_through_a_link(tmp_path):
    store = Store(tmp_path / "s")
    outside = tmp_path / "outside"
    (outside / "elsewhere").mkdir(parents=True)
    (store.path / "runs").symlink_to(outside)
    assert store.runs() == []
    (store.path / "runs").unlink()
    (store.path / "runs" / "a-run").mkdir(parents=True)
    (store.path / "runs" / "linked-run").symlink_to(outside / "elsewhere")
    assert store.runs() == ["a-run"]
