"""The engine: nodes, the graph they make, and one forward through it.

The rule kept here: the graph computes; it never knows it is being trained.
It knows nodes, edges, what crosses them (data or Opaque), a Store for the
outputs it was told to keep, and watchers that it hands facts to. It imports
neither torch nor Jupyter.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from time import perf_counter_ns

from .._base import panels
from .._base.codecs import codec_for
from .._base.errors import NodeError, SomatizeError, SomatizeTypeError, SomatizeValueError, WatcherError
from .._base.values import Opaque
from .cache import _as_store, _check_store_arg, _check_weights, fingerprint
from .edges import _PASS, _cross, _gather, _slots
from .node import Node, _Chain, _expr, set_weights
from .watchers import ENGINE_FACTS, RESERVED, Watchers, watchers

__all__ = ["Ctx", "Graph", "Node", "NodeError", "fingerprint", "set_weights"]


# --- the graph -----------------------------------------------------------------


class _Step:
    __slots__ = ("node", "name", "source", "slot", "forward", "where", "quiet")

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
            s.where = f"the output of node {s.name!r}"
            s.quiet = Ctx(s.name, None)  # the node's ctx in a forward nobody watches
            if s.node._sz_cached and not s.node._sz_frozen:
                raise SomatizeValueError(
                    f"node {s.name!r} is .cached() but not .frozen(): a cache over something "
                    "that can still change would serve stale outputs. Write "
                    f"{type(s.node).__name__}().named({s.name!r}).frozen().cached(), or drop .cached()."
                )
        self._steps = tuple(steps)
        self._width = len(steps) + 1  # slot 0 holds the input
        self._out = out
        self._fans = not _is_chain(self)
        self._by_name = {s.name: s.node for s in steps}
        self._cached = tuple(s for s in steps if s.node._sz_cached)

    # -- looking at it
    @property
    def nodes(self):
        """The nodes in the order they run."""
        return [s.node for s in self._steps]

    def node(self, name):
        """The node named ``name``; a SomatizeKeyError lists the names there are."""
        try:
            return self._by_name[name]
        except KeyError:
            from .._base.errors import SomatizeKeyError

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
        try:  # the graph panel, registered from above (_base/panels)
            graph_bundle = panels.panel("graph_bundle")
        except ImportError:
            return {"text/plain": repr(self)}
        return graph_bundle(self, include=include, exclude=exclude)

    # -- running it
    def forward(self, x, store=None, watching=None):
        """Run the graph once on ``x`` and return its output (an Opaque
        leaving the graph is unwrapped)."""
        w = watching if watching.__class__ is Watchers else watchers(watching)
        if store is not None:
            # opened only when a node caches; checked always, so a wrong
            # argument is never silently ignored
            store = _as_store(store) if self._cached else _check_store_arg(store)
        if store is not None:
            _check_weights(self._cached)
        if w.all:
            w.began()
            emit = w.emit
            hook = w.output
            ctxs = w.ctxs
        else:
            emit = hook = ctxs = None

        # A chain hands each node the output of the one before; only a graph
        # that fans out keeps every output in a slot (cheaper, measured).
        fan = self._fans
        v = x if x.__class__ in _PASS else _cross(x, "the graph's input")
        if fan:
            slots = [None] * self._width
            slots[0] = v
        start = perf_counter_ns()
        for step in self._steps:
            if fan:
                arg = _gather(step.source, slots)
            else:
                arg = v.value if v.__class__ is Opaque else v
            if store is not None and step.node._sz_cached:
                v = _run_cached(step, arg, store, emit, start, ctxs)
            else:
                v = _run(step, arg, emit, start, ctxs)
            if hook is not None:
                hook(step.name, v)
            if fan:
                slots[step.slot] = v
        out = _gather(self._out, slots) if fan else v.value if v.__class__ is Opaque else v
        if emit is not None:
            emit({"fact": "finished", "took_us": (perf_counter_ns() - start) // 1000})
        return out


_FACT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")


class Ctx:
    """A node's handle on the engine: its name, and a way to add a fact."""

    __slots__ = ("name", "_emit")

    def __init__(self, name, emit):
        self.name = name
        self._emit = emit

    def fact(self, fact, **fields):
        """Add ``{"fact": fact, "node": <this node>, **fields}`` to the stream.
        The engine's and the Trainer's own names (``watchers.RESERVED``: ran,
        loss, ...) and a ``node`` field are refused.

        A one-element array or tensor given as a field (``value=x.norm()``)
        becomes its number, so the record keeps a number, not its text."""
        if not isinstance(fact, str) or not _FACT_NAME.fullmatch(fact):
            raise SomatizeValueError(
                f"ctx.fact needs a short name as its first argument (letters, digits, '_', "
                f"'-', '.', at most 64), like ctx.fact('norm', value=1.5); got {fact!r:.80}"
            )
        if fact in RESERVED:
            owner = "engine" if fact in ENGINE_FACTS else "Trainer"
            raise SomatizeValueError(
                f"ctx.fact({fact!r}, ...): {fact!r} is one of the {owner}'s own facts, which the "
                f"record counts runs and times by ({', '.join(sorted(RESERVED))}); a node's fact "
                f"by that name would be taken for one of them. Name yours otherwise, like "
                f"ctx.fact({self.name + '_' + fact!r}, ...)"
            )
        if "node" in fields:
            raise SomatizeValueError(
                f"ctx.fact({fact!r}, node=...): 'node' is filled in by the engine (this node is "
                f"{self.name!r}); name the field otherwise, like ctx.fact({fact!r}, other={fields['node']!r:.40})"
            )
        if self._emit is not None:
            for k, v in fields.items():
                if v.__class__ not in _PASS and getattr(v, "ndim", None) == 0 and hasattr(v, "item"):
                    fields[k] = v.item()
            self._emit({"fact": fact, "node": self.name, **fields})

    def __repr__(self):
        return f"Ctx({self.name!r})"


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


def _failed(step, e, emit, start, t0):
    if emit is not None:
        emit({"fact": "failed", "node": step.name, "began_us": (t0 - start) // 1000,
              "took_us": (perf_counter_ns() - t0) // 1000, "error": f"{type(e).__name__}: {e}"[:500]})
    return NodeError(
        f"node {step.name!r} ({type(step.node).__name__}.forward) raised {type(e).__name__}: {e}"
    )


def _run(step, arg, emit, start, ctxs=None):
    """Run one node: check its output at the edge and, when watched, time it
    and tell the watchers (``ran``); when it raises, ``failed`` and a
    NodeError. ``ctxs``: the watchers' Ctx of each node, made once
    (``Watchers.ctxs``), not once a forward."""
    if emit is None:
        ctx = step.quiet
        t0 = 0
    else:
        ctx = ctxs.get(step.name) if ctxs is not None else None
        if ctx is None or ctx._emit is not emit:
            ctx = Ctx(step.name, emit)
            if ctxs is not None:
                ctxs[step.name] = ctx
        t0 = perf_counter_ns()
    try:
        out = step.forward(arg, ctx)
    except WatcherError:
        raise  # a watcher failed inside ctx.fact: the node did nothing wrong
    except Exception as e:
        raise _failed(step, e, emit, start, t0) from e
    if emit is None:
        return out if out.__class__ in _PASS else _cross(out, step.where)
    took = (perf_counter_ns() - t0) // 1000  # the node's own time, not the edge's check
    if out.__class__ not in _PASS:
        out = _cross(out, step.where)
    emit({"fact": "ran", "node": step.name, "began_us": (t0 - start) // 1000, "took_us": took})
    return out


def _run_cached(step, arg, store, emit, start, ctxs=None):
    """A cached node: recalled when its key is kept, else run and kept."""
    try:
        key_in = store.digest_of(arg)
    except SomatizeError as e:
        raise SomatizeTypeError(
            f"node {step.name!r} is cached, so its input must be data to make a key, but: {e}"
        ) from e
    key = hashlib.sha256((fingerprint(step.node) + key_in).encode()).hexdigest()
    name = f"cache/{step.name}/{key}"
    t0 = perf_counter_ns()
    digest = store.lookup(name)
    if digest is not None:
        value = store.recall(digest)
        if emit is not None:
            emit({"fact": "recalled", "node": step.name, "began_us": (t0 - start) // 1000,
                  "took_us": (perf_counter_ns() - t0) // 1000})
        return Opaque(value)
    crossed = _run(step, arg, emit, start, ctxs)
    t1 = perf_counter_ns()
    value = crossed.value if crossed.__class__ is Opaque else crossed
    codec = codec_for(value)
    store.keep(name, codec.as_data(value) if codec is not None and hasattr(codec, "as_data") else value)
    if emit is not None:
        emit({"fact": "kept", "node": step.name, "took_us": (perf_counter_ns() - t1) // 1000})
    return crossed
