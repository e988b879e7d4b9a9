"""The engine: nodes, the graph they make, and one forward through it.

The rule kept here: the graph computes; it never knows it is being trained.
It knows nodes, edges, what crosses them (data or Opaque), a Store for the
outputs it was told to keep, and watchers that it hands facts to. It imports
neither torch nor Jupyter.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
from time import perf_counter_ns

from ._codecs import SCALARS, codec_for, how_to_register
from ._errors import SomatizeError, SomatizeTypeError, SomatizeValueError, WatcherError
from ._values import Data, Opaque


class NodeError(SomatizeError, RuntimeError):
    """A node's forward raised; the message names the node."""


class Node:
    """A step of a graph. Subclass it and define ``forward(self, x, ctx)``.

    Subclasses need not call ``super().__init__()``: the engine's state lives
    in class-level defaults and is written to the instance only when set.
    """

    _sz_name = None
    _sz_auto = False  # the name was given by Graph.somatize, not by the user
    _sz_frozen = False
    _sz_cached = False
    _sz_weights = None  # (digest, still) once somatize.torch.freeze ran

    def named(self, name):
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise SomatizeValueError(
                f"{name!r} cannot name a node: use letters, digits, '_', '-' or '.', "
                "starting with a letter or '_' (for example .named('body'))"
            )
        self._sz_name = name
        self._sz_auto = False
        return self

    def frozen(self):
        """This node is settled: its output depends on its input alone."""
        self._sz_frozen = True
        return self

    def cached(self):
        """This node's output is worth keeping in the Store (needs .frozen())."""
        self._sz_cached = True
        return self

    @property
    def name(self):
        return self._sz_name

    @name.setter
    def name(self, value):
        self.named(value)

    @property
    def is_frozen(self):
        return self._sz_frozen

    @property
    def is_cached(self):
        return self._sz_cached

    def __rshift__(self, other):
        return _Chain((self, _expr(other)))

    def __rrshift__(self, other):
        return _Chain((_expr(other), self))

    def __repr__(self):
        badges = "".join(
            f".{b}()" for b, on in (("frozen", self._sz_frozen), ("cached", self._sz_cached)) if on
        )
        name = f".named({self._sz_name!r})" if self._sz_name and not self._sz_auto else ""
        return f"{type(self).__name__}(){name}{badges}"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def set_weights(node, digest, still):
    """Record the digest of a node's weights (called by somatize.torch.freeze).

    ``still()`` answers whether the weights are still the ones digested; a
    cache is never served or written for a node whose weights moved.
    """
    node._sz_weights = (digest, still)


# --- composing ---------------------------------------------------------------


class _Chain:
    __slots__ = ("parts",)

    def __init__(self, parts):
        flat = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, _Chain) else (p,))
        self.parts = tuple(flat)

    def __rshift__(self, other):
        return _Chain((self, _expr(other)))

    def __rrshift__(self, other):
        return _Chain((_expr(other), self))

    def __repr__(self):
        return " >> ".join(map(repr, self.parts))


class _Fan:
    """Branches that each get the same input; their outputs meet as a tuple
    (from a list or tuple) or a dict (from a dict)."""

    __slots__ = ("branches", "keys")

    def __init__(self, branches, keys=None):
        self.branches = branches
        self.keys = keys

    def __rshift__(self, other):
        return _Chain((self, _expr(other)))

    def __rrshift__(self, other):
        return _Chain((_expr(other), self))

    def __repr__(self):
        if self.keys is None:
            return "[" + ", ".join(map(repr, self.branches)) + "]"
        return "{" + ", ".join(f"{k!r}: {b!r}" for k, b in zip(self.keys, self.branches)) + "}"


def _expr(x):
    if isinstance(x, (Node, _Chain, _Fan)):
        return x
    if isinstance(x, (list, tuple)):
        if not x:
            raise SomatizeValueError("an empty list cannot be a fan-out: give it at least one node")
        return _Fan(tuple(_expr(b) for b in x))
    if isinstance(x, dict):
        if not x:
            raise SomatizeValueError("an empty dict cannot be a fan-out: give it at least one node")
        for k in x:
            if not isinstance(k, str):
                raise SomatizeTypeError(
                    f"fan-out dict keys must be strings; got {k!r}: write {{'name': node, ...}}"
                )
        return _Fan(tuple(_expr(b) for b in x.values()), tuple(x))
    if isinstance(x, type) and issubclass(x, Node):
        raise SomatizeTypeError(
            f"{x.__name__} is a Node class, not a node: write {x.__name__}() to make one"
        )
    raise SomatizeTypeError(
        f"cannot compose {type(x).__name__} {x!r:.60} with >>: a graph is made of Node "
        "instances, lists/tuples of them (fan-out, their outputs meet as a tuple) and "
        "dicts of them (outputs meet as a dict). Wrap a function in a Node subclass "
        "with forward(self, x, ctx)."
    )


# --- the graph -----------------------------------------------------------------


class _Step:
    __slots__ = ("node", "name", "source", "slot", "forward")

    def __init__(self, node, source, slot):
        self.node = node
        self.name = node._sz_name
        self.source = source  # int slot, or ("t", refs) / ("d", keys, refs)
        self.slot = slot


class Graph:
    """Nodes and edges, validated. Build one with ``Graph.somatize(expr)``."""

    def __init__(self, *a, **k):
        raise SomatizeTypeError("build a graph with Graph.somatize(a >> b), not Graph(...)")

    @classmethod
    def somatize(cls, expr):
        """Validate ``expr`` and build the graph; nothing runs yet."""
        g = object.__new__(cls)
        g._build(_expr(expr))
        return g

    def _build(self, expr):
        steps = []
        seen = {}  # id(node) -> node

        def visit(e, source, path):
            if isinstance(e, Node):
                if id(e) in seen:
                    if id(e) in path:
                        raise SomatizeValueError(
                            f"cycle: {e!r} feeds itself ({' >> '.join(repr(n) for n in path.values())} "
                            f">> {e!r}). A graph has no cycles; use a second instance for a second step."
                        )
                    raise SomatizeValueError(
                        f"{e!r} appears twice in the graph; a node is one step. "
                        f"Make a second instance ({type(e).__name__}()) for a second step."
                    )
                _check_node(e)
                seen[id(e)] = e
                step = _Step(e, source, len(steps) + 1)
                steps.append(step)
                return step.slot, {**path, id(e): e}
            if isinstance(e, _Chain):
                for part in e.parts:
                    source, path = visit(part, source, path)
                return source, path
            outs, paths = [], dict(path)
            for b in e.branches:
                out, p = visit(b, source, path)
                outs.append(out)
                paths.update(p)
            ref = ("t", tuple(outs)) if e.keys is None else ("d", e.keys, tuple(outs))
            return ref, paths

        out, _ = visit(expr, 0, {})
        _name_nodes([s.node for s in steps])
        for s in steps:
            s.name = s.node._sz_name
            s.forward = s.node.forward
            if s.node._sz_cached and not s.node._sz_frozen:
                raise SomatizeValueError(
                    f"node {s.name!r} is .cached() but not .frozen(): a cache over something "
                    "that can still change would serve stale outputs. Write "
                    f"{type(s.node).__name__}().named({s.name!r}).frozen().cached(), or drop .cached()."
                )
        self._steps = tuple(steps)
        self._out = out
        self._by_name = {s.name: s.node for s in steps}
        self._cached = tuple(s for s in steps if s.node._sz_cached)

    # -- looking at it
    @property
    def nodes(self):
        """The nodes in the order they run."""
        return [s.node for s in self._steps]

    def node(self, name):
        try:
            return self._by_name[name]
        except KeyError:
            from ._errors import SomatizeKeyError

            raise SomatizeKeyError(
                f"no node named {name!r} in this graph; its nodes are {list(self._by_name)}"
            ) from None

    @property
    def edges(self):
        """(from, to) pairs of node names; the graph's input is "input"."""
        names = {0: "input", **{s.slot: s.name for s in self._steps}}
        return [(names[src], s.name) for s in self._steps for src in _slots(s.source)]

    @property
    def outputs(self):
        """The names of the nodes whose outputs leave the graph."""
        names = {0: "input", **{s.slot: s.name for s in self._steps}}
        return [names[i] for i in _slots(self._out)]

    def fingerprints(self):
        """Each frozen node's fingerprint: its code, its data attributes and,
        once somatize.torch.freeze ran, the digest of its weights."""
        return {s.name: fingerprint(s.node) for s in self._steps if s.node._sz_frozen}

    def __repr__(self):
        return f"Graph({' >> '.join(s.name for s in self._steps)})" if _is_chain(self) else (
            f"Graph({len(self._steps)} nodes: {', '.join(s.name for s in self._steps)})"
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        try:
            from ._widgets import graph_bundle
        except ImportError:
            return {"text/plain": repr(self)}
        return graph_bundle(self, include=include, exclude=exclude)

    # -- running it
    def forward(self, x, store=None, watching=None):
        """Run the graph once on ``x`` and return its output (an Opaque
        leaving the graph is unwrapped)."""
        watchers = _watchers(watching)
        if store is not None:
            # opened only when a node caches; checked always, so a wrong
            # argument is never silently ignored
            store = _as_store(store) if self._cached else _check_store_arg(store)
        if store is not None:
            _check_weights(self._cached)

        if watchers:
            for w in watchers:
                began = getattr(w, "forward_began", None)
                if began is not None:
                    began()

            def emit(fact):
                for w in watchers:
                    try:
                        w(fact)
                    except Exception as e:
                        raise WatcherError(
                            f"watcher {_describe(w)} raised {type(e).__name__}: {e} when handed "
                            f"{fact!r}. The forward stopped there; fix the watcher or take it "
                            "out of watching=."
                        ) from e
        else:
            emit = None

        slots = [None] * (len(self._steps) + 1)
        slots[0] = _cross(x, "the graph's input")
        start = perf_counter_ns()
        for step in self._steps:
            src = step.source
            if src.__class__ is int:
                v = slots[src]
                arg = v.value if v.__class__ is Opaque else v
            else:
                arg = _gather(src, slots)
            node = step.node
            if store is not None and node._sz_cached:
                slots[step.slot] = _run_cached(step, arg, store, emit, start)
                continue
            ctx = Ctx(step.name, emit)
            t0 = perf_counter_ns()
            try:
                out = step.forward(arg, ctx)
            except WatcherError:
                raise  # a watcher failed inside ctx.fact: the node did nothing wrong
            except Exception as e:
                raise _failed(step, e, emit, start, t0) from e
            t1 = perf_counter_ns()
            slots[step.slot] = out if out.__class__ in _PASS else _cross(out, f"the output of node {step.name!r}")
            if emit is not None:
                emit({"fact": "ran", "node": step.name, "began_us": (t0 - start) // 1000, "took_us": (t1 - t0) // 1000})
        out = _gather(self._out, slots) if self._out.__class__ is not int else slots[self._out]
        if emit is not None:
            emit({"fact": "finished", "took_us": (perf_counter_ns() - start) // 1000})
        if out.__class__ is Opaque:
            return out.value
        return out


class Ctx:
    """A node's handle on the engine: its name, and a way to add a fact."""

    __slots__ = ("name", "_emit")

    def __init__(self, name, emit):
        self.name = name
        self._emit = emit

    def fact(self, fact, **fields):
        """Add ``{"fact": fact, "node": <this node>, **fields}`` to the stream."""
        if not isinstance(fact, str) or not fact:
            raise SomatizeValueError(f"ctx.fact needs a name as its first argument, like ctx.fact('norm', value=1.5); got {fact!r}")
        if self._emit is not None:
            self._emit({"fact": fact, "node": self.name, **fields})

    def __repr__(self):
        return f"Ctx({self.name!r})"


# --- what crosses an edge -------------------------------------------------------

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


def _is_chain(g):
    return all(s.source == i for i, s in enumerate(g._steps)) and g._out == len(g._steps)


# --- building checks --------------------------------------------------------------


def _check_node(node):
    forward = getattr(type(node), "forward", None)
    if forward is None or not callable(forward):
        raise SomatizeTypeError(
            f"{type(node).__name__} has no forward: a Node needs "
            f"`def forward(self, x, ctx): ...` returning its output"
        )
    try:
        sig = inspect.signature(forward)
    except (TypeError, ValueError):
        return
    params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
    if len(params) < 3 and not var:
        raise SomatizeTypeError(
            f"{type(node).__name__}.forward{sig} takes too few arguments: write "
            f"`def forward(self, x, ctx)` (ctx gives the node its name and ctx.fact(...))"
        )


def _name_nodes(nodes):
    explicit = {}
    for n in nodes:
        if n._sz_name is not None and not n._sz_auto:
            if n._sz_name in explicit:
                raise SomatizeValueError(
                    f"two nodes are named {n._sz_name!r} ({explicit[n._sz_name]!r} and {n!r}); "
                    "node names are unique in a graph: rename one with .named(...)"
                )
            explicit[n._sz_name] = n
    taken = set(explicit)
    for n in nodes:
        if n._sz_name is None or n._sz_auto:
            base = re.sub(r"(?<!^)(?=[A-Z])", "_", type(n).__name__).lower()
            name, i = base, 2
            while name in taken:
                name, i = f"{base}_{i}", i + 1
            n._sz_name, n._sz_auto = name, True
            taken.add(name)


def _watchers(watching):
    if watching is None:
        return ()
    if callable(watching):
        return (watching,)
    if isinstance(watching, (list, tuple)):
        for w in watching:
            if not callable(w):
                raise SomatizeTypeError(f"watching= holds {w!r}, which is not callable; a watcher is a callable taking one fact (a dict)")
        return tuple(watching)
    raise SomatizeTypeError(f"watching= takes a callable or a list of callables; got {type(watching).__name__} {watching!r:.60}")


def _describe(w):
    name = getattr(w, "__qualname__", None) or type(w).__qualname__
    return f"{name} ({w!r:.80})"


def _failed(step, e, emit, start, t0):
    took = (perf_counter_ns() - t0) // 1000
    if emit is not None:
        emit({"fact": "failed", "node": step.name, "began_us": (t0 - start) // 1000, "took_us": took,
              "error": f"{type(e).__name__}: {e}"[:500]})
    return NodeError(
        f"node {step.name!r} ({type(step.node).__name__}.forward) raised {type(e).__name__}: {e}"
    )


# --- fingerprints and the cache -------------------------------------------------------

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


def _run_cached(step, arg, store, emit, start):
    node = step.node
    try:
        key_in = store.digest_of(arg)
    except SomatizeError as e:
        raise SomatizeTypeError(
            f"node {step.name!r} is cached, so its input must be data to make a key, but: {e}"
        ) from e
    key = hashlib.sha256((fingerprint(node) + key_in).encode()).hexdigest()
    name = f"cache/{step.name}/{key}"
    t0 = perf_counter_ns()
    digest = store.lookup(name)
    if digest is not None:
        value = store.recall(digest)
        if emit is not None:
            emit({"fact": "recalled", "node": step.name, "began_us": (t0 - start) // 1000,
                  "took_us": (perf_counter_ns() - t0) // 1000})
        return Opaque(value)
    ctx = Ctx(step.name, emit)
    t0 = perf_counter_ns()
    try:
        out = step.forward(arg, ctx)
    except WatcherError:
        raise
    except Exception as e:
        raise _failed(step, e, emit, start, t0) from e
    t1 = perf_counter_ns()
    crossed = _cross(out, f"the output of node {step.name!r}")
    if emit is not None:
        emit({"fact": "ran", "node": step.name, "began_us": (t0 - start) // 1000, "took_us": (t1 - t0) // 1000})
    value = crossed.value if crossed.__class__ is Opaque else crossed
    codec = codec_for(value)
    data = codec.as_data(value) if codec is not None and hasattr(codec, "as_data") else value
    store.keep(name, data)
    if emit is not None:
        emit({"fact": "kept", "node": step.name, "took_us": (perf_counter_ns() - t1) // 1000})
    return crossed


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
