"""What crosses an edge: data, checked (and cut, for ``Data``), or an
``Opaque``, handed on untouched. The engine never guesses: a value whose
codec is explicit (a tensor) must say which of the two it is.
"""

from __future__ import annotations

from .._base.codecs import SCALARS, codec_for, how_to_register
from .._base.errors import SomatizeTypeError
from .._base.values import Data, Opaque

_PASS = frozenset((Opaque, type(None), bool, int, float, str))


def _cross(value, where):
    """What an edge carries: Opaque as is; data checked (and cut, for Data)."""
    t = value.__class__
    if t in _PASS:
        return value
    if t is Data:
        inner = value.value
        codec = codec_for(inner)
        if codec is not None and hasattr(codec, "as_data"):
            inner = codec.as_data(inner)
        _check_data(inner, where, wrapped=True)
        return Opaque(inner)  # already checked: hand it on without looking again
    _check_data(value, where, wrapped=False)
    return value


def _check_data(value, where, wrapped):
    t = value.__class__
    if t is Opaque:  # before _PASS: an edge passes an Opaque only on its own (see _cross)
        raise SomatizeTypeError(
            f"{where} holds an Opaque inside a structure; an Opaque crosses an edge on its own. "
            "Return Opaque(whole_structure) to keep all of it in this process, or unwrap the inner value"
        )
    if t in _PASS or isinstance(value, SCALARS):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise SomatizeTypeError(
                    f"{where} is a dict with a non-string key {k!r}; data dicts have string keys: "
                    "write {str(k): v for k, v in d.items()}, or return Opaque(d) to keep it in this process"
                )
            _check_data(v, where, wrapped)
        return
    if isinstance(value, (list, tuple)):
        for v in value:
            _check_data(v, where, wrapped)
        return
    codec = codec_for(value)
    if codec is None:
        raise SomatizeTypeError(f"{where} cannot cross as data. " + how_to_register(value))
    if getattr(codec, "explicit", False) and not wrapped:
        kind = f"{t.__module__}.{t.__qualname__}"
        raise SomatizeTypeError(
            f"{where} is a bare {kind}; the engine does not guess how it should cross. Write "
            f"Opaque(value) to keep it in this process (autograd intact), or Data(value) to "
            f"send it as data through the {codec.name!r} codec (autograd is cut)."
        )


def _gather(ref, slots):
    if ref.__class__ is int:
        v = slots[ref]
        return v.value if v.__class__ is Opaque else v
    if ref[0] == "t":
        return tuple(_gather(r, slots) for r in ref[1])
    return {k: _gather(r, slots) for k, r in zip(ref[1], ref[2])}


def _slots(ref):
    if ref.__class__ is int:
        return [ref]
    refs = ref[1] if ref[0] == "t" else ref[2]
    return [s for r in refs for s in _slots(r)]
