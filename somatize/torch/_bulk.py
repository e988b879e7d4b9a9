"""0-d tensors handed to ``Recorder.log``: held as they are handed over, read
many at once (``_base/bulk.py``; registered when ``somatize.torch`` is
imported).

The rule kept here: logging a tensor never waits for its device. It is held
as it is (cut from its autograd graph, which it would otherwise keep alive
until the read) with its version counter, and read with every other held
at the Recorder's next read, in one host sync (``_reading.values_of``, the
Trainer's own bulk read). A tensor changed in place after it was logged (an
accumulator ``total += loss``, a learning rate a scheduler sets in place)
would be read with its new value: its version says so, and it reads as None.
"""

from __future__ import annotations

import torch

from .._base.errors import SomatizeValueError
from ._reading import values_of

TYPES = (torch.Tensor,)  # registered with hold and read by somatize.torch's __init__

# Real numbers only: a complex or quantized tensor is not one number a curve can draw.
_REAL = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                   torch.uint16, torch.uint32, torch.uint64,
                   torch.float16, torch.bfloat16, torch.float32, torch.float64,
                   torch.float8_e4m3fn, torch.float8_e5m2})


def hold(t):
    """``(t, version)``: ``t`` detached, and its version counter (-1 for an
    inference tensor, which has none). Raises a ValueError
    (SomatizeValueError) for a tensor that is not one real number."""
    if t.ndim != 0:
        raise SomatizeValueError(f"a tensor of shape {tuple(t.shape)}, not one number: log a 0-d tensor "
                         f"(t.mean(), t.sum(), t[i]), or each element under a key of its own")
    if t.dtype not in _REAL:
        raise SomatizeValueError(f"a {str(t.dtype).removeprefix('torch.')} tensor, not a real number: "
                         f"log t.real or t.abs()")
    if t.requires_grad:
        t = t.detach()
    try:
        return t, t._version
    except RuntimeError:  # an inference tensor keeps no version
        return t, -1


def read(held):
    """The value of each held tensor as a float, in one host sync; None for
    one changed in place since it was held."""
    values = values_of([t for t, _ in held])
    for i, (t, version) in enumerate(held):
        if version >= 0 and t._version != version:
            values[i] = None
    return values
