"""Data parallel: one model trained on the ranks of a torch.distributed process group.

The rule kept here: every rank holds the same weights after every update, and
an update is exactly one step on the concatenation of every rank's batches.
The graph never knows: the Trainer synchronises at the update, nowhere else.

Explicit collectives, not ``DistributedDataParallel``: a graph is many nodes,
each with its own modules, not one ``nn.Module`` whose forward DDP could
wrap, and the Trainer already owns the moment of the update (``every=N``,
``micro=N``, a group closed early). So at the update, and only there, the
gradients of the optimizer's parameters are flattened into buckets (one per
dtype and device, at most ``BUCKET_BYTES`` each) and all-reduced, each
bucket's collective launched before the first is waited for. There is no
``no_sync`` to forget: the pieces and steps of a group only accumulate
locally. The cost against DDP: no overlap of the all-reduce with the
backward (bench/RESULTS.md, data parallel, measures what it costs here).
Frozen nodes take no part (their parameters are not the optimizer's).

What one all-reduce carries, besides the gradients (``extras``, float64 or
the gradients' float dtype): for each parameter whether this rank has a
gradient for it (a parameter no rank touched keeps ``grad = None``, as in
one process), the examples in the rank's group, the step's examples, and
per rank its loss times its examples and two clocks (its own slots, the
others zero, so the sum holds every rank's): its work in the step (from the
step's start to this all-reduce) and its time before the step (from the
return of the last collective it made here to the step's start: loading its
batch, the loop's own work between steps). The collective returns at about
the same moment on every rank, so the rank whose two clocks add up to the
most is the one the others wait for at the update (record/_ranks.py); a
rank slow at loading its data is slow before its step, not in it.

The Trainer weights each rank's losses by 1/size, so a rank's gradient is
the mean over its group divided by size (and its backward sees, row for row, the numbers one process on the whole batch
does: with fp16 the same values overflow, not twice them); it is multiplied
by size times its examples, summed and divided by the total: the mean over
every example of every rank, exact when ranks hold different counts too.

fp16: the scaled gradients are all-reduced, then the scaler unscales them
(the Trainer's ``_update``). An inf or nan on any rank reaches every rank
through the sum, so each finds it in bitwise the same gradients and skips
the same update, its scale moved alike, with no collective of its own.

The step's loss is made as the gradients are: the loss recorded is the
mean over every rank's examples (the ranks' slots summed in rank order, so
bitwise the same on every rank; ``ranks`` in the record says how many
ranks). It is not finite exactly when some rank's is, so every rank finds a
non-finite loss at the same step, and the slots name the rank; the Trainer
refuses it on every rank at the same step (``Trainer._read``), with no
message of its own. A step that closes no group (``every=N``) all-reduces only
its loss and clocks: one small collective a step.
"""

from __future__ import annotations

import hashlib
from time import perf_counter_ns

import torch

from .._base.errors import RankLost, SomatizeTypeError, SomatizeValueError
from . import _launch

BUCKET_BYTES = 25 * 2**20
_FLOATS = (torch.float64, torch.float32)


def ranks_of(group):
    """The Trainer's ``group=``: None (the default group when
    torch.distributed is initialised), a process group, or False (train in
    this process alone). Returns a ``Ranks`` or None (one process)."""
    import torch.distributed as dist

    if group is False:
        return None
    if group is None:
        if not (dist.is_available() and dist.is_initialized()):
            return None
    elif not isinstance(group, dist.ProcessGroup):
        raise SomatizeTypeError(
            f"group= takes a torch.distributed process group, None (the default group once "
            f"init_process_group ran) or False (train alone); got {type(group).__name__}"
        )
    ranks = Ranks(group)
    return ranks if ranks.size > 1 else None


class Ranks:
    """The ranks of a process group, as the Trainer uses them."""

    def __init__(self, group):
        import torch.distributed as dist

        self.dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.src = 0 if group is None else dist.get_global_rank(group, 0)  # rank 0 of the group, globally
        nccl = dist.get_backend(group) == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if nccl else None  # where collectives run
        self.losses = None  # each rank's own loss times its examples in the last sync (a tensor; see _extras)
        self.returned = perf_counter_ns()  # when the last collective made here returned: a step's time before it

    def stepping(self, step, began):
        """Step ``step`` began on this rank (perf_counter_ns ``began``): told
        to ``launch``, which names the last step of a rank that stops answering."""
        _launch.stepping(step, began)

    def broadcast(self, tensors, what):
        """Rank 0's values of ``tensors`` put on every rank, in place."""
        with torch.no_grad():
            for t in tensors:
                self._collective(what, lambda t=t: self.dist.broadcast(t, self.src, group=self.group))

    def check_frozen(self, fingerprints):
        """Refuse frozen nodes whose fingerprints (code and weights) differ
        from rank 0's: a frozen node is settled, so it is not broadcast."""
        names = sorted(fingerprints)
        if not names:
            return
        mine = torch.tensor([list(hashlib.sha256(str(fingerprints[k]).encode()).digest()) for k in names],
                            dtype=torch.uint8)
        every = self.gather(mine, "comparing the frozen nodes' fingerprints")
        differ = sorted({names[i] for other in every[1:] for i in range(len(names))
                         if not torch.equal(other[i], every[0][i])})
        if differ:
            ranks = [r for r, other in enumerate(every) if not torch.equal(other, every[0])]
            raise SomatizeValueError(
                f"frozen node(s) {differ} differ between ranks: rank(s) {ranks} hold other code or weights "
                "than rank 0. A frozen node is settled and takes no part in training, so its weights are not "
                "broadcast: load the same weights on every rank (one export kept in the store, recalled by "
                "each) before making the Trainer"
            )

    def sync(self, params, examples, loss, n, began):
        """The update's all-reduce: gradients averaged over every example of
        every rank, in place. ``loss`` (a 0-d tensor, the mean of the step's
        ``n`` examples here) or None; ``began``: perf_counter_ns when the
        step began, or None (no step under way). Returns (the loss over every
        rank's examples or None, each rank's clocks: see ``_extras``), tensors
        left on the device:
        nothing here waits for it unless this rank lacks a gradient (then it
        reads which parameters some rank has one for)."""
        device = params[0].device if params else torch.device("cpu")
        flags = [0.0 if p.grad is None else 1.0 for p in params]
        by_kind: dict = {}
        for i, p in enumerate(params):
            by_kind.setdefault((p.dtype, p.device), []).append(i)
        buckets = []  # (indices, flat)
        for indices in by_kind.values():
            part, size = [], 0
            for i in indices:
                p = params[i]
                part.append(i)
                size += p.numel() * p.element_size()
                if size >= BUCKET_BYTES:
                    buckets.append(part)
                    part, size = [], 0
            if part:
                buckets.append(part)
        flats = []
        for part in buckets:
            pieces = [(params[i].grad if params[i].grad is not None else torch.zeros_like(params[i])).reshape(-1)
                      for i in part]
            flat = torch.cat(pieces) if len(pieces) > 1 else pieces[0].clone()
            flat.mul_(examples * self.size)  # the Trainer weighted this rank's losses by 1/size
            flats.append(flat)
        # the extras ride in the first bucket of a float dtype on the first parameter's device, else alone
        host = next((k for k, f in enumerate(flats) if f.dtype in _FLOATS and f.device == device), None)
        dtype = flats[host].dtype if host is not None else torch.float64
        extras = self._extras(flags, examples, loss, n, began, dtype, device)
        if host is not None:
            cut = flats[host].numel()
            flats[host] = torch.cat([flats[host], extras])
        works = [self._collective("the gradients' all-reduce", lambda f=f: self.dist.all_reduce(
            f, group=self.group, async_op=True)) for f in flats]
        if host is None:
            works.append(self._collective("the gradients' all-reduce", lambda: self.dist.all_reduce(
                extras, group=self.group, async_op=True)))
        for w in works:
            self._collective("the gradients' all-reduce", w.wait)
        if host is not None:
            extras = flats[host][cut:].clone()  # a copy: a view would keep the bucket alive while it is held
            flats[host] = flats[host][:cut]
        p_count = len(params)
        # A rank with every gradient knows every parameter has one somewhere; only one lacking some reads the flags
        has = None if all(flags) else extras[:p_count].tolist()
        total = extras[p_count]
        for part, flat in zip(buckets, flats):
            flat.div_(total)
            at = 0
            for i in part:
                p = params[i]
                k = p.numel()
                if has is None or has[i] > 0:
                    if p.grad is None:
                        p.grad = flat[at:at + k].view_as(p).clone()
                    else:
                        p.grad.copy_(flat[at:at + k].view_as(p))
                at += k
        return self._loss_and_clocks(extras[p_count + 1:], loss)

    def sync_loss(self, loss, n, began):
        """A step that closes no group: its loss over every rank's examples, and each rank's clocks."""
        extras = self._extras([], 0, loss, n, began, torch.float64, loss.device)
        self._collective("the loss's all-reduce", lambda: self.dist.all_reduce(extras, group=self.group))
        return self._loss_and_clocks(extras[1:], loss)

    def least(self, value, what):
        """The least of an int over every rank."""
        t = torch.tensor([int(value)], dtype=torch.int64, device=self.device)
        self._collective(what, lambda: self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN, group=self.group))
        return int(t.item())

    def summed(self, values, what):
        """Floats summed over every rank (float64)."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        self._collective(what, lambda: self.dist.all_reduce(t, group=self.group))
        return t.tolist()

    def gather(self, tensor, what):
        """``tensor`` (same shape and dtype on every rank) from every rank, in rank order."""
        sent = tensor.contiguous() if self.device is None else tensor.to(self.device)
        out = [torch.empty_like(sent) for _ in range(self.size)]
        self._collective(what, lambda: self.dist.all_gather(out, sent, group=self.group))
        return out if self.device is None else [t.to(tensor.device) for t in out]

    def _extras(self, flags, examples, loss, n, began, dtype, device):
        """[flags, examples, n, each rank's loss * n, each rank's work µs,
        each rank's µs before its step]: this rank's own slots filled, the
        others zero, so the sum holds every rank's. Its work: from ``began``
        (the step's start, perf_counter_ns) to now; before its step: from the
        return of its last collective to ``began``. Both 0 when ``began`` is
        None (a group closed with no step under way)."""
        size, rank = self.size, self.rank
        clocks = [0.0] * (2 * size)
        if began is not None:
            clocks[rank] = float((perf_counter_ns() - began) // 1000)
            clocks[size + rank] = float(max(0, began - self.returned) // 1000)
        head = torch.tensor(flags + [float(examples), float(n)] + [0.0] * rank, dtype=dtype, device=device)
        weighted = (loss.detach().to(dtype) * n).reshape(1) if loss is not None else torch.zeros(1, dtype=dtype,
                                                                                               device=device)
        tail = torch.tensor([0.0] * (size - 1 - rank) + clocks, dtype=dtype, device=device)
        return torch.cat([head, weighted.to(device), tail])

    def _loss_and_clocks(self, extras, loss):
        """From [n summed, each rank's loss * n, each rank's clocks]: the loss over
        every rank's examples (a 0-d tensor: the sum of the ranks' slots, in rank
        order, so bitwise the same on every rank, and not finite exactly when
        some rank's loss is not) and the clocks (a tensor: each rank's work µs,
        then each rank's µs before its step); each rank's own slot
        kept as ``losses``, to name a rank whose loss was not finite."""
        size = self.size
        self.losses = extras[1:1 + size]
        return (None if loss is None else (self.losses.sum() / extras[0]).to(loss.dtype)), extras[1 + size:]

    def _collective(self, what, call):
        try:
            done = call()
            self.returned = perf_counter_ns()
            return done
        except RuntimeError as e:  # torch.distributed's errors (DistBackendError, timeouts) are RuntimeErrors
            others = [r for r in range(self.size) if r != self.rank]
            raise RankLost(
                f"rank {self.rank} of {self.size}: {what} failed, so another rank ({_listed(others)}) "
                f"is gone (killed, or it raised) or stopped answering within the process group's timeout. "
                f"torch.distributed said: {str(e).strip().splitlines()[0][:300]}. The launcher names the "
                "rank that was lost; resume the job from its last checkpoint on the same number of ranks.",
                rank=self.rank,
            ) from e


def _listed(ranks):
    return ranks[0] if len(ranks) == 1 else "one of " + ", ".join(str(r) for r in ranks)
