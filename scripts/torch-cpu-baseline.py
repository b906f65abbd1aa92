#!/usr/bin/env python3
"""PyTorch training on the CPU what dp_worker trains, for scripts/throughput.sh's comparison.

The same MLP (nn.Linear layers with ReLU between them, PyTorch's initialisation), or with --model
and --image the nn.Sequential of a dp_worker --model spec on images (a CNN: scripts/torch_interop.py
builds it), global batch, loss (mean cross-entropy) and optimizer (torch.optim.SGD, or AdamW with
--optimizer adamw) on synthetic data of the same shape,
with a fresh random permutation each epoch. --world 1 trains in this process with --threads
intra-op threads; --world W > 1 starts W processes joined by DistributedDataParallel over gloo,
each with --threads threads and bound to its own cores (os.sched_setaffinity), each taking
batch / W samples of every global batch, as dp_worker's ranks do. OpenBLAS (PyTorch's GEMMs in
Debian's build) gets --threads threads too, and OpenMP's threads sleep when idle (see
settle_threads). Needs Debian's python3-torch; dptrain itself never does.

Prints a human line and a machine-readable one:
  torch_ms_per_step=MS torch_samples_per_s=RATE
"""
import argparse
import os
import socket
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="784,1024,1024,10", help="widths W0,W1,...,WL as dp_worker's --layers")
    p.add_argument("--model", help="a dp_worker --model spec instead of --layers (needs --image)")
    p.add_argument("--image", default="1,28,28", help="--model's sample shape C,H,W")
    p.add_argument("--classes", type=int, default=10, help="--model's output classes")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--batch", type=int, default=256, help="global batch per step")
    p.add_argument("--world", type=int, default=1, help="processes (DDP over gloo when more than 1)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--samples", type=int, default=20000, help="synthetic dataset size")
    p.add_argument("--steps", type=int, default=100, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def settle_threads(threads):
    """Debian's PyTorch runs its GEMMs on OpenBLAS's own pthreads beside its OpenMP pool. With
    OpenMP's default spin-waiting the two pools fight for the cores (784,1024,1024,10, 2 threads
    on 2 cores: 59.9 ms/step, 22.7 with OpenMP's threads sleeping), and OpenBLAS's pool, started
    when torch loads, would keep every core when DDP ranks bind themselves to theirs. Both are
    settled before torch loads, unless the caller's environment says otherwise."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))


settle_threads(parse_args().threads)
try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as missing:
    print(f"torch-cpu-baseline: needs PyTorch (Debian: python3-torch): {missing}", file=sys.stderr)
    sys.exit(77)


def make_model(widths):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def train(rank, a, port):
    torch.set_num_threads(a.threads)
    if a.world > 1:
        cores = sorted(os.sched_getaffinity(0))
        per_rank = max(1, len(cores) // a.world)
        os.sched_setaffinity(0, cores[rank * per_rank:(rank + 1) * per_rank] or cores)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.world)
    widths = [int(w) for w in a.layers.split(",")]
    sample = [int(d) for d in a.image.split(",")] if a.model else widths[:1]
    classes = a.classes if a.model else widths[-1]
    torch.manual_seed(a.seed)
    if a.model:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_interop import build
        model = torch.nn.Sequential(*build(a.model, sample))
    else:
        model = make_model(widths)
    if a.world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    generator = torch.Generator().manual_seed(a.seed + 1)
    x = torch.rand(a.samples, *sample, generator=generator) * 2 - 1
    y = torch.randint(0, classes, (a.samples,), generator=generator)
    if a.optimizer == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    local = a.batch // a.world
    order, position, started = torch.randperm(a.samples, generator=generator), 0, None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            if a.world > 1:
                dist.barrier()
            started = time.perf_counter()
        if position + a.batch > a.samples:
            order, position = torch.randperm(a.samples, generator=generator), 0
        batch = order[position + rank * local:position + (rank + 1) * local]
        position += a.batch
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x[batch]), y[batch]).backward()
        optimizer.step()
    if a.world > 1:
        dist.barrier()
    seconds = time.perf_counter() - started
    if rank == 0:
        ms = 1e3 * seconds / a.steps
        rate = a.batch * a.steps / seconds
        print(f"PyTorch {torch.__version__} {'DDP gloo ' if a.world > 1 else ''}W={a.world} x {a.threads} thread(s): "
              f"{a.model or 'MLP ' + a.layers}, batch {a.batch}: {ms:.2f} ms/step, {rate:.0f} samples/s")
        print(f"torch_ms_per_step={ms:.4f} torch_samples_per_s={rate:.1f}")
    if a.world > 1:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = parse_args()
    if a.world == 1:
        train(0, a, None)
    else:
        mp.spawn(train, args=(a, free_port()), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
