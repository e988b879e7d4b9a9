"""A training script a test runs in a fresh process and kills with SIGKILL
(tests/test_trainer_resume.py): dropout, a StepLR schedule, fp16 with its
gradient scaler, every=3, fit over a shuffled DataLoader (a sampler drawing
from a generator), a checkpoint every 4 steps, a Recorder watching.

    python resume_child.py STORE KILL_AT    (KILL_AT=-1: never killed)
"""

import os
import signal
import sys

import torch

from somatize import Graph, Recorder, Store
from somatize.torch import Trainer, parameters

from torch_models import Body, Head

store, kill_at = Store(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
g = Graph.somatize(Body(dropout=0.3).named("body") >> Head().named("head"))
gen = torch.Generator().manual_seed(3)
x = torch.randn(80, 8, generator=gen)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(7))
calls = [0]


def objective(out, y):
    if calls[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    calls[0] += 1
    return torch.nn.functional.mse_loss(out, y)


resumed = os.path.exists(os.path.join(sys.argv[1], "runs", "train"))
recorder = Recorder(store, run="train", resume=resumed)
opt = torch.optim.Adam(parameters(g), lr=1e-2)
t = Trainer(g, objective, opt, every=3, watching=recorder, store=store, precision="fp16",
            schedule=torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.7),
            checkpoint="train/checkpoint", checkpoint_every=4)
print("resumed at", t.steps, flush=True)
t.fit(loader, epochs=2, progress=False)
recorder.close()
store.keep("train/final", {"weights": t.export(), "updates": t.updates, "lr": opt.param_groups[0]["lr"],
                           "scale": t.scaler.get_scale(), "rng": torch.rand(3)})
