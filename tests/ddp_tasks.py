"""What the ranks of the data-parallel tests run (tests/test_ddp.py): each
rank trains on its share of every batch, and rank 0 returns plain data
(launch sends it back as JSON)."""

import os
import signal

import torch
import torch.distributed as dist

from somatize import Recorder
from somatize.torch import Trainer, parameters

from torch_models import Body, batches, built

MSE = torch.nn.functional.mse_loss
STEPS, BATCH = 6, 12


def flat(g):
    return torch.cat([p.detach().reshape(-1) for p in parameters(g)])


def schedule_of(opt, scheduled):
    return torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7) if scheduled else None


def shares(every, micro, clip, scheduled):
    """Train on this rank's 1/N of every batch; after every update, whether
    the weights are bitwise the same on every rank. Returns (rank 0's)
    weights, the losses each step said, and that check."""
    rank, size = dist.get_rank(), dist.get_world_size()
    g = built(seed=100 + rank, dtype=torch.float64)  # each rank built its own: the Trainer broadcasts rank 0's
    opt = torch.optim.Adam(parameters(g), lr=1e-2)
    t = Trainer(g, MSE, opt, every=every, micro=micro, clip=clip, schedule=schedule_of(opt, scheduled))
    same, losses = [], []
    for x, y in batches(STEPS, n=BATCH, dtype=torch.float64):
        before = t.updates
        losses.append(float(t.step((x.tensor_split(size)[rank], y.tensor_split(size)[rank]))))
        if t.updates != before:
            mine = flat(g)
            same.append(all(torch.equal(mine, other) for other in _gathered(mine, size)))
    if t.close_group():
        mine = flat(g)
        same.append(all(torch.equal(mine, other) for other in _gathered(mine, size)))
    return {"weights": flat(g).tolist(), "losses": losses, "same": same, "updates": t.updates}


def _gathered(t, size):
    out = [torch.empty_like(t) for _ in range(size)]
    dist.all_gather(out, t)
    return out


def resumed(store, die_at=None, die_rank=0):
    """Dropout (each rank's own random stream), every=2, a checkpoint every
    3 steps (one mid-group), a Recorder on every rank (rank 0's writes);
    rank ``die_rank`` SIGKILLs itself as step ``die_at`` begins."""
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(7 + rank)
    g = built(seed=0, dtype=torch.float64)
    torch.manual_seed(0)
    g.node("body").net = Body(dropout=0.3).net.to(torch.float64)
    torch.manual_seed(50 + rank)
    opt = torch.optim.SGD(parameters(g), lr=1e-2, momentum=0.9)
    rec = Recorder(store, run="ddp", resume=True)
    t = Trainer(g, MSE, opt, every=2, watching=rec, store=store, checkpoint="ddp/checkpoint", checkpoint_every=3)
    data = batches(12, n=BATCH, dtype=torch.float64)
    for i in range(t.steps, len(data)):
        if i == die_at and rank == die_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = data[i]
        t.step((x.tensor_split(size)[rank], y.tensor_split(size)[rank]))
    t.close_group()
    rec.close()
    return {"weights": flat(g).tolist(), "recording": rec.recording}


def raises_on(rank_that_raises):
    if dist.get_rank() == rank_that_raises:
        raise ValueError("a bad batch on this rank")
    dist.barrier()
    return "unreachable"


def returns_tensor():
    return torch.zeros(2)


def fitted(store, die_at=None, die_rank=1):
    """fit over a DataLoader with a shuffled DistributedSampler, dropout,
    2 epochs, an evaluation after each on a held-out DistributedSampler
    share, a checkpoint every 3 steps; rank ``die_rank`` SIGKILLs itself in
    its objective's call ``die_at``. Rank 0 returns its weights, the
    evaluations said, and the held-out loss a hand-written loop measures on
    the whole held-out set with the final weights."""
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    rank = dist.get_rank()
    torch.manual_seed(3 + rank)
    g = built(seed=0, dtype=torch.float64)
    torch.manual_seed(0)
    g.node("body").net = Body(dropout=0.2).net.to(torch.float64)
    torch.manual_seed(30 + rank)
    data = batches(6, n=12, dtype=torch.float64)
    x, y = torch.cat([b[0] for b in data]), torch.cat([b[1] for b in data])
    train, held = TensorDataset(x[:48], y[:48]), TensorDataset(x[48:], y[48:])
    loader = DataLoader(train, batch_size=6, sampler=DistributedSampler(train, shuffle=True, seed=5))
    held_out = DataLoader(held, batch_size=4, sampler=DistributedSampler(held, shuffle=False))
    calls = [0]

    def objective(out, target):
        calls[0] += 1
        if calls[0] == die_at and rank == die_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        return MSE(out, target)

    said = []
    rec = Recorder(store, run="fit", resume=True)
    t = Trainer(g, objective, torch.optim.Adam(parameters(g), lr=1e-2), every=2, store=store,
                checkpoint="fit/checkpoint", checkpoint_every=3, watching=[rec])
    t.fit(loader, epochs=2, progress=False, evaluate=held_out)
    rec.close()
    from somatize.record import curve

    if rank == 0:
        said = [float(v) for v in curve(store, run="fit", name="val_loss")]
    net = torch.nn.Sequential(g.node("body").net, g.node("head").out).eval()
    with torch.no_grad():
        whole = float(MSE(net(held.tensors[0]), held.tensors[1]))
    return {"weights": flat(g).tolist(), "val_loss": said, "whole": whole, "steps": t.steps}


def frozen_body(differ):
    """A frozen body and a trained head; ``differ``: each rank built its body
    from its own seed. Returns the head's weights after 4 steps, or the error."""
    rank, size = dist.get_rank(), dist.get_world_size()
    g = built(seed=(rank if differ else 0), dtype=torch.float64, frozen_body=True)
    torch.manual_seed(9 + rank)
    g.node("head").out.reset_parameters()  # trained nodes may differ: rank 0's are broadcast
    try:
        t = Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=1e-2))
    except ValueError as e:
        return {"error": type(e).__name__, "message": str(e)}
    for x, y in batches(4, n=BATCH, dtype=torch.float64):
        t.step((x.tensor_split(size)[rank], y.tensor_split(size)[rank]))
    return {"weights": flat(g).tolist(), "body": torch.cat([p.reshape(-1) for p in g.node("body").parameters()])
            .tolist()}


SLOW_S = 0.1  # a slow rank's sleep a batch: far more than a step of the test model takes


def slow_rank(store, where):
    """Rank 0 watched by a Recorder, 12 batches through ``fit``; rank 1 slow
    by ``SLOW_S`` a batch: "data", in its data iterable, before each of its
    steps begins (a DataLoader slow to load), while rank 0's objective takes
    ``SLOW_S / 10`` more (so rank 0's own steps are the longer); or
    "compute", in its objective."""
    import time

    rank, size = dist.get_rank(), dist.get_world_size()
    g = built(seed=0)

    def data():
        for x, y in batches(12, n=BATCH):
            if where == "data" and rank == 1:
                time.sleep(SLOW_S)
            yield x.tensor_split(size)[rank], y.tensor_split(size)[rank]

    def objective(out, y):
        if where == "compute" and rank == 1:
            time.sleep(SLOW_S)
        elif where == "data" and rank == 0:
            time.sleep(SLOW_S / 10)
        return MSE(out, y)

    rec = Recorder(store, run="slow")
    t = Trainer(g, objective, torch.optim.SGD(parameters(g), lr=1e-2), watching=rec)
    t.fit(data(), progress=False)
    rec.close()
    return t.steps


def hangs(at):
    """Rank 1 stops answering as its data iterable would give batch ``at``
    (it waits forever, as on a lock never released); the others train on."""
    import threading

    rank, size = dist.get_rank(), dist.get_world_size()
    g = built(seed=0)
    t = Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=1e-2))
    for i, (x, y) in enumerate(batches(8, n=BATCH)):
        if i == at and rank == 1:
            threading.Event().wait()  # forever: only the launcher's SIGKILL ends it
        t.step((x.tensor_split(size)[rank], y.tensor_split(size)[rank]))
    return t.steps


def host_syncs(store, every):
    """Rank 0 watched by a Recorder, read_every=16, 16 steps under HostSyncs:
    how many reads off the device each step made (the update's all-reduce
    included)."""
    from somatize.torch import _reading

    from torch_models import HostSyncs

    _reading.READ_AT_MOST_NS = 10**15  # the read by time, out of the way (this rank's own process)
    rank, size = dist.get_rank(), dist.get_world_size()
    g = built(seed=0)
    opt = torch.optim.Adam(parameters(g), lr=1e-2)
    rec = Recorder(store, run="syncs")
    t = Trainer(g, MSE, opt, watching=rec, read_every=16, instruments=False, every=every)
    data = batches(32, n=16)
    for x, y in data[:16]:
        t.step((x.tensor_split(size)[rank], y.tensor_split(size)[rank]))
    t.deliver()
    per_step = []
    with HostSyncs(opt) as syncs:
        for x, y in data[16:]:
            before = syncs.count
            t.step((x.tensor_split(size)[rank], y.tensor_split(size)[rank]))
            per_step.append(syncs.count - before)
    rec.close()
    return per_step



SPIKE = 1e3  # a target this far off overflows fp16's scaled gradients of its rank (and one process's)
STEPS_MIXED = 10


def scaler_of(init_scale):
    """A GradScaler whose decisions stay far from fp16's edge: it backs off
    256x (the scale after a skip is far below what overflowed) and grows
    every 3 updates."""
    return torch.amp.GradScaler("cpu", init_scale=init_scale, backoff_factor=2.0**-8, growth_interval=3)


def mixed(precision, every, init_scale, spike):
    """float32 weights under ``precision`` on this rank's share of every
    batch; with fp16 the Trainer's scaler replaced by ``scaler_of``. At step
    ``spike`` the last rank's last example has a target ``SPIKE`` off, so
    its gradients overflow there alone. Returns, per step: whether the
    weights moved, the scale and the learning rate after it, whether weights
    and scale were bitwise the same on every rank; and each step's gradient
    of the scaled loss with respect to this rank's output rows (the first
    tensor fp16 overflows in), rank 0's and the last rank's."""
    rank, size = dist.get_rank(), dist.get_world_size()
    g = built(seed=100 + rank)
    opt = torch.optim.Adam(parameters(g), lr=1e-2)
    seen = []

    def objective(out, y):
        out.register_hook(lambda grad: seen.append(grad.float().reshape(-1).tolist()))
        return MSE(out, y)

    t = Trainer(g, objective, opt, every=every, precision=precision, schedule=schedule_of(opt, True))
    if precision == "fp16":
        t.scaler = scaler_of(init_scale)
    moved, scales, lrs, same, losses = [], [], [], [], []
    for x, y in mixed_batches(spike):
        before = t.updates
        losses.append(float(t.step((x.tensor_split(size)[rank], y.tensor_split(size)[rank]))))
        moved.append(t.updates != before)
        scale = t.scaler.get_scale() if t.scaler is not None else None
        scales.append(scale)
        lrs.append(opt.param_groups[0]["lr"])
        mine = torch.cat([flat(g), torch.tensor([scale or 0.0])])
        same.append(all(torch.equal(mine, other) for other in _gathered(mine, size)))
    last = torch.tensor(seen)
    every_rank = _gathered(last, size)
    return {"weights": flat(g).tolist(), "moved": moved, "scales": scales, "lrs": lrs, "same": same,
            "losses": losses, "updates": t.updates, "seen": [every_rank[0].tolist(), every_rank[-1].tolist()]}


def mixed_batches(spike):
    data = batches(STEPS_MIXED, n=BATCH)
    if spike is not None:
        data[spike][1][-1] += SPIKE
    return data


def non_finite(store, read_every, every, bad_step, bad_rank, watcher):
    """16 steps; at ``bad_step`` rank ``bad_rank``'s share holds a nan, so
    its own loss is nan. Rank 0 is watched by ``watcher``: "recorder" (its
    reads by time made every step, and a flush at every step, so its reads
    come at other steps than the other ranks'), or "function" (a plain
    function, so rank 0 alone would read each step: read_every=1). Every rank
    catches what it raises; then (a collective, which a rank gone would
    fail) rank 0 gathers each rank's error, step, steps done and whether
    the weights are bitwise the same everywhere, and unchanged since
    before the bad step."""
    from somatize import NonFiniteLoss
    from somatize.torch import _reading

    rank, size = dist.get_rank(), dist.get_world_size()
    g = built(seed=0, dtype=torch.float64)
    opt = torch.optim.SGD(parameters(g), lr=1e-2)
    rec = None
    if watcher == "recorder":
        rec = watching = Recorder(store, run="nan")
        if rank == 0:
            _reading.READ_AT_MOST_NS = 0  # rank 0 also reads by time at every step; the others do not
    else:
        watching = [] if rank else (lambda fact: None)
    t = Trainer(g, MSE, opt, every=every, watching=watching, read_every=read_every, instruments=False)
    data = batches(16, n=BATCH, dtype=torch.float64)
    data[bad_step][0][bad_rank * (BATCH // size)] = float("nan")
    error, before = None, None
    try:
        for i, (x, y) in enumerate(data):
            if i == bad_step:
                before = flat(g)
            t.step((x.tensor_split(size)[rank], y.tensor_split(size)[rank]))
            if rec is not None:
                rec.flush()
        t.deliver()
    except NonFiniteLoss as e:
        error = {"type": "NonFiniteLoss", "step": e.step, "ranks": e.ranks, "message": str(e)}
    except Exception as e:  # noqa: BLE001  what a rank raised, sent back to compare
        error = {"type": type(e).__name__, "message": str(e)}
    import hashlib

    mine = flat(g)
    kind = 0 if error is None else 1 if error["type"] == "NonFiniteLoss" else 2
    digest = list(hashlib.sha256((error or {}).get("message", "").encode()).digest()[:8])
    row = torch.tensor([kind, (error or {}).get("step", -1), t.steps, t.read_every,
                        int(before is not None and torch.equal(mine.view(torch.int64), before.view(torch.int64))),
                        sum(1 << r for r in (error or {}).get("ranks", []))] + digest, dtype=torch.int64)
    said = _gathered(row, size)  # no pickle: each rank's error as numbers, its message as a digest
    bits = mine.view(torch.int64)  # bitwise: nan weights (read_every > 1 updated with the nan) compare too
    same = all(torch.equal(bits, other) for other in _gathered(bits, size))
    if rec is not None:
        rec.close()
    keys = ("kind", "step", "steps", "read_every", "untouched", "ranks")
    return {"ranks": [dict(zip(keys, r[:6].tolist()), digest=r[6:].tolist()) for r in said],
            "error": error, "same": same}
