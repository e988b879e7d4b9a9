"""Values read in bulk: kinds of value a Recorder is handed for a fact and
reads later, many at once (a 0-d tensor on a device: reading one waits for
the device, reading many together waits once).

The rule kept here: the record never imports what such a value is. The layer
that knows it registers, on import, how to hold one and how to read many
(``somatize.torch`` registers tensors, as it registers the tensor codec), and
``Recorder.log`` asks this registry, by the value's type, along its MRO.

A kind is registered with ``register_bulk(types, hold, read)``:

    hold(value) -> held   called as the value is handed over, on the caller's
                          thread: cheap, never waiting for a device; raises
                          ValueError saying why a value of these types is not
                          one number (``a tensor of shape (2, 3)``)
    read(held: list) -> list
                          one float per held value, in order, in as few waits
                          as the kind allows (one for tensors: stacked, then
                          read); None for a value that cannot be read as it
                          was when handed over (a tensor changed in place since)

Registering the same ``types`` again replaces the kind.
"""

from __future__ import annotations

from .errors import SomatizeTypeError


class Kind:
    """A kind of value read in bulk: its ``hold`` and ``read`` (see above)."""

    __slots__ = ("hold", "read", "types")

    def __init__(self, types, hold, read):
        self.types, self.hold, self.read = types, hold, read

    def __repr__(self):
        return f"Kind({', '.join(t.__qualname__ for t in self.types)})"


_kinds: dict = {}  # class -> Kind, as registered
_by_type: dict = {}  # exact type -> Kind or None: one dict lookup for a type seen before


def register_bulk(types, hold, read) -> Kind:
    """Register how values of ``types`` (a class or a tuple of classes) are
    held as they are handed over and read many at once; a later
    registration of a class replaces the earlier one."""
    if isinstance(types, type):
        types = (types,)
    types = tuple(types)
    if not types or not all(isinstance(t, type) for t in types):
        raise SomatizeTypeError(f"register_bulk(types, hold, read): types is a class or a tuple of classes; "
                                f"got {types!r:.80}")
    if not callable(hold) or not callable(read):
        raise SomatizeTypeError("register_bulk(types, hold, read): hold(value) -> held and read(list of held) -> "
                                "list of floats are functions")
    kind = Kind(types, hold, read)
    for t in types:
        _kinds[t] = kind
    _by_type.clear()
    return kind


def kind_of(value) -> Kind | None:
    """The kind registered for ``value``'s class or the nearest class above
    it, or None."""
    t = value.__class__
    try:
        return _by_type[t]
    except KeyError:
        pass
    found = next((_kinds[c] for c in t.__mro__ if c in _kinds), None)
    _by_type[t] = found
    return found
