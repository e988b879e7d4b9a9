"""Codecs: how a value becomes data (a JSON-able header plus raw buffers) and back.

The rule kept here: nothing is ever pickled. A value crosses an edge, enters a
cache key or lands in a Store only through a registered codec, and decoding
runs no code named by the data, only the codec registered under its name.

A codec is any object with

    name:     str, stable; it is written into every object it encodes
    types:    tuple of the types it encodes (looked up along the value's MRO)
    explicit: bool; True means a bare value of these types is refused at an
              edge and must be wrapped in ``Data(v)`` or ``Opaque(v)``
    encode(value) -> (meta: JSON-able dict, buffers: list of bytes-like)
    decode(meta, buffers: list[memoryview]) -> value
    as_data(value) -> value   (optional) what the value becomes when it crosses
                               as data, e.g. a tensor cut from its autograd graph
    raises_on_damage: bool    (optional) True when decode raises only for data
                               it did not write: a Store then reports such an
                               object as damaged. Otherwise (a user's codec) an
                               exception from decode is reported as the codec's
                               own, never as damage: the bytes passed their checksum.

Register with ``somatize.register_codec(codec)``.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .errors import SomatizeTypeError, SomatizeValueError

# Plain values a JSON header carries as they are.
SCALARS = (type(None), bool, int, float, str)

_by_name: dict = {}


def _dispatcher(codecs):
    """One singledispatch function over the codecs' types, in registration
    order (a later one wins a type): it finds the codec of the nearest class
    along a value's MRO, or None."""

    @functools.singledispatch
    def codec_of(value):
        return None

    for codec in codecs:
        for t in tuple(codec.types):
            codec_of.register(t, lambda value, codec=codec: codec)
    return codec_of


_codec_of = _dispatcher(())
# exact type -> codec or None: a dict lookup on the hot path (an edge, a
# keep), where singledispatch's own dispatch costs a few hundred ns more
_by_type: dict = {}


def register_codec(codec):
    """Register ``codec`` for its ``types``; a later registration wins."""
    for attr in ("name", "types", "encode", "decode"):
        if not hasattr(codec, attr):
            raise SomatizeTypeError(
                f"codec {codec!r} has no `{attr}`; a codec needs name, types, "
                "encode(value) -> (meta, buffers) and decode(meta, buffers)"
            )
    if not isinstance(codec.name, str) or not codec.name:
        raise SomatizeValueError(f"codec {codec!r} needs a non-empty string `name`")
    try:
        types = tuple(codec.types)
    except TypeError:
        types = (codec.types,)
    for t in types:
        if not isinstance(t, type):
            raise SomatizeTypeError(
                f"codec {codec.name!r} lists {t!r:.60} in `types`, which is not a class; "
                "give the classes it encodes, like types = (MyType,)"
            )
    global _codec_of
    _by_name[codec.name] = codec
    # Rebuilt, not added to: a codec registered again under its name drops
    # the types of the one it replaces.
    _codec_of = _dispatcher(_by_name.values())
    _by_type.clear()
    return codec


def codec_named(name):
    try:
        return _by_name[name]
    except KeyError:
        raise SomatizeValueError(
            f"no codec named {name!r} is registered in this process; the data "
            f"was written by one. Import the module that registers it "
            f"(for tensors: `import somatize.torch`)."
        ) from None


def codec_for(value):
    """The codec that encodes ``value``, or None."""
    t = type(value)
    try:
        return _by_type[t]
    except KeyError:
        found = _by_type[t] = _codec_of.dispatch(t)(value)
        return found


def how_to_register(value):
    return (
        f"No codec encodes a {type(value).__module__}.{type(value).__qualname__}. "
        "Either wrap it as `Opaque(value)` to keep it inside this process, or "
        "register a codec: `somatize.register_codec(codec)` with a `name`, "
        "`types`, `encode(value) -> (meta, buffers)` and `decode(meta, buffers)`."
    )


def _one_buffer(buffers, what):
    if len(buffers) != 1:
        raise SomatizeValueError(
            f"{what} in the store holds {len(buffers)} buffers, not 1; it was not written by "
            "somatize or is damaged: run `somatize check`"
        )
    return buffers[0]


class _BuiltIn:
    """What the codecs that ship with somatize share: found by type, not by
    name alone, and a damaged value raises rather than decoding to garbage."""

    explicit = False
    raises_on_damage = True


class _Bytes(_BuiltIn):
    name = "bytes"
    types = (bytes, bytearray, memoryview)
    def encode(self, value):
        return {}, [value]

    def decode(self, meta, buffers):
        return bytes(_one_buffer(buffers, "a bytes value"))


def _plain_dtype(text):
    """The dtype an object names, if it is made of plain bytes: an object
    dtype would need pickle to read, and nothing read from a store runs code."""
    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.hasobject:
        raise SomatizeValueError(
            f"an array in the store names the dtype {text!r}, which is not made of plain "
            "bytes; somatize never writes such arrays and will not read one (it would take "
            "pickle). The object was not written by somatize, or is damaged: run `somatize check`."
        )
    return dtype


def _dtype_of(meta, what):
    if not isinstance(meta, dict) or "dtype" not in meta:
        raise SomatizeValueError(
            f"{what} in the store has the header {meta!r:.100}, with no dtype; it was not written "
            "by somatize or is damaged: run `somatize check`"
        )
    return _plain_dtype(meta["dtype"])


class _NumpyArray(_BuiltIn):
    name = "numpy"
    types = (np.ndarray,)
    def encode(self, value):
        if value.dtype.hasobject:
            raise SomatizeTypeError(
                "a numpy array of dtype object cannot be data: its items are "
                "Python objects. Convert it to a numeric or string dtype, or "
                "wrap it as `Opaque(array)`."
            )
        a = np.ascontiguousarray(value)  # makes a 0-d array 1-d: the shape comes from value
        body = a.reshape(-1).view(np.uint8).data if a.size else b""
        return {"dtype": a.dtype.str, "shape": list(value.shape)}, [body]

    def decode(self, meta, buffers):
        dtype = _dtype_of(meta, "an array")
        shape = meta.get("shape")
        buffer = _one_buffer(buffers, "an array")
        # math.prod of Python ints: a shape like [8, 2**61 + 1] cannot wrap around to fit
        if not isinstance(shape, list) or len(shape) > 64 or not all(type(n) is int and n >= 0 for n in shape) or (
            len(buffer) != math.prod(shape) * dtype.itemsize
        ):
            raise SomatizeValueError(
                f"an array in the store says it is {dtype} of shape {shape!r:.60} but holds "
                f"{sum(len(b) for b in buffers)} bytes; it was not written by somatize or is "
                "damaged: run `somatize check`"
            )
        a = np.frombuffer(buffer, dtype=dtype) if len(buffer) else np.empty(0, dtype)
        return a.reshape(shape)


class _NumpyScalar(_BuiltIn):
    name = "numpy-scalar"
    types = (np.generic,)
    def encode(self, value):
        a = np.asarray(value)
        if a.dtype.hasobject:
            raise SomatizeTypeError("a numpy object scalar cannot be data; wrap it as `Opaque(value)`")
        return {"dtype": a.dtype.str}, [a.tobytes()]

    def decode(self, meta, buffers):
        dtype = _dtype_of(meta, "a scalar")
        buffer = _one_buffer(buffers, "a scalar")
        if len(buffer) != dtype.itemsize:
            raise SomatizeValueError(
                f"a {dtype} scalar in the store holds {len(buffer)} bytes, not {dtype.itemsize}; "
                "it was not written by somatize or is damaged: run `somatize check`"
            )
        return np.frombuffer(buffer, dtype=dtype)[0]


register_codec(_Bytes())
register_codec(_NumpyArray())
register_codec(_NumpyScalar())
