#!/usr/bin/env python3
"""ddp: a tiny DistributedDataParallel training job for gpumesh clusters.

Run under torchrun on every member of a cluster (gloo, CPU):

  python3 -m torch.distributed.run --nnodes=$NNODES --node-rank=$NODE_RANK \
    --nproc-per-node=1 --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT ddp.py

It trains nn.Linear(8, 1) for --steps steps of SGD on data that depends
only on (step, rank), so that a run resumed from a checkpoint ends with
the same weights as an uninterrupted one. Rank 0 keeps the model and the
step in $CHECKPOINT_DIR/ckpt.pt every --checkpoint-every steps (written
by rename); every rank starts from the checkpoint it finds there (gpumesh
gives every member rank 0's). At the end rank 0 prints one line,
`ddp {...}`, with the final weights.

`ddp.py --reference --world N` trains the same model in one process on
the data of all N ranks, which is what DDP computes, and prints the same
line.
"""

import argparse
import json
import os
import time

import torch
import torch.nn as nn


def batch(step, rank, n=16):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(n, 8, generator=g)
    w = torch.arange(1, 9, dtype=torch.float32) / 8
    y = x @ w.unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def model():
    torch.manual_seed(7)
    return nn.Linear(8, 1)


def result(m, **extra):
    w = m.weight.detach().flatten().tolist()
    b = m.bias.detach().item()
    return "ddp " + json.dumps(dict(weights=w, bias=b, **extra))


def reference(a):
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=a.lr)
    for step in range(a.steps):
        xs, ys = zip(*(batch(step, r) for r in range(a.world)))
        x, y = torch.cat(xs), torch.cat(ys)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    print(result(m, steps=a.steps, started_at=0, attempt=0), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.reference:
        return reference(a)

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = os.environ.get("JOB_ATTEMPT", "1")
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=a.lr)
    ckdir = os.environ.get("CHECKPOINT_DIR", "")
    ck = os.path.join(ckdir, "ckpt.pt") if ckdir else ""
    start = 0
    if ck and os.path.exists(ck):
        state = torch.load(ck)
        m.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    print(f"attempt {attempt} rank {rank} of {world} starts at step {start}", flush=True)
    ddp = DDP(m)
    # One all_reduce first: the members reach each other.
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    if rank == 0:
        print(f"all_reduce ok: {t.item():g}", flush=True)
    for step in range(start, a.steps):
        x, y = batch(step, rank)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        done = step + 1
        if rank == 0:
            print(f"step {done}", flush=True)
            if ck and done % a.checkpoint_every == 0:
                torch.save({"model": m.state_dict(), "opt": opt.state_dict(), "step": done}, ck + ".tmp")
                os.replace(ck + ".tmp", ck)
        if a.step_sleep:
            time.sleep(a.step_sleep)
    if rank == 0:
        print(result(m, steps=a.steps, started_at=start, attempt=int(attempt)), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
