"""Fingerprints, and the checks that keep a cache honest.

The rule kept here: a cache key is made of content only — the digest of the
input as data and the node's fingerprint (its code and the code it reaches,
its attributes and, once somatize.torch.freeze ran, its weights' digest) —
and a node whose weights moved since their digest, or whose state the
fingerprint can only see by type, is never served from the cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
import types

from .._base.errors import SomatizeError, SomatizeValueError
from .edges import _check_data
from .node import Node, _Expr

_ENGINE_CLASSES = (Node, _Expr, object)  # what every node shares: not part of its fingerprint

# A code object's own digest never changes: memoised, the code kept alive.
_own: dict = {}


def _code_own(code):
    """(digest of a code object's bytecode, constants and names, every global
    name it and its nested code objects read)."""
    found = _own.get(id(code))
    if found is not None and found[0] is code:
        return found[1], found[2]
    h = hashlib.sha256(code.co_code)
    h.update(repr(code.co_names).encode())
    names = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            d, inner = _code_own(c)
            h.update(d.encode())
            names |= inner
        else:
            h.update(_constant_text(c).encode())
    d = h.hexdigest()
    _own[id(code)] = (code, d, frozenset(names))
    return d, frozenset(names)


def _constant_text(c):
    """A code constant's text, the same in every process: its repr, but a
    frozenset (what ``x in {"a", "b"}`` compiles to), alone or in a tuple,
    with its items' texts sorted, since its repr follows str hashing, which
    each process seeds anew."""
    if c.__class__ is frozenset:
        return "frozenset({" + ", ".join(sorted(map(_constant_text, c))) + "})" if c else repr(c)
    if c.__class__ is tuple and _holds_set(c):
        return "(" + "".join(_constant_text(e) + ", " for e in c) + ")"
    return repr(c)


def _holds_set(c):
    return c.__class__ is frozenset or c.__class__ is tuple and any(map(_holds_set, c))


def _hash_function(h, f, seen):
    """A function's code, then what it reaches: the globals it names and its
    closure, so a helper redefined in a notebook changes the fingerprint of
    every node that calls it."""
    code = f.__code__
    d, names = _code_own(code)
    h.update(d.encode())
    g = getattr(f, "__globals__", {})
    for name in sorted(names):
        if name in g:
            h.update(f"global {name}\0".encode())
            _hash_reached(g[name], h, seen)
    for i, cell in enumerate(f.__closure__ or ()):
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        h.update(f"cell {i}\0".encode())
        _hash_reached(v, h, seen)


def _hash_class(h, klass, seen):
    """A class's own code along its MRO below Node: every method, property
    and plain class attribute."""
    for k in klass.__mro__:
        if k in _ENGINE_CLASSES:
            continue
        h.update(f"{k.__module__}.{k.__qualname__}\0".encode())
        for attr, v in sorted(k.__dict__.items()):
            if attr.startswith("__") and attr not in ("__call__", "__init__"):
                continue
            h.update(attr.encode() + b"\0")
            _hash_reached(v, h, seen)


def _hash_reached(v, h, seen):
    """What code reaches (a global, a closure cell, a class attribute): code
    by its code, plain values by their repr, anything else by its name; one
    registration per type on ``_hash_by_type`` (registered here, at import,
    only). The handler found for a class is kept: a fingerprint makes
    hundreds of these calls, and singledispatch's own lookup on each one
    is dearer than a dict's."""
    t = v.__class__
    try:
        handler = _handlers[t]
    except KeyError:
        handler = _handlers[t] = _hash_by_type.dispatch(t)
    handler(v, h, seen)


_handlers: dict = {}


@functools.singledispatch
def _hash_by_type(v, h, seen):
    """A module, a builtin, a ufunc, a library class, an object: its name."""
    h.update(_name_of(v).encode())


@_hash_by_type.register(staticmethod)
@_hash_by_type.register(classmethod)
def _(v, h, seen):
    _hash_reached(v.__func__, h, seen)


@_hash_by_type.register
def _(v: property, h, seen):
    for f in (v.fget, v.fset):
        if f is not None:
            _hash_reached(f, h, seen)


@_hash_by_type.register(type(None))
@_hash_by_type.register(bool)
@_hash_by_type.register(int)
@_hash_by_type.register(float)
@_hash_by_type.register(str)
def _(v, h, seen):
    h.update(repr(v).encode())


@_hash_by_type.register
def _(v: types.FunctionType, h, seen):
    if _seen(v, h, seen):
        return
    _hash_function(h, v, seen)


@_hash_by_type.register
def _(v: types.MethodType, h, seen):
    if _seen(v, h, seen):
        return
    _hash_function(h, v.__func__, seen)


@_hash_by_type.register
def _(v: type, h, seen):
    if v.__module__ in _LIBRARIES:
        h.update(_name_of(v).encode())
    elif not _seen(v, h, seen):
        _hash_class(h, v, seen)


def _seen(v, h, seen):
    """Whether ``v`` was digested already in this fingerprint (then it says
    so, once more, instead of recursing); else it is now."""
    if id(v) in seen:
        h.update(b"seen\0")
        return True
    seen[id(v)] = v
    return False


_LIBRARIES = ("builtins",)


def _name_of(v):
    if isinstance(v, types.ModuleType):
        return "module " + v.__name__
    name = getattr(v, "__qualname__", None) or getattr(v, "__name__", None)
    if isinstance(name, str) and callable(v):  # np.sqrt vs np.log, len vs max
        return f"callable {getattr(v, '__module__', None)}.{name}"
    return "type " + type(v).__module__ + "." + type(v).__qualname__


def fingerprint(node):
    """sha256 over the node's code (and the code it reaches), what else its
    ``_sz_reaches()`` names (``somatize.torch.Module``: the wrapped module's
    classes and structure), its attributes (data by content, functions by
    their code, other objects by their type) and, once somatize.torch.freeze
    ran, its weights' digest.

    A data attribute is digested once per object: replacing it (``node.k =
    3``) changes the fingerprint; changing an array inside it in place does
    not, since a frozen node is settled."""
    h = hashlib.sha256()
    seen: dict = {}
    _hash_class(h, type(node), seen)
    if node._sz_reaches is not None:
        for v in node._sz_reaches():
            h.update(b"reaches\0")
            _hash_reached(v, h, seen)
    memo = node.__dict__.get("_sz_attr_digests") or {}
    fresh = {}
    for attr, v in sorted(vars(node).items()):
        if attr.startswith("_sz_"):
            continue
        h.update(b"attribute " + attr.encode() + b"\0")
        known = memo.get(attr)
        if known is not None and known[0] is v:
            d = known[1]
        else:
            d = _attribute_digest(v, seen)
        fresh[attr] = (v, d)
        h.update(d.encode())
    node._sz_attr_digests = fresh
    if node._sz_weights is not None:
        h.update(b"weights\0" + node._sz_weights[0].encode())
    return "sha256:" + h.hexdigest()


def _attribute_digest(v, seen):
    """Data attributes count by content (tensors too, through their codec);
    functions by their code; anything else by its type alone, and is named by
    ``opaque_attributes`` so a cache over it is refused until freeze(g)."""
    try:
        _check_data(v, "attribute", wrapped=True)
    except SomatizeError:
        h = hashlib.sha256()
        _hash_reached(v, h, seen)
        return h.hexdigest()
    from .._store.store import digest_of

    return digest_of(v)


def opaque_attributes(node):
    """Attributes the fingerprint sees by type only: not data, not code."""
    out = []
    for attr, v in vars(node).items():
        if attr.startswith("_sz_") or isinstance(v, (types.FunctionType, types.MethodType, type)):
            continue
        try:
            _check_data(v, "attribute", wrapped=True)
        except SomatizeError:
            if not (callable(v) and _name_of(v).startswith("callable ")):
                out.append(f"{attr} ({type(v).__module__}.{type(v).__qualname__})")
    return out


def _check_weights(cached_steps):
    for s in cached_steps:
        node = s.node
        if node._sz_weights is None:
            params = getattr(node, "parameters", None)
            if params is not None and len(list(params())) > 0:
                raise SomatizeValueError(
                    f"node {s.name!r} is frozen and cached and holds weights, but their digest "
                    "is not in its fingerprint, so two checkpoints would share one cache. "
                    "Call somatize.torch.freeze(g) after building the graph."
                )
            opaque = opaque_attributes(node)
            if opaque:
                raise SomatizeValueError(
                    f"node {s.name!r} is frozen and cached, but its fingerprint sees "
                    f"{', '.join(opaque)} by type only, so two different ones would share one "
                    "cache. Call somatize.torch.freeze(g) (it digests torch modules and tensors), "
                    "or keep such state as data (numbers, arrays, or a type with a registered codec)."
                )
        elif not node._sz_weights[1]():
            raise SomatizeValueError(
                f"the weights of frozen node {s.name!r} changed after freeze(g); its cached "
                "outputs would be stale. Call freeze(g) again to take the new weights' digest "
                "(or stop changing a frozen node)."
            )


def _check_store_arg(store):
    from .._store.store import Store, as_store

    if not isinstance(store, (Store, str, os.PathLike)):
        as_store(store)  # raises, naming what store= takes
    return None


def _as_store(store):
    from .._store.store import as_store

    return as_store(store)  # a path is opened once per process, and healed if deleted
