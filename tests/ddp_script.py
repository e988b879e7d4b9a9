"""A data-parallel training script as people write one for torchrun, unchanged:
python -m torch.distributed.run --nproc-per-node=2 tests/ddp_script.py STORE
(tests/test_ddp.py runs it). The same code on every rank: rank 0's Recorder
writes the run; the others' write nothing."""

import datetime
import sys

import torch
import torch.distributed as dist

from somatize import Recorder
from somatize.torch import Trainer, parameters

from torch_models import batches, built

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank, size = dist.get_rank(), dist.get_world_size()
g = built(seed=rank)
with Recorder(sys.argv[1], run="torchrun") as rec:
    t = Trainer(g, torch.nn.functional.mse_loss, torch.optim.SGD(parameters(g), lr=1e-2), watching=rec)
    for x, y in batches(8, n=16):
        t.step((x.tensor_split(size)[rank], y.tensor_split(size)[rank]))
    t.deliver()
print(f"rank {rank}: recording={rec.recording}")
# Every rank done (rank 0's close included) before any tears gloo down: one rank
# destroying its group while the other still closed once killed it with SIGABRT.
dist.barrier()
dist.destroy_process_group()
