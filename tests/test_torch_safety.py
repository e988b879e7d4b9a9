"""What the tensor codec promises beyond round trips: the digest of a big
tensor reads its memory in place (no copy), and nothing loaded from a store
can run code, whoever wrote the store."""

import ast
import hashlib
import json
import pathlib
import struct
import subprocess
import sys

import pytest
import torch
import xxhash

import somatize
import somatize.torch  # noqa: F401
from somatize import SomatizeError, Store

MIB = 1 << 20

# Run in a fresh process, with its peak resident memory reset (Linux's
# clear_refs) just before the digest, so the peak is about this one job: a
# tensor of 128 MiB, every page touched, then its digest.
PEAK = r"""
import re, sys
import torch
import somatize.torch
from somatize import Graph, Node, Opaque, Store
from somatize.torch import freeze

class Total(Node):
    def forward(self, x, ctx):
        return float(x.sum())

class Hold(Node):
    def __init__(self, w):
        self.w = w

    def forward(self, x, ctx):
        return x

how, folder = sys.argv[1], sys.argv[2]
t = torch.ones(32 << 20)  # 128 MiB of float32
if how == "transposed":  # a control: this one has to be copied to be read in C order
    t = t.view(4096, -1).t()
store = Store(folder)
g = Graph.somatize(Total().named("total").frozen().cached())
small = torch.ones(4)
freeze(Graph.somatize(Hold(small).named("w").frozen()))  # warm
store.digest_of(small), g.forward(Opaque(small), store=store)
held = Graph.somatize(Hold(t).named("w").frozen())

def status(key):
    return int(re.search(key + r":\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from what is resident now
before = status("VmRSS")
if how in ("freeze", "transposed"):
    freeze(held)  # takes the digest of the node's weights
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
    """Put raw bytes into the store's folder as an object named `name`, as a
    hostile writer of the folder could, following the documented layout:
    objects/ab/<62 hex> and names/<name> holding "sha256:<64 hex>"."""
    hexdigest = hashlib.sha256(data).hexdigest()
    path = store.path / "objects" / hexdigest[:2] / hexdigest[2:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    (store.path / "names" / name).write_text("sha256:" + hexdigest)


def well_formed(codec, meta, payload):
    """An object's bytes, written by hand from the format somatize/_store/objects.py
    documents: SMZ1, the header's length, the JSON header, padding to 64, the
    buffer, padding, and the xxh3_128 of all of it."""
    header = json.dumps({"codec": codec, "meta": meta, "sizes": [len(payload)]}).encode()
    head = b"SMZ1" + struct.pack("<I", len(header)) + header
    body = head + bytes(-len(head) % 64) + payload + bytes(-len(payload) % 64)
    return body + xxhash.xxh3_128(body).digest()


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
