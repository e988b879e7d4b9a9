"""The tensor codec: every dtype and shape round-trips bit for bit, bytes are
read in place, decoding runs nothing named by the data, and tensors cross
edges only as Opaque or Data."""

import numpy as np
import pytest
import torch

import somatize.torch  # noqa: F401
from somatize import Data, Graph, Node, Opaque, SomatizeError, Store
from somatize._base.codecs import codec_for
from somatize.torch._codec import digest_tensors

CODEC = codec_for(torch.zeros(1))


def roundtrip(t):
    meta, buffers = CODEC.encode(t)
    # what a Store hands back: read-only bytes
    return CODEC.decode(meta, [memoryview(bytes(b)) for b in buffers])


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.reshape(-1).view(torch.uint8).tolist() == b.contiguous().reshape(-1).view(torch.uint8).tolist()


DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
    torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_bit_for_bit(dtype):
    t = (torch.randn(3, 5, dtype=torch.float64) * 50).to(dtype)
    same(roundtrip(t), t)


@pytest.mark.parametrize(
    "t",
    [
        torch.tensor(3.5),
        torch.zeros(0, 3),
        torch.zeros(2, 0, dtype=torch.bfloat16),
        torch.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1),  # non-contiguous
        torch.arange(20)[::3],  # strided
        torch.arange(12.0).reshape(3, 4)[:, 1:3],
        torch.randn(4, dtype=torch.complex64).conj(),  # lazy conjugate bit
        torch.randn(4).neg(),
        torch.randn(3, 3).expand(2, 3, 3),  # stride 0
    ],
    ids=["0-d", "empty", "empty-bf16", "permuted", "strided", "sliced", "conj", "neg", "expanded"],
)
def test_shapes_and_layouts_round_trip(t):
    back = roundtrip(t)
    assert back.is_contiguous()
    torch.testing.assert_close(back, t.resolve_conj(), rtol=0, atol=0)


def test_bfloat16_keeps_its_exact_bits_including_nan_payloads():
    bits = torch.tensor([0x7FC1, 0x7F81, -1, 0, 1, 0x3F80], dtype=torch.int16)
    t = bits.view(torch.bfloat16)
    assert torch.equal(roundtrip(t).view(torch.int16), bits)


def test_decoded_tensor_is_writable_and_owns_its_memory():
    raw = bytearray(torch.arange(4, dtype=torch.float32).numpy().tobytes())
    back = CODEC.decode({"dtype": "float32", "shape": [4]}, [memoryview(bytes(raw))])
    back.add_(1)  # a read-only source would warn (an error here) or crash
    assert back.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_encoding_a_contiguous_tensor_reads_its_memory_in_place():
    t = torch.randn(256, 256)
    _, (buf,) = CODEC.encode(t)
    assert np.asarray(buf).__array_interface__["data"][0] == t.data_ptr()
    bf = torch.randn(64, dtype=torch.bfloat16)
    _, (buf,) = CODEC.encode(bf)
    assert np.asarray(buf).__array_interface__["data"][0] == bf.data_ptr()


def test_encoding_cuts_autograd_and_parameters_decode_as_plain_tensors():
    p = torch.nn.Parameter(torch.randn(3))
    back = roundtrip(p)
    assert type(back) is torch.Tensor and not back.requires_grad
    assert torch.equal(back, p.detach())


@pytest.mark.parametrize(
    "meta,size",
    [
        ({"dtype": "object", "shape": [1]}, 8),
        ({"dtype": "os.system", "shape": [1]}, 8),
        ({"dtype": "float32"}, 4),
        ({"dtype": "float32", "shape": [3]}, 8),  # too few bytes
        ({"dtype": "float32", "shape": ["x"]}, 4),
    ],
)
def test_decoding_refuses_headers_it_did_not_write(meta, size):
    with pytest.raises(SomatizeError) as e:
        CODEC.decode(meta, [memoryview(bytes(size))])
    assert isinstance(e.value, ValueError)


def test_sparse_tensors_are_refused_with_what_to_write():
    with pytest.raises(SomatizeError, match="to_dense"):
        CODEC.encode(torch.eye(3).to_sparse())


def test_digest_depends_on_bytes_dtype_shape_and_names():
    a = torch.arange(6, dtype=torch.int32)
    base = digest_tensors({"w": a})
    assert base == digest_tensors({"w": a.clone()})
    assert base.startswith("sha256:")
    others = [
        digest_tensors({"w": a.reshape(2, 3)}),
        digest_tensors({"w": a.view(torch.float32)}),  # same bytes, other dtype
        digest_tensors({"v": a}),
        digest_tensors({"w": a + 1}),
    ]
    assert len({base, *others}) == 5


class Pass(Node):
    def __init__(self, wrap):
        self.wrap = wrap

    def forward(self, x, ctx):
        return self.wrap(x * 2) if self.wrap else x * 2


class Look(Node):
    def forward(self, x, ctx):
        return Opaque(x)


def test_a_bare_tensor_at_an_edge_is_refused_naming_both_answers():
    g = Graph.somatize(Pass(None).named("p") >> Look().named("look"))
    with pytest.raises(SomatizeError) as e:
        g.forward(Opaque(torch.ones(2, requires_grad=True)))
    assert "Opaque(" in str(e.value) and "Data(" in str(e.value)
    with pytest.raises(SomatizeError, match=r"Opaque\(.*Data\("):
        Graph.somatize(Look()).forward(torch.ones(2))


def test_data_of_a_tensor_that_requires_grad_crosses_with_autograd_cut():
    x = torch.ones(2, requires_grad=True)
    cut = Graph.somatize(Pass(Data).named("p") >> Look().named("look")).forward(Opaque(x))
    kept = Graph.somatize(Pass(Opaque).named("p") >> Look().named("look")).forward(Opaque(x))
    assert not cut.requires_grad and cut.tolist() == [2.0, 2.0]
    assert kept.requires_grad


def test_a_store_keeps_and_recalls_tensors(tmp_path):
    store = Store(tmp_path / "s")
    value = {"w": torch.randn(5, 3), "half": torch.randn(4).to(torch.bfloat16), "n": torch.tensor(7)}
    store.keep("t", value)
    back = Store(tmp_path / "s").recall("t")
    for k, t in value.items():
        same(back[k], t)


@pytest.mark.parametrize("buffers", [[], [b"\0" * 4, b"\0" * 4]])
def test_a_tensor_header_with_a_wrong_number_of_buffers_is_refused_by_the_codec(buffers):
    """Issue: the tensor codec unpacked its buffers blindly (a bare ValueError);
    the numpy codec checked their number. Both check now."""
    with pytest.raises(SomatizeError, match="buffers, not 1"):
        CODEC.decode({"dtype": "float32", "shape": [1]}, [memoryview(b) for b in buffers])


def test_a_forged_tensor_object_is_damaged_in_a_store(tmp_path):
    from somatize import DamagedError
    from somatize._store.objects import Encoded

    store = Store(tmp_path)
    obj = Encoded("torch", {"dtype": "float32", "shape": [1]}, [b"\0" * 4, b"\0" * 4])
    path = store._object_path(obj.seal())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(bytes(p) for p in obj.parts))
    with pytest.raises(DamagedError, match="buffers, not 1.*store.check"):
        store.recall(obj.digest)
