"""Data parallel on GPUs, ready for a lent machine with 2 or more: the same
figures as bench/bench_ddp.py, with NCCL, each rank on its own device.

  1 GPU               one process on cuda:0, the whole global batch
  N ranks             N ranks (launch: NCCL, rank i on cuda:i), 1/N of each batch
  N ranks+recorder    the same with a Recorder on every rank (rank 0's writes)

Printed: examples a second (medians over rounds, the variants interleaved),
N ranks / 1 GPU (ideal N), and the recording cost under N ranks
(target <= 1.05x). No CUDA may be touched in this process before launch
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
from bench_ddp import work  # noqa: E402


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
    names = ["1 GPU", f"{n} ranks", f"{n} ranks+recorder"]
    got = {k: [] for k in names}
    ratio, cost = [], []
    with tempfile.TemporaryDirectory() as store:
        for r in range(args.rounds):
            order = [(names[0], 1, None), (names[1], n, None), (names[2], n, store)]
            k = r % len(order)
            this = {}
            for name, procs, s in order[k:] + order[:k]:
                this[name] = launch(work, s, None, args.batch, args.steps, nprocs=procs, backend="nccl",
                                    timeout_s=120)["rate"]
                got[name].append(this[name])
            ratio.append(this[names[1]] / this[names[0]])
            cost.append(this[names[1]] / this[names[2]])
    print(f"digits CNN on GPUs, global batch {args.batch}, {args.steps} steps, {args.rounds} rounds, NCCL")
    for name, v in got.items():
        print(f"  {name:<18} {statistics.median(v):12.0f} examples/s")
    print(f"  {n} ranks / 1 GPU             {statistics.median(ratio):.2f}x  (ideal {n}x)")
    print(f"  {n} ranks+recorder time ratio  {statistics.median(cost):.3f}x (target <= 1.05x)")


if __name__ == "__main__":
    main()
