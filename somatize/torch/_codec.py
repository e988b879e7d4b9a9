"""The tensor codec: how a torch tensor becomes data (a small header plus its
raw bytes) and back.

The rule kept here: a tensor's bytes are read once, in place, never pickled.
Encoding hands the Store (or a digest) a uint8 view of the tensor's own
memory; only a tensor that is not already a plain contiguous CPU tensor is
copied first. Decoding looks its dtype up in a fixed table, so nothing named
by the data is ever called, and it returns a tensor that owns its memory.

``Data(t)`` of a tensor that requires grad is allowed: what crosses is
``t.detach()``, so the autograd graph is cut there, as it would be by writing
the tensor to disk and reading it back. ``Opaque(t)`` keeps the graph.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from .._base.errors import SomatizeTypeError, SomatizeValueError

# Only these dtypes are written or read; the name in the header is looked up
# here and nowhere else.
DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
        torch.uint16, torch.uint32, torch.uint64,
        torch.float16, torch.bfloat16, torch.float32, torch.float64,
        torch.complex64, torch.complex128,
        torch.float8_e4m3fn, torch.float8_e5m2,
    )
}
_NAMES = {d: n for n, d in DTYPES.items()}


def raw_bytes(t):
    """A flat uint8 numpy view of ``t``'s bytes in C order, copying only when
    the tensor is not a contiguous, plain, CPU, strided one."""
    if t.layout is not torch.strided or t.is_quantized or t.is_nested:
        raise SomatizeTypeError(
            f"a {t.layout} tensor (quantized={t.is_quantized}, nested={t.is_nested}) cannot be data: "
            "only plain strided tensors are encoded. Convert it first (t.to_dense(), "
            "t.dequantize()) or wrap it as Opaque(t) to keep it in this process."
        )
    if t.dtype not in _NAMES:
        raise SomatizeTypeError(
            f"a tensor of dtype {t.dtype} cannot be data: the torch codec writes "
            f"{', '.join(DTYPES)}. Convert it with t.to(torch.float32) or wrap it as Opaque(t)."
        )
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    # reshape(-1) of a contiguous tensor is a view (also for 0-d); viewing as
    # uint8 is what lets bfloat16 and float8 through numpy, which lacks them.
    return t.reshape(-1).view(torch.uint8).numpy()


class TensorCodec:
    """Registered as ``"torch"`` by ``import somatize.torch``."""

    name = "torch"
    types = (torch.Tensor,)
    explicit = True  # a bare tensor at an edge is refused: Opaque(t) or Data(t)
    raises_on_damage = True  # decode refuses only what it did not write

    def encode(self, t):
        """``(meta, [bytes])`` of a tensor: its dtype and shape, and its raw bytes."""
        b = raw_bytes(t)
        return {"dtype": _NAMES[t.dtype], "shape": list(t.shape)}, [b]

    def decode(self, meta, buffers):
        """A writable tensor from what ``encode`` wrote; anything else is refused
        with a SomatizeValueError, never decoded to garbage."""
        try:
            dtype = DTYPES[meta["dtype"]]
            shape = [int(n) for n in meta["shape"]]
            if len(shape) > 64 or min(shape, default=0) < 0:
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise SomatizeValueError(
                f"a tensor header {meta!r:.200} is not one the torch codec wrote: it needs "
                f"a dtype among {list(DTYPES)} and a shape (a list of ints)"
            ) from None
        if len(buffers) != 1:
            raise SomatizeValueError(
                f"a tensor in the store holds {len(buffers)} buffers, not 1; the torch codec "
                "writes one. The object is damaged or was not written by somatize: run store.check()."
            )
        src = np.frombuffer(buffers[0], dtype=np.uint8)
        itemsize = torch.empty((), dtype=dtype).element_size()
        count = 1
        for n in shape:
            count *= n
        if src.size != count * itemsize:
            raise SomatizeValueError(
                f"a {meta['dtype']} tensor of shape {shape} needs {count * itemsize} bytes; "
                f"its buffer holds {src.size}. The object is damaged: run store.check()."
            )
        # One copy into memory the tensor owns: a stored buffer may be
        # read-only or shared, and a tensor that trains must be writable.
        out = torch.empty(src.size, dtype=torch.uint8)
        out.numpy()[:] = src
        return out.view(dtype).reshape(shape)

    def as_data(self, t):
        """What ``Data(t)`` sends: the tensor cut from its autograd graph."""
        return t.detach()

    def __repr__(self):
        return "TensorCodec()"


def digest_tensors(named):
    """``"sha256:…"`` over named tensors: names, dtypes, shapes and bytes,
    in name order, each tensor's bytes read once in place."""
    h = hashlib.sha256()
    for name in sorted(named):
        t = named[name]
        h.update(f"{name}\0{_NAMES.get(t.dtype, t.dtype)}\0{list(t.shape)}\0".encode())
        h.update(raw_bytes(t))
    return "sha256:" + h.hexdigest()
