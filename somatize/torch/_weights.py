"""Weights node by node: what can be trained, what is settled, what is kept.

The rule kept here: a node's weights are named the way torch names them
inside the node (``"net.0.weight"``), and grouped by the node's name in the
graph (``{"body": {...}, "head": {...}}``). An export is plain data (a dict
of dicts of tensors), so a Store keeps it tensor by tensor and a federated
round is arithmetic on dicts. Nothing here runs a graph.
"""

from __future__ import annotations

import math

import torch
import xxhash

from .._base.errors import SomatizeKeyError, SomatizeTypeError, SomatizeValueError
from .._graph import engine as _engine
from ._codec import digest_tensors, raw_bytes

# Below this many bytes, still() also re-hashes the weights (xxh3, fast), so an
# edit that bypasses torch's version counters (``p.data.add_(1)``) is caught.
_REHASH_BELOW = 4 << 20


def _node_params(node):
    params = getattr(node, "parameters", None)
    if params is None:
        return []
    got = list(params())
    for p in got:
        if not isinstance(p, torch.Tensor):
            raise SomatizeTypeError(
                f"node {node.name!r}: parameters() returned a {type(p).__name__}; it should "
                "return torch tensors, e.g. `return list(self.net.parameters())`"
            )
    return got


def _held(node):
    """(name, value) of every torch module and tensor ``node`` holds as an
    attribute, in a list, tuple or dict (str keys) too; the engine's own
    attributes (``_sz_*``) left out. The node is never asked."""

    def walk(prefix, v):
        if isinstance(v, (torch.nn.Module, torch.Tensor)):
            yield prefix, v
        elif isinstance(v, (list, tuple)):
            for i, item in enumerate(v):
                yield from walk(f"{prefix}.{i}", item)
        elif isinstance(v, dict):
            for k, item in v.items():
                if isinstance(k, str):
                    yield from walk(f"{prefix}.{k}", item)

    for attr, v in vars(node).items():
        if not attr.startswith("_sz_"):
            yield from walk(attr, v)


def state(node):
    """The named tensors of one node: every torch module, parameter or buffer
    it holds as an attribute (a list or dict of modules too), then any tensor
    its ``parameters()`` returns that was not found that way."""
    out, seen = {}, set()

    def add(name, t):
        if id(t) not in seen:
            seen.add(id(t))
            out[name] = t

    for prefix, v in _held(node):
        if isinstance(v, torch.nn.Module):
            for k, t in v.state_dict(keep_vars=True).items():
                add(f"{prefix}.{k}", t)
        else:
            add(prefix, v)
    for i, p in enumerate(_node_params(node)):
        add(f"parameters.{i}", p)
    return out


def modules(node):
    """The torch modules ``node`` holds (found as ``state`` finds its
    weights), each once: what is put in train or eval mode for it."""
    out, seen = [], set()
    for _, v in _held(node):
        if isinstance(v, torch.nn.Module) and id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def parameters(g):
    """The parameters an optimizer should train: every node's ``parameters()``
    except the frozen nodes', each tensor once."""
    out, seen = [], set()
    for node in g.nodes:
        if node.is_frozen:
            continue
        for p in _node_params(node):
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def frozen_parameters(g):
    """{id(tensor): node name} of the frozen nodes' parameters."""
    return {id(p): n.name for n in g.nodes if n.is_frozen for p in _node_params(n)}


def not_frozen_in_torch(g):
    """The frozen nodes with weights that ``freeze(g)`` has not made frozen
    yet: no weights digest, or a parameter still taking gradients."""
    return [
        n.name for n in g.nodes
        if n.is_frozen and state(n) and (n._sz_weights is None or any(p.requires_grad for p in _node_params(n)))
    ]


def freeze(g):
    """Make ``.frozen()`` true on the torch side: the frozen nodes' parameters
    stop taking gradients, and the digest of each one's weights enters its
    fingerprint, with a check the engine runs before it serves a cache.

    A frozen node's torch modules are put in eval mode (BatchNorm's running
    statistics stay still, dropout is off); the Trainer keeps them there.

    Returns ``g``. Call it again after loading new weights into a frozen node.
    What is caught afterwards: an optimizer step or any in-place update
    through the tensor, ``p.data = ...``, a module or parameter swapped; and,
    for a node under 4 MiB of weights, any change of their bytes at all. Past
    that, an edit through ``p.data.add_(...)`` (which torch does not count)
    goes unseen: do not edit a frozen node's weights through ``.data``.
    """
    for node in g.nodes:
        if not node.is_frozen:
            continue
        named = state(node)  # may be empty: freezing is also the promise that
        for p in _node_params(node):  # the node's other state is settled
            p.requires_grad_(False)
        for m in modules(node):
            m.train(False)  # eval mode (Module.eval is train(False))
        _engine.set_weights(node, digest_tensors(named), _still(node, named))
    return g


def _still(node, named):
    """A cheap check that ``node``'s weights are the ones just digested: the
    same tensor objects (parameters() not swapped), the same memory (no
    ``.data =``), the same version counters (no in-place update), and for
    small weights the same bytes."""
    tensors = tuple(named.values())
    params = tuple(_node_params(node))
    marks = tuple((t._version, t.data_ptr()) for t in tensors)
    small = sum(t.numel() * t.element_size() for t in tensors) < _REHASH_BELOW
    sums = _sum(tensors) if small else None

    def still():
        now = _node_params(node)
        if len(now) != len(params) or any(a is not b for a, b in zip(now, params)):
            return False
        for t, (version, ptr) in zip(tensors, marks):
            if t._version != version or t.data_ptr() != ptr:
                return False
        return sums is None or _sum(tensors) == sums

    return still


def _sum(tensors):
    h = xxhash.xxh3_128()
    for t in tensors:
        h.update(raw_bytes(t))
    return h.digest()


def export(g):
    """The weights of every node that has any, node by node, as tensors of
    their own (cloned and detached: later training does not move them)."""
    out = {}
    for node in g.nodes:
        named = state(node)
        if named:
            out[node.name] = {k: t.detach().clone() for k, t in named.items()}
    return out


def load(g, exported):
    """Put an export back into ``g``'s nodes, in place (the optimizer's
    references stay valid). Refuses, before writing anything, an export whose
    nodes, names, shapes or dtypes differ from the graph's."""
    if not isinstance(exported, dict):
        raise SomatizeTypeError(
            f"load(g, exported) takes what export() returned (a dict of node name -> "
            f"dict of tensors); got {type(exported).__name__}"
        )
    have = {n.name: state(n) for n in g.nodes}
    have = {k: v for k, v in have.items() if v}
    _same_layout(have, exported, "the graph", "the export")
    with torch.no_grad():
        for node_name, named in have.items():
            for k, t in named.items():
                t.copy_(exported[node_name][k])
    for node in g.nodes:
        if node.is_frozen and node._sz_weights is not None:
            freeze(g)  # the frozen weights moved on purpose: take their digest again
            break
    return g


def _same_layout(a, b, a_says, b_says):
    if set(a) != set(b):
        raise SomatizeKeyError(
            f"{a_says} has weights for nodes {sorted(a)} but {b_says} for {sorted(b)}: "
            f"missing {sorted(set(a) - set(b))}, extra {sorted(set(b) - set(a))}"
        )
    for node_name in a:
        ka, kb = a[node_name], b[node_name]
        if not isinstance(kb, dict) or set(ka) != set(kb):
            raise SomatizeKeyError(
                f"node {node_name!r}: {a_says} names {sorted(ka)} but {b_says} names "
                f"{sorted(kb) if isinstance(kb, dict) else type(kb).__name__}"
            )
        for k in ka:
            ta, tb = ka[k], kb[k]
            if not isinstance(tb, torch.Tensor):
                raise SomatizeTypeError(f"node {node_name!r}, {k!r}: {b_says} holds a {type(tb).__name__}, "
                                        "not a tensor")
            if ta.shape != tb.shape or ta.dtype != tb.dtype:
                raise SomatizeValueError(
                    f"node {node_name!r}, {k!r}: {a_says} has {ta.dtype} {list(ta.shape)} but "
                    f"{b_says} has {tb.dtype} {list(tb.shape)}"
                )


def fedavg(exports, weights=None):
    """The node-by-node average of exports, weighted by ``weights`` (say, each
    client's number of examples; equal when None). Floating tensors are
    averaged; integer tensors (a batch counter) must agree and are kept."""
    exports = list(exports)
    if not exports:
        raise SomatizeValueError("fedavg needs at least one export; got none")
    if weights is None:
        weights = [1.0] * len(exports)
    weights = [float(w) for w in weights]
    if len(weights) != len(exports):
        raise SomatizeValueError(f"fedavg got {len(exports)} exports but {len(weights)} weights; "
                                 "give one weight per export")
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise SomatizeValueError(f"fedavg weights must be finite, non-negative and not all zero; got {weights}")
    first = exports[0]
    for i, e in enumerate(exports[1:], 1):
        _same_layout(first, e, "export 0", f"export {i}")
    total = sum(weights)
    out = {}
    for node_name, named in first.items():
        out[node_name] = {}
        for k, t in named.items():
            if t.is_floating_point() or t.is_complex():
                # first + sum of weighted differences from it: exports that
                # agree give the first back bit for bit, not a rounded mean.
                wide = torch.complex128 if t.is_complex() else torch.float64
                base = t.detach().to(wide)
                acc = base.clone()
                for e, w in zip(exports[1:], weights[1:]):
                    acc.add_(e[node_name][k].detach().to(wide) - base, alpha=w / total)
                out[node_name][k] = acc.to(t.dtype)
            else:
                for i, e in enumerate(exports[1:], 1):
                    if not torch.equal(e[node_name][k], t):
                        raise SomatizeValueError(
                            f"node {node_name!r}, {k!r} is a {t.dtype} tensor (a count, not a weight) "
                            f"and export {i} disagrees with export 0; integer tensors cannot be "
                            "averaged. Make them agree before fedavg."
                        )
                out[node_name][k] = t.detach().clone()
    return out
