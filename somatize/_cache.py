"""Fingerprints, and the checks that keep a cache honest.

The rule kept here: a cache key is made of content only — the digest of the
input as data and the node's fingerprint (its code, its data attributes and,
once somatize.torch.freeze ran, its weights' digest) — and a node whose
weights moved since their digest is never served from the cache.
"""

from __future__ import annotations

import hashlib
import os

from ._codecs import SCALARS
from ._edges import _check_data
from ._errors import SomatizeError, SomatizeValueError
from ._node import Node

_code_digests = {}


def _code_digest(klass):
    """Digest of a class's own code: bytecode, constants and names of every
    method along its MRO below Node. Source text is not needed (a class typed
    into a notebook has none that inspect can always find)."""
    try:
        return _code_digests[klass]
    except KeyError:
        pass
    h = hashlib.sha256()
    for k in klass.__mro__:
        if k is Node or k is object:
            continue
        h.update(f"{k.__module__}.{k.__qualname__}\0".encode())
        for attr, v in sorted(k.__dict__.items()):
            f = getattr(v, "__func__", v)
            code = getattr(f, "__code__", None)
            if code is not None:
                h.update(attr.encode() + b"\0")
                _hash_code(h, code)
            elif isinstance(v, SCALARS):
                h.update(f"{attr}={v!r}\0".encode())
    d = h.hexdigest()
    _code_digests[klass] = d
    return d


def _hash_code(h, code):
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            _hash_code(h, c)
        else:
            h.update(repr(c).encode())


def fingerprint(node):
    h = hashlib.sha256(_code_digest(type(node)).encode())
    for attr, v in sorted(vars(node).items()):
        if attr.startswith("_sz_"):
            continue
        h.update(attr.encode() + b"\0")
        h.update(_attribute_digest(v).encode())
    if node._sz_weights is not None:
        h.update(b"weights\0" + node._sz_weights[0].encode())
    return "sha256:" + h.hexdigest()


def _attribute_digest(v):
    """Data attributes count by content; anything else (a torch module, a
    function) by its type only: its weights enter through freeze(g)."""
    try:
        _check_data(v, "attribute", wrapped=False)
    except SomatizeError:
        return "type:" + type(v).__module__ + "." + type(v).__qualname__
    from ._store import digest_of

    return digest_of(v)


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
        elif not node._sz_weights[1]():
            raise SomatizeValueError(
                f"the weights of frozen node {s.name!r} changed after freeze(g); its cached "
                "outputs would be stale. Call freeze(g) again to take the new weights' digest "
                "(or stop changing a frozen node)."
            )


_stores = {}


def _check_store_arg(store):
    from ._store import Store

    if not isinstance(store, (Store, str, os.PathLike)):
        _as_store(store)  # raises, naming what store= takes
    return None


def _as_store(store):
    from ._store import Store

    if isinstance(store, Store):
        return store
    if isinstance(store, (str, os.PathLike)):
        key = os.path.abspath(os.fspath(store))
        found = _stores.get(key)
        if found is None:
            found = _stores[key] = Store(key)
        return found
    from ._store import as_store

    return as_store(store)  # not a Store nor a path: raises, naming what store= takes
