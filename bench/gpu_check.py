"""The Trainer on a real device, in a few minutes: run it where a GPU is lent.

    python bench/gpu_check.py [--device cuda] [--steps 200] [--quick]

Checks, each printed with OK or FAIL (the exit status is the number failed):

1. device=: a batch made on the CPU (a tuple, and a dict with keys=) is
   moved to the device; the weights move, and equal a hand-written loop on
   the device (float32, within 1e-5: cuDNN/cuBLAS may pick other kernels).
2. bf16 and fp16 autocast on the device against the hand-written autocast
   loop (fp16 with torch.amp.GradScaler), within 1e-5.
3. Host syncs: a Trainer watched by a Recorder, 64 steps, read_every=32,
   instruments off; the syncs counted (TorchFunctionMode over item, tolist,
   __float__, __bool__, ...), outside the optimizer's own step: expected 2
   (the two bulk reads). With fp16, GradScaler.step reads found-inf itself
   (torch's own sync, one per update): not counted against the Trainer.
4. Step time: the Trainer against the hand-written loop reading loss.item()
   each step, medians over the steps (reported, no target).

``--device cpu`` runs the same on the CPU (bf16 and fp16 autocast exist there).

Target: 2 host syncs over 64 watched steps (the bulk reads, none a step).
"""

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import machine, reported, target

from somatize import Graph, Node, Opaque, Recorder, Store
from somatize.torch import Trainer, _reading, parameters

from torch_models import HostSyncs  # the host-sync counter the tests use

MSE = torch.nn.functional.mse_loss


class Block(Node):
    def __init__(self, a, b):
        self.net = torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.ReLU())

    def forward(self, x, ctx):
        return Opaque(self.net(x))

    def parameters(self):
        return list(self.net.parameters())


def graph(device):
    torch.manual_seed(0)
    g = Graph.somatize(Block(64, 256).named("a") >> Block(256, 256).named("b") >> Block(256, 1).named("c"))
    for n in g.nodes:
        n.net.to(device)
    return g


def batches(k, device="cpu"):
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(k):
        x = torch.randn(128, 64, generator=gen)
        out.append((x.to(device), x.sum(1, keepdim=True).to(device)))
    return out


def hand_written(g, data, device, precision=None):
    net = torch.nn.Sequential(*(copy.deepcopy(n.net) for n in g.nodes))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    for x, y in data:
        x, y = x.to(device), y.to(device)
        if dtype is None:
            loss = MSE(net(x), y)
        else:
            with torch.autocast(device.type, dtype=dtype):
                loss = MSE(net(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
        opt.zero_grad()
    return net


def gap(trainer, net):
    got = [p for n in trainer.g.nodes for p in n.net.parameters()]
    return max((a.detach() - b.detach()).abs().max().item() for a, b in zip(got, net.parameters()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="fewer timed steps: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.steps = 20
    print(f"on {args.device}; {machine()}")
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # one thread: the machine's other work does not take turns inside each step
    failed = 0

    def check(name, ok, detail=""):
        nonlocal failed
        failed += not ok
        print(f"{'OK  ' if ok else 'FAIL'} {name} {detail}", flush=True)

    data = batches(20)  # on the CPU: the Trainer moves them
    for precision in (None, "bf16", "fp16"):
        g = graph(device)
        net = hand_written(g, data, device, precision)
        t = Trainer(g, MSE, torch.optim.Adam(parameters(g), lr=1e-3), device=device, precision=precision)
        for b in data:
            t.step(b)
        d = gap(t, net)
        check(f"device={device} precision={precision}: equal to the hand-written loop", d <= 1e-5, f"(max gap {d:.2e})")

    g = graph(device)
    t = Trainer(g, MSE, torch.optim.Adam(parameters(g), lr=1e-3), device=device, keys=("x", "y"))
    t.step({"x": data[0][0], "y": data[0][1]})
    second = t.step({"x": data[1][0], "y": data[1][1]})
    check("a dict batch is moved and trained on", t.updates == 2 and second.device.type == device.type)

    _reading.READ_AT_MOST_NS = 10**15  # the read by time (every 0.25 s) out of the way: reads by count only
    with tempfile.TemporaryDirectory() as tmp:
        g = graph(device)
        opt = torch.optim.Adam(parameters(g), lr=1e-3)
        rec = Recorder(Store(Path(tmp) / "s"), run="sync")
        t = Trainer(g, MSE, opt, device=device, watching=rec, read_every=32, instruments=False)
        on_device = batches(64, device)
        with HostSyncs(opt) as syncs:
            for b in on_device:
                t.step(b)
        rec.close()
        check("host syncs over 64 watched steps (read_every=32)", syncs.count == 2, f"({syncs.count}, expected 2)")
        host_syncs = syncs.count

    g = graph(device)
    raw = torch.nn.Sequential(*(copy.deepcopy(n.net) for n in g.nodes))
    raw_opt = torch.optim.Adam(raw.parameters(), lr=1e-3)
    t = Trainer(g, MSE, torch.optim.Adam(parameters(g), lr=1e-3), device=device)
    on_device = batches(args.steps, device)
    times = {"raw+item": [], "trainer": []}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for x, y in on_device:
        sync()
        t0 = time.perf_counter()
        loss = MSE(raw(x), y)
        loss.backward()
        raw_opt.step()
        raw_opt.zero_grad()
        loss.item()
        sync()
        t1 = time.perf_counter()
        t.step((x, y))
        sync()
        t2 = time.perf_counter()
        times["raw+item"].append(t1 - t0)
        times["trainer"].append(t2 - t1)
    for k, v in times.items():
        print(f"     {k:10s} {statistics.median(v) * 1e6:9.1f} µs a step (median of {len(v)})")
    reported("a Trainer step / the hand-written loop's (loss.item() each step)",
             statistics.median(times["trainer"]) / statistics.median(times["raw+item"]))
    target("host syncs over 64 watched steps (read_every=32)", host_syncs, 2, "syncs")
    print(f"{failed} failed", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
