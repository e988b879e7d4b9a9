"""What the tensor codec promises beyond round trips: the digest of a big
tensor reads its memory in place (no copy), and nothing loaded from a store
can run code, whoever wrote the store."""

import ast
import pathlib
import subprocess
import sys

import pytest
import torch

import somatize
import somatize.torch  # noqa: F401
from somatize import SomatizeError, Store
from somatize._store.objects import Encoded, digest_in

MIB = 1 << 20

# Run in a fresh process, with its peak resident memory reset (Linux's
# clear_refs) just before the digest, so the peak is about this one job: a
# tensor of 128 MiB, every page touched, then its digest.
PEAK = r"""
import re, sys
import torch
import somatize.torch
from somatize import Graph, Node, Opaque, Store
from somatize.torch._codec import digest_tensors

class Total(Node):
    def forward(self, x, ctx):
        return float(x.sum())

how, folder = sys.argv[1], sys.argv[2]
t = torch.ones(32 << 20)  # 128 MiB of float32
if how == "transposed":  # a control: this one has to be copied to be read in C order
    t = t.view(4096, -1).t()
store = Store(folder)
g = Graph.somatize(Total().named("total").frozen().cached())
small = torch.ones(4)
digest_tensors({"w": small}), store.digest_of(small), g.forward(Opaque(small), store=store)  # warm

def status(key):
    return int(re.search(key + r":\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from what is resident now
before = status("VmRSS")
if how in ("freeze", "transposed"):
    digest_tensors({"w": t})  # what freeze(g) takes of a node's weights
else:
    g.forward(Opaque(t), store=store)  # a cached node keys on its input's digest
print(status("VmHWM") - before)
"""


def grown(how, tmp_path):
    out = subprocess.run([sys.executable, "-c", PEAK, how, str(tmp_path / "s")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.parametrize("how", ["freeze", "cache key"])
def test_the_digest_of_a_big_tensor_copies_nothing(how, tmp_path):
    assert grown(how, tmp_path) < 16 * MIB  # a copy would be 128 MiB


def test_the_memory_probe_sees_a_copy(tmp_path):
    # the control that makes the test above mean something
    assert grown("transposed", tmp_path) > 100 * MIB


def plant(store, name, data):
    """Put raw bytes into the store as a well-formed object under `name`,
    as a hostile writer of the folder could."""
    digest = digest_in(data)  # sha256 of the bytes, but a well-formed object's last 32
    path = store._object_path(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    ref = store.path / "names" / name
    ref.write_text(digest)
    return digest


def well_formed(codec, meta, payload):
    obj = Encoded(codec, meta, [payload])
    obj.seal()  # appends the checksum trailer
    return b"".join(bytes(p) for p in obj.parts)


def test_nothing_recalled_from_a_store_runs_code(tmp_path):
    marker = tmp_path / "ran"
    store = Store(tmp_path / "s")
    # a pickle stream (protocol 0, written by hand) that would call os.system
    plant(store, "pickled", f"cos\nsystem\n(S'touch {marker}'\ntR.".encode())
    plant(store, "by-pickle", well_formed("pickle", {}, f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()))
    plant(store, "dtype", well_formed("torch", {"dtype": "os.system", "shape": [1]}, b"\0" * 8))
    why = {"pickled": "not a somatize object", "by-pickle": "no codec named 'pickle'",
           "dtype": "not one the torch codec wrote"}
    for name, says in why.items():
        with pytest.raises(SomatizeError, match=says):
            Store(tmp_path / "s").recall(name)
    assert not marker.exists()


def test_a_planted_tensor_object_reads_back(tmp_path):
    # the same planting path with an honest header: the refusals above are
    # about what the objects say, not about how they were planted
    store = Store(tmp_path / "s")
    t = torch.arange(6, dtype=torch.int16).reshape(2, 3)
    plant(store, "honest", well_formed("torch", {"dtype": "int16", "shape": [2, 3]}, t.numpy().tobytes()))
    assert torch.equal(store.recall("honest"), t)


UNSAFE_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "shelve", "marshal", "joblib"}


def unsafe_calls(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in UNSAFE_MODULES:
                    yield f"{node.lineno}: import {a.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in UNSAFE_MODULES:
            yield f"{node.lineno}: from {node.module} import"
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            words = {k.arg: k.value for k in node.keywords}
            if name in ("eval", "exec"):
                yield f"{node.lineno}: {name}("
            if name == "load" and isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "torch":
                w = words.get("weights_only")
                if not (isinstance(w, ast.Constant) and w.value is True):
                    yield f"{node.lineno}: torch.load without weights_only=True"
            if "allow_pickle" in words and not (isinstance(words["allow_pickle"], ast.Constant)
                                                and words["allow_pickle"].value is False):
                yield f"{node.lineno}: allow_pickle"


def test_the_package_never_unpickles_or_evaluates():
    root = pathlib.Path(somatize.__file__).parent
    found = [f"{p.relative_to(root)}:{w}" for p in root.rglob("*.py") for w in unsafe_calls(p)]
    assert found == []


def test_the_scan_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle\nimport torch\ntorch.load(f)\nnp.load(f, allow_pickle=True)\neval('1')\n")
    assert len(list(unsafe_calls(bad))) == 4
