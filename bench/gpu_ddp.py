"""Data parallel on GPUs, ready for a lent machine with 2 or more: the same
figures as bench/bench_ddp.py, with NCCL, each rank on its own device.

  1 GPU               one process on cuda:0, the whole global batch
  N ranks             N ranks (launch: NCCL, rank i on cuda:i), 1/N of each batch

Printed: examples a second (medians over rounds, the variants interleaved),
N ranks / 1 GPU (ideal N), and the recording cost under N ranks (target
<= 1.05x) as bench_ddp measures it (``paired``: a Trainer with a Recorder
and one without taking turns in blocks of steps in one job, the median of
each pair's ratio, wall-clock and CPU seconds). No CUDA may be touched in this process before launch
(it forks), so this script asks torch.cuda only for the device count.

    python bench/gpu_ddp.py [--gpus 2] [--batch 8192] [--steps 100] [--rounds 5]
"""

import argparse
import os
import statistics
import sys
import tempfile

import torch

from somatize.torch import launch

sys.path.insert(0, os.path.dirname(__file__))
from bench_ddp import paired, quartiles, work  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.gpus < 2:
        sys.exit(f"gpu_ddp: needs 2 or more GPUs, found {torch.cuda.device_count()}")
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
            pairs = launch(paired, store, 16, 20, args.batch, nprocs=n, backend="nccl", timeout_s=300)
            for kind in cost:
                cost[kind] += pairs[kind]
    print(f"digits CNN on GPUs, global batch {args.batch}, {args.steps} steps, {args.rounds} rounds, NCCL")
    for name, v in got.items():
        print(f"  {name:<18} {statistics.median(v):12.0f} examples/s")
    print(f"  {n} ranks / 1 GPU             {statistics.median(ratio):.2f}x  (ideal {n}x)")
    print(f"  Trainer + Recorder / Trainer, {n} ranks (target <= 1.05x): wall-clock {quartiles(cost['wall'])}; "
          f"CPU seconds {quartiles(cost['cpu'])}")


if __name__ == "__main__":
    main()
