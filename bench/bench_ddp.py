"""Data parallel on this machine: the digits CNN (tests/digits_models.py),
cross-entropy, Adam, a global batch of 512 (one step keeps a core busy),
STEPS steps after WARMUP (which holds the instruments' first ten recorded
updates, a run's start-up cost, as bench_digits leaves it apart), all launched with somatize.torch.launch (forked
ranks, gloo). Variants, interleaved round by round, medians over rounds:

  1 process, 1 core   one process, the whole batch, torch on one thread (the
                      baseline the target is against: a batch that keeps a core busy)
  1 process, 2 cores  the same, torch's intra-op threads on both cores
  2 ranks             two ranks, 256 examples each, one core each (launch's share)

and the Recorder's cost under 2 ranks, measured apart (``paired``): in one
job a round, two Trainers on the same ranks, one watched by a Recorder (on
every rank; rank 0's writes), taking turns in blocks of steps; the median
over every pair of blocks of the ratio watched / not, wall-clock and CPU
seconds (launching each variant apart made the ratio swing 0.83-1.25x on a
loaded machine: a fork's and a drifting load's noise, not the Recorder's).

Timed inside rank 0 from a barrier to its last step's update (the ranks
wait for each other at every update, so rank 0's clock is the job's).
Throughput = examples / s; ratio = 2 ranks / 1 process (1 core, and all
cores) in the same round. On a shared machine the wall-clock ratio is
bounded by the cores others leave free, so the CPU seconds every rank spent
(time.process_time, summed over the ranks) are printed too: 1 process's
over 2 ranks' for the same work says what splitting costs (1.0: nothing),
and twice that is the speed-up two free cores would give.
Targets (issue 20): 2 ranks >= 1.6x one process; recorder <= 1.05x.

``--gpus N`` (N >= 2, a machine with GPUs): the same with NCCL, each rank on
its own device: 1 GPU (one process on cuda:0, the whole global batch)
against N ranks (1/N of each batch each), ideal Nx, and the recorder's cost
under N ranks measured paired. No CUDA is touched in this process before
launch (it forks): only the device count is asked.

    .venv/bin/python bench/bench_ddp.py [--rounds 5] [--pairs 16] [--quick]
    .venv/bin/python bench/bench_ddp.py --gpus 2 [--batch 8192] [--steps 100] [--rounds 5]
"""

import argparse
import statistics
import sys
import tempfile
import time

import torch
from common import machine, quartiles, reported, target
from digits_models import cnn, digits

from somatize import Recorder
from somatize.torch import Trainer, launch, parameters

BATCH, STEPS, WARMUP = 512, 40, 12  # the warm-up holds the instruments' first ten recorded updates


def work(store, threads=None, batch=BATCH, steps=STEPS):
    """Rank 0's examples a second over ``steps`` steps of a global ``batch``
    (each rank its share), after WARMUP; on the rank's GPU when launch gave it one."""
    import torch.distributed as dist

    if threads is not None:
        torch.set_num_threads(threads)
    cuda = torch.cuda.is_initialized() or (dist.is_initialized() and dist.get_backend() == "nccl")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else None
    rank, size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    train, _ = digits()
    x, y = train.tensors
    g = cnn(seed=0)
    if device is not None:
        for node in g.nodes:
            node.net.to(device)
        x, y = x.to(device), y.to(device)
    rec = Recorder(store, run=f"ddp-{time.time_ns()}") if store else None
    t = Trainer(g, torch.nn.functional.cross_entropy, torch.optim.Adam(parameters(g), lr=1e-3), watching=rec,
                device=device)
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(steps + WARMUP):
        i = torch.randint(0, len(y), (batch,), generator=gen).to(x.device)
        batches.append((x[i].tensor_split(size)[rank], y[i].tensor_split(size)[rank]))
    for b in batches[:WARMUP]:
        t.step(b)
    t.deliver()
    if size > 1:
        dist.barrier()
    began, cpu = time.perf_counter(), time.process_time()
    for b in batches[WARMUP:]:
        t.step(b)
    t.deliver()
    if device is not None:
        torch.cuda.synchronize()
    took, cpu = time.perf_counter() - began, time.process_time() - cpu
    if size > 1:  # every rank's CPU time (its threads', the Recorder's flusher included)
        summed = torch.tensor([cpu], dtype=torch.float64, device=device)
        dist.all_reduce(summed)
        cpu = float(summed)
    if rec is not None:
        rec.close()
    return {"rate": steps * batch / took, "cpu_rate": steps * batch / cpu}


def paired(store, pairs=16, block=20, batch=BATCH, threads=None):
    """The Recorder's cost under the ranks, measured in one job: two
    Trainers on the same ranks, on copies of one model, one watched by a
    Recorder (with its instruments, as a user gets it) and one not, run in
    blocks of ``block`` steps taking turns (ABBA: the one first in a pair
    alternates), each block from a barrier to its last update, the losses
    read and the Recorder flushed inside its block (so none of its work
    spills into the other's; at most one flush a block more than its 0.25 s
    timer would make). Per pair: the ratio of the watched block's wall time
    to the other's (rank 0's clock: the ranks wait for each other at every
    update) and of the CPU seconds every rank spent (``time.process_time``,
    the Recorder's flush thread included). Pairing inside one job keeps a
    fork, the caches and a slow drift of the machine's load out of the
    ratio; its median over pairs is what a loaded machine can still say.
    Returns each pair's ratios (rank 0's)."""
    import torch.distributed as dist

    if threads is not None:
        torch.set_num_threads(threads)
    cuda = torch.cuda.is_initialized() or (dist.is_initialized() and dist.get_backend() == "nccl")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else None
    rank, size = dist.get_rank(), dist.get_world_size()
    train, _ = digits()
    x, y = train.tensors
    if device is not None:
        x, y = x.to(device), y.to(device)
    trainers = []
    for watched in (False, True):
        g = cnn(seed=0)
        if device is not None:
            for node in g.nodes:
                node.net.to(device)
        rec = Recorder(store, run=f"paired-{time.time_ns()}") if watched else None
        trainers.append((Trainer(g, torch.nn.functional.cross_entropy, torch.optim.Adam(parameters(g), lr=1e-3),
                                 watching=rec, device=device), rec))
    gen = torch.Generator().manual_seed(0)

    def batches(k):
        out = []
        for _ in range(k):
            i = torch.randint(0, len(y), (batch,), generator=gen).to(x.device)
            out.append((x[i].tensor_split(size)[rank], y[i].tensor_split(size)[rank]))
        return out

    for t, _ in trainers:  # the warm-up: a run's start, the instruments' first ten recorded updates
        for b in batches(WARMUP):
            t.step(b)
        t.deliver()
    wall, cpu = [[], []], [[], []]
    for p in range(pairs):
        data = batches(block)
        for which in ((0, 1) if p % 2 == 0 else (1, 0)):
            t, rec = trainers[which]
            dist.barrier()
            began, cpu0 = time.perf_counter(), time.process_time()
            for b in data:
                t.step(b)
            t.deliver()
            if rec is not None:
                rec.flush()
            if device is not None:
                torch.cuda.synchronize()
            wall[which].append(time.perf_counter() - began)
            cpu[which].append(time.process_time() - cpu0)
    summed = torch.tensor(cpu, dtype=torch.float64, device=device)
    dist.all_reduce(summed)  # every rank's CPU seconds, block by block
    cpu = summed.tolist()
    for _, rec in trainers:
        if rec is not None:
            rec.close()
    return {"wall": [w1 / w0 for w0, w1 in zip(*wall)], "cpu": [c1 / c0 for c0, c1 in zip(*cpu)]}


def all_reduce_us():
    """Median µs of one all-reduce of the CNN's gradients (float32), as the update makes it."""
    import torch.distributed as dist

    n = sum(p.numel() for p in parameters(cnn(seed=0)))
    buf = torch.ones(n + 8)
    took = []
    for _ in range(60):
        dist.barrier()
        t = time.perf_counter_ns()
        dist.all_reduce(buf)
        took.append((time.perf_counter_ns() - t) / 1000)
    return {"numel": n, "us": statistics.median(took[10:])}


def on_gpus(args):
    """The same figures on ``args.gpus`` GPUs with NCCL."""
    n = args.gpus
    names = ["1 GPU", f"{n} ranks"]
    got = {k: [] for k in names}
    ratio, cost = [], {"wall": [], "cpu": []}
    with tempfile.TemporaryDirectory() as store:
        for r in range(args.rounds):
            order = [(names[0], 1), (names[1], n)]
            k = r % len(order)
            this = {}
            for name, procs in order[k:] + order[:k]:
                this[name] = launch(work, None, None, args.batch, args.steps, nprocs=procs, backend="nccl",
                                    timeout_s=120)["rate"]
                got[name].append(this[name])
            ratio.append(this[names[1]] / this[names[0]])
            pairs = launch(paired, store, args.pairs, 20, args.batch, nprocs=n, backend="nccl", timeout_s=300)
            for kind in cost:
                cost[kind] += pairs[kind]
    print(f"digits CNN on GPUs, global batch {args.batch}, {args.steps} steps, {args.rounds} rounds, NCCL; "
          f"{machine()}")
    for name, v in got.items():
        print(f"  {name:<18} {statistics.median(v):12.0f} examples/s")
    print(f"  Trainer + Recorder / Trainer, {n} ranks: wall-clock {quartiles(cost['wall'])}; "
          f"CPU seconds {quartiles(cost['cpu'])}")
    reported(f"{n} ranks / 1 GPU, examples a second (ideal {n}x)", statistics.median(ratio))
    target(f"Trainer + Recorder / Trainer, {n} ranks, wall-clock", statistics.median(cost["wall"]), 1.05)


def main():
    global WARMUP
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=16, help="pairs of blocks a round in the recorder's job")
    ap.add_argument("--gpus", type=int, default=0, help="N >= 2: on N GPUs with NCCL")
    ap.add_argument("--batch", type=int, default=8192, help="the global batch on GPUs")
    ap.add_argument("--steps", type=int, default=100, help="timed steps on GPUs")
    ap.add_argument("--quick", action="store_true", help="one short round: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.pairs, args.steps = 1, 2, 10
        WARMUP = 2  # the forked ranks inherit it
    if args.gpus:
        if args.gpus < 2 or torch.cuda.device_count() < args.gpus:
            sys.exit(f"bench_ddp --gpus {args.gpus}: needs 2 or more GPUs, found {torch.cuda.device_count()}")
        return on_gpus(args)
    steps = args.steps if args.quick else STEPS
    block = 5 if args.quick else 20
    got = {"1 process, 1 core": [], "1 process, 2 cores": [], "2 ranks": []}
    ratio, ratio_all, efficiency = [], [], []
    cost = {"wall": [], "cpu": []}
    with tempfile.TemporaryDirectory() as store:
        for r in range(args.rounds):
            order = [("1 process, 1 core", 1, 1), ("1 process, 2 cores", 1, None), ("2 ranks", 2, None)]
            k = r % len(order)
            this = {}
            for name, n, threads in order[k:] + order[:k]:
                this[name] = launch(work, None, threads, BATCH, steps, nprocs=n, timeout_s=120)
                got[name].append(this[name])
            ratio.append(this["2 ranks"]["rate"] / this["1 process, 1 core"]["rate"])
            ratio_all.append(this["2 ranks"]["rate"] / this["1 process, 2 cores"]["rate"])
            efficiency.append(this["2 ranks"]["cpu_rate"] / this["1 process, 1 core"]["cpu_rate"])
            pairs = launch(paired, store, args.pairs, block, nprocs=2, timeout_s=120)
            for kind in cost:
                cost[kind] += pairs[kind]
    reduce = launch(all_reduce_us, nprocs=2, timeout_s=60)
    print(f"digits CNN, global batch {BATCH}, {steps} steps, {args.rounds} rounds; {machine()}")
    print(f"  all-reduce of its gradients ({reduce['numel']:,} floats), 2 ranks: {reduce['us']:.0f} µs")
    for name, v in got.items():
        print(f"  {name:<18} {statistics.median(r['rate'] for r in v):10.0f} examples/s, "
              f"{statistics.median(r['cpu_rate'] for r in v):10.0f} examples a CPU second")
    e = statistics.median(efficiency)
    print(f"  CPU seconds: 1 process / 2 ranks for the same work {e:.2f} (1.0: no cost to split; "
          f"on two free cores 2 ranks would be {2 * e:.2f}x one)")
    print(f"  Trainer + Recorder / Trainer, 2 ranks, blocks of {block} steps taking turns in one job:")
    print(f"    wall-clock   {quartiles(cost['wall'])}")
    print(f"    CPU seconds  {quartiles(cost['cpu'])}")
    reported("2 ranks / 1 process on 2 cores, examples a second", statistics.median(ratio_all))
    reported("Trainer + Recorder / Trainer, 2 ranks, CPU seconds", statistics.median(cost["cpu"]))
    target("2 ranks / 1 process on 1 core, examples a second", statistics.median(ratio), 1.6, at_least=True)
    target("Trainer + Recorder / Trainer, 2 ranks, wall-clock", statistics.median(cost["wall"]), 1.05)


if __name__ == "__main__":
    main()
