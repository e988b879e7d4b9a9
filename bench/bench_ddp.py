"""Data parallel on this machine: the digits CNN (tests/digits_models.py),
cross-entropy, Adam, a global batch of 512 (one step keeps a core busy),
STEPS steps after WARMUP (which holds the instruments' first ten recorded
updates, a run's start-up cost, as bench_digits leaves it apart), all launched with somatize.torch.launch (forked
ranks, gloo). Variants, interleaved round by round, medians over rounds:

  1 process, 1 core   one process, the whole batch, torch on one thread (the
                      baseline the target is against: a batch that keeps a core busy)
  1 process, 2 cores  the same, torch's intra-op threads on both cores
  2 ranks             two ranks, 256 examples each, one core each (launch's share)
  2 ranks+recorder    the same with a Recorder on every rank (rank 0's writes)

Timed inside rank 0 from a barrier to its last step's update (the ranks
wait for each other at every update, so rank 0's clock is the job's).
Throughput = examples / s; ratio = 2 ranks / 1 process (1 core, and all
cores) in the same round. On a shared machine the wall-clock ratio is
bounded by the cores others leave free, so the CPU seconds every rank spent
(time.process_time, summed over the ranks) are printed too: 1 process's
over 2 ranks' for the same work says what splitting costs (1.0: nothing),
and twice that is the speed-up two free cores would give.
Targets (issue 20): 2 ranks >= 1.6x one process; recorder <= 1.05x.

    .venv/bin/python bench/bench_ddp.py [--rounds 5]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from somatize import Recorder
from somatize.torch import Trainer, launch, parameters

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from digits_models import cnn, digits  # noqa: E402

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    got = {"1 process, 1 core": [], "1 process, 2 cores": [], "2 ranks": [], "2 ranks+recorder": []}
    ratio, ratio_all, cost, efficiency, cpu_cost = [], [], [], [], []
    with tempfile.TemporaryDirectory() as store:
        for r in range(args.rounds):
            order = [("1 process, 1 core", 1, None, 1), ("1 process, 2 cores", 1, None, None),
                     ("2 ranks", 2, None, None), ("2 ranks+recorder", 2, store, None)]
            k = r % len(order)
            this = {}
            for name, n, s, threads in order[k:] + order[:k]:
                this[name] = launch(work, s, threads, nprocs=n, timeout_s=120)
                got[name].append(this[name])
            ratio.append(this["2 ranks"]["rate"] / this["1 process, 1 core"]["rate"])
            ratio_all.append(this["2 ranks"]["rate"] / this["1 process, 2 cores"]["rate"])
            cost.append(this["2 ranks"]["rate"] / this["2 ranks+recorder"]["rate"])
            efficiency.append(this["2 ranks"]["cpu_rate"] / this["1 process, 1 core"]["cpu_rate"])
            cpu_cost.append(this["2 ranks"]["cpu_rate"] / this["2 ranks+recorder"]["cpu_rate"])
    reduce = launch(all_reduce_us, nprocs=2, timeout_s=60)
    print(f"digits CNN, global batch {BATCH}, {STEPS} steps, {args.rounds} rounds, cores {os.cpu_count()}, "
          f"load average at the end {os.getloadavg()[0]:.2f}")
    print(f"  all-reduce of its gradients ({reduce['numel']:,} floats), 2 ranks: {reduce['us']:.0f} µs")
    for name, v in got.items():
        print(f"  {name:<18} {statistics.median(r['rate'] for r in v):10.0f} examples/s, "
              f"{statistics.median(r['cpu_rate'] for r in v):10.0f} examples a CPU second")
    print(f"  2 ranks / 1 process, 1 core  {statistics.median(ratio):.2f}x  (target >= 1.6x)")
    print(f"  2 ranks / 1 process, 2 cores {statistics.median(ratio_all):.2f}x")
    print(f"  2 ranks+recorder time ratio  {statistics.median(cost):.3f}x (target <= 1.05x)")
    e = statistics.median(efficiency)
    print(f"  CPU seconds: 1 process / 2 ranks for the same work {e:.2f} (1.0: no cost to split; "
          f"on two free cores 2 ranks would be {2 * e:.2f}x one)")
    print(f"  CPU seconds: 2 ranks+recorder / 2 ranks {statistics.median(cpu_cost):.3f}x")


if __name__ == "__main__":
    main()
