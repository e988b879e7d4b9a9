"""The two ways a value crosses an edge: as data, or as something that only
exists in this process."""


class Opaque:
    """A value that stays in this process (a tensor with its autograd graph).

    Wrapped on the way out of a node, handed bare to the node below.
    It is never hashed, kept or sent."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Opaque({self.value!r})"


class Data:
    """A value sent across an edge as data, through its codec.

    ``Data(t)`` for a tensor cuts it from its autograd graph: what crosses is
    what could have been written to disk and read back."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Data({self.value!r})"
