#!/usr/bin/env python3
"""PyTorch DDP's side of the anchors' synthetic ResNet benchmark (the shape of Horovod's
pytorch_synthetic_benchmark.py and of PyTorch's DDP benchmark), for scripts/resnet-benchmark.sh:

  torch_ddp_benchmark.py [--model resnet18] [--size 32] [--batch 16] [--world 1] [--threads 1]
                         [--warmup 3] [--steps 10] [--classes 10] [--device cpu|cuda]
                         [--channels-last] [--bf16] [--bind auto|none]

W processes joined by torch.distributed (gloo on the CPU, nccl with --device cuda; --backend
overrides) each train torchvision.models.NAME(num_classes=K) wrapped in DistributedDataParallel
(also at W = 1, as Horovod's benchmark runs hvd at one process) with torch.optim.SGD (lr 0.01,
momentum 0.9) and cross-entropy, on one fixed random batch of B images [B, 3, S, S] per rank
(torch.randn, random labels): no data pipeline, as the anchors' benchmark. --warmup untimed
steps, a barrier, --steps timed steps, a barrier: rank 0's wall time over the timed steps
(the GPU synchronised at both ends) gives the mean step, B / step the images/s per rank and W
times that the total.

How the W processes start: under mpirun (OMPI_COMM_WORLD_RANK/SIZE), torchrun (RANK,
WORLD_SIZE, LOCAL_RANK) or any launcher that sets RANK and WORLD_SIZE, each process is one
rank and --world is taken from the launcher; otherwise torch.multiprocessing.spawn starts
--world processes. The rendezvous is TCP at MASTER_ADDR:MASTER_PORT (127.0.0.1 and a free port
by default, so no network is needed: gloo then talks over the loopback interface,
GLOO_SOCKET_IFNAME=lo unless set). --threads T: torch.set_num_threads(T) in every rank, and
OpenBLAS's pool (Debian's PyTorch runs its GEMMs on OpenBLAS) sized T with OpenMP's idle threads
sleeping, as scripts/torch-cpu-baseline.py settles them. --bind auto: a spawned rank r binds
itself to cores r*T .. r*T+T-1 of the cores this process may use when W*T of them exist (the
cores scripts/resnet-benchmark.sh gives each dp_worker rank); under a launcher nothing is bound
here (the launcher binds, as resnet-benchmark.sh's mpirun line does for both programs).

--channels-last: the model and input in torch.channels_last. --bf16: torch.autocast with
bfloat16 (on the CPU too: torch.autocast("cpu"), which most CPUs without AVX-512 BF16 run
slower than FP32; the line says "bf16 autocast").

Prints one parseable line on stdout (rank 0):
  torch-ddp: model M size S batch B/rank world W threads T: X img/s per rank, Y img/s total (mean step Z ms over N steps)
and a description of the run on stderr. Exit status 77 where torch or torchvision is missing.
"""
import argparse
import os
import socket
import sys
import time
import types


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18", help="a torchvision.models name (resnet18, resnet50, ...)")
    p.add_argument("--size", type=int, default=32, help="image height and width (3 channels)")
    p.add_argument("--batch", type=int, default=16, help="images per rank per step")
    p.add_argument("--world", type=int, default=1, help="processes to spawn (ignored under mpirun or torchrun)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--classes", type=int, default=10, help="the model's outputs (num_classes)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                   help="torch.distributed backend; auto: nccl with --device cuda, else gloo")
    p.add_argument("--channels-last", action="store_true", help="model and input in channels_last memory format")
    p.add_argument("--bf16", action="store_true", help="torch.autocast with bfloat16 (cuda, or the CPU's autocast)")
    p.add_argument("--bind", choices=["auto", "none"], default="auto",
                   help="auto: spawned ranks bind to their own T cores when W*T cores exist; none: never")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    for name in ("size", "batch", "world", "threads", "steps", "classes"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.warmup < 0:
        p.error("--warmup must be at least 0")
    return a


def launcher_ranks():
    """(rank, world, local rank) from mpirun or torchrun, or None when this process must spawn."""
    env = os.environ
    if "OMPI_COMM_WORLD_SIZE" in env:
        return (int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"]),
                int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", env["OMPI_COMM_WORLD_RANK"])))
    if "PMI_RANK" in env and "PMI_SIZE" in env:  # MPICH's and Intel MPI's mpirun
        return int(env["PMI_RANK"]), int(env["PMI_SIZE"]), int(env.get("MPI_LOCALRANKID", env["PMI_RANK"]))
    if "RANK" in env and "WORLD_SIZE" in env:  # torchrun, torch.distributed.launch
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", env["RANK"]))
    return None


def settle_threads(threads):
    """As scripts/torch-cpu-baseline.py: OpenBLAS's pool sized before torch loads (it starts with
    torch), OpenMP's idle threads asleep instead of spinning against OpenBLAS's."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


ARGS = parse_args()
settle_threads(ARGS.threads)
try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torchvision
except ImportError as missing:
    print(f"torch_ddp_benchmark: needs PyTorch and torchvision: {missing}", file=sys.stderr)
    sys.exit(77)


def bind(rank, a, world):
    """Rank r on cores r*T .. r*T+T-1 of this process's cores, when there are W*T of them."""
    cores = sorted(os.sched_getaffinity(0))
    if a.bind == "none" or world * a.threads > len(cores):
        return "unbound"
    mine = cores[rank * a.threads:(rank + 1) * a.threads]
    os.sched_setaffinity(0, mine)
    return "cores " + ",".join(str(c) for c in mine)


def train(rank, a, world, local_rank, spawned):
    local_rank = rank if local_rank is None else local_rank
    binding = bind(rank, a, world) if spawned else "as the launcher bound it"
    torch.set_num_threads(a.threads)
    backend = a.backend if a.backend != "auto" else ("nccl" if a.device == "cuda" else "gloo")
    if a.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("torch_ddp_benchmark: --device cuda, but torch sees no GPU")
        gpus = torch.cuda.device_count()
        if backend == "nccl" and world > gpus and rank == 0:
            print(f"torch_ddp_benchmark: {world} ranks on {gpus} GPU(s): NCCL refuses two ranks on one GPU; "
                  "try --backend gloo", file=sys.stderr)
        device = torch.device("cuda", local_rank % gpus)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=world)
    torch.manual_seed(a.seed)
    model = getattr(torchvision.models, a.model)(num_classes=a.classes).to(device)
    memory_format = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if a.device == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(a.seed + 1 + rank)
    data = torch.randn(a.batch, 3, a.size, a.size, generator=generator).to(device, memory_format=memory_format)
    target = torch.randint(0, a.classes, (a.batch,), generator=generator).to(device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.bf16):
            loss = loss_fn(model(data), target)
        loss.backward()
        optimizer.step()

    def synchronize():
        if a.device == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()

    if rank == 0:
        print(f"torch_ddp_benchmark: PyTorch {torch.__version__}, torchvision {torchvision.__version__}, "
              f"{backend}, {world} rank(s) x {a.threads} thread(s) ({torch.get_num_threads()} in torch), "
              f"{a.device}{' bf16 autocast' if a.bf16 else ''}{' channels_last' if a.channels_last else ''}; "
              f"rank 0 {binding}", file=sys.stderr)
    for _ in range(a.warmup):
        step()
    synchronize()
    started = time.perf_counter()
    for _ in range(a.steps):
        step()
    synchronize()
    seconds = time.perf_counter() - started
    if rank == 0:
        ms = 1e3 * seconds / a.steps
        per_rank = a.batch * a.steps / seconds
        print(f"torch-ddp: model {a.model} size {a.size} batch {a.batch}/rank world {world} threads {a.threads}: "
              f"{per_rank:.2f} img/s per rank, {per_rank * world:.2f} img/s total "
              f"(mean step {ms:.2f} ms over {a.steps} steps)", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = ARGS
    if not isinstance(getattr(torchvision.models, a.model, None), types.FunctionType):  # not the module resnet
        raise SystemExit(f"torch_ddp_benchmark: torchvision {torchvision.__version__} has no model '{a.model}'")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if os.environ["MASTER_ADDR"] in ("127.0.0.1", "localhost"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ranks = launcher_ranks()
    if ranks:
        if "MASTER_PORT" not in os.environ:
            raise SystemExit("torch_ddp_benchmark: under a launcher every rank needs the same MASTER_PORT")
        rank, world, local_rank = ranks
        train(rank, a, world, local_rank, False)
    else:
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        if a.world == 1:
            train(0, a, 1, 0, True)
        else:
            mp.spawn(train, args=(a, a.world, None, True), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
