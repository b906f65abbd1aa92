#!/usr/bin/env python3
"""PyTorch training the model dp_worker trains, for bench/RESULTS.md's comparison
(scripts/gpu-check.sh runs both): the same MLP (nn.Linear layers with ReLU between them,
PyTorch's default initialisation), global batch, loss (mean MSE or cross-entropy) and
optimizer (torch.optim.SGD, lr 0.05, momentum 0.9, as dp_worker's defaults), on synthetic
data held on the device like dp_worker's, with a fresh random permutation each epoch.
With --model and --image, the nn.Sequential of a dp_worker --model spec on images instead (a
CNN, built by scripts/torch_interop.py; cuDNN's convolutions, as PyTorch eager runs them).
Eager mode (or --compile: torch.compile of the model), FP32, TF32 or bf16 autocast
(--precision). The loss is summed on the device and read once at the end, so nothing waits
on the host inside the timed steps.

The same steps are also timed as a plain loop over one fixed batch (no permutation, no
gather): the check that the data pipeline adds nothing of its own. An earlier version's
number for the documents' example (1.79 ms with TF32) was twice a plain loop's (0.86 ms);
both are printed, the faster is the baseline, and a gap over 10% is said.

Prints a human line and a machine-readable one:
  torch_ms_per_step=MS torch_samples_per_s=RATE pipeline_ms_per_step=MS plain_ms_per_step=MS
"""
import argparse
import os
import sys
import time

import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--layers", help="widths W0,W1,...,WL as dp_worker's --layers")
    which.add_argument("--model", help="a dp_worker --model spec on images of --image's shape")
    p.add_argument("--image", default="1,28,28", help="--model's sample shape C,H,W")
    p.add_argument("--classes", type=int, default=10, help="--model's outputs")
    p.add_argument("--batch", type=int, required=True, help="global batch per step")
    p.add_argument("--loss", choices=["mse", "xent"], required=True)
    p.add_argument("--samples", type=int, help="dataset size (default: 4 batches)")
    p.add_argument("--steps", type=int, default=60, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                   help="matmuls in FP32, on TF32 tensor cores, or under bf16 autocast")
    p.add_argument("--tf32", action="store_const", const="tf32", dest="precision", help="--precision tf32")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (rows where it finishes)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--device", default="cuda")
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def make_model(widths, device):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device)


def make_data(args, sample, widths, device):
    n = args.samples or 4 * args.batch
    g = torch.Generator(device=device).manual_seed(args.seed)
    x = torch.rand(n, *sample, device=device, generator=g) * 2 - 1
    if args.loss == "mse":
        y = torch.rand(n, widths[-1], device=device, generator=g) * 2 - 1
    else:
        y = torch.randint(0, widths[-1], (n,), device=device, generator=g)
    return x, y


def batches(x, y, batch, device, seed):
    """Endless batches: each epoch a fresh permutation, a short last batch kept."""
    g = torch.Generator(device=device).manual_seed(seed + 1)
    n = x.shape[0]
    while True:
        order = torch.randperm(n, device=device, generator=g)
        for begin in range(0, n, batch):
            idx = order[begin:begin + batch]
            yield x[idx], y[idx]


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def set_precision(precision):
    """TF32 on or off through both APIs: PyTorch 2.9 added fp32_precision beside allow_tf32."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"


def timed(step, args):
    """Mean seconds per step over args.steps after args.warmup untimed ones."""
    for _ in range(args.warmup):
        step()
    synchronize(args.device)
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    synchronize(args.device)
    return (time.perf_counter() - started) / args.steps


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    set_precision(args.precision)
    if args.model:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_interop import build
        sample = [int(d) for d in args.image.split(",")]
        widths = [0, args.classes]
        model = torch.nn.Sequential(*build(args.model, sample)).to(args.device)
    else:
        widths = [int(w) for w in args.layers.split(",")]
        sample = widths[:1]
        model = make_model(widths, args.device)
    forward = torch.compile(model) if args.compile else model
    autocast = torch.autocast(device_type=args.device.split(":")[0], dtype=torch.bfloat16,
                              enabled=args.precision == "bf16")
    loss_fn = torch.nn.MSELoss() if args.loss == "mse" else torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    x, y = make_data(args, sample, widths, args.device)
    data = batches(x, y, args.batch, args.device, args.seed)
    loss_sum = torch.zeros((), device=args.device)

    def train_on(inputs, targets):
        nonlocal loss_sum
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = loss_fn(forward(inputs), targets)
        loss.backward()
        opt.step()
        loss_sum = loss_sum + loss.detach()

    fixed = (x[:args.batch], y[:args.batch])
    pipeline = timed(lambda: train_on(*next(data)), args)
    plain = timed(lambda: train_on(*fixed), args)
    seconds = min(pipeline, plain)
    ms = 1e3 * seconds
    rate = args.batch / seconds
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    gap = f"; the pipeline is {100 * (pipeline / plain - 1):.0f}% slower than the plain loop" if pipeline > 1.1 * plain else ""
    print(f"torch {torch.__version__} on {device_name}: {args.model or 'MLP ' + args.layers}, batch {args.batch}, {args.loss}, "
          f"{args.precision}{' compiled' if args.compile else ''}: {ms:.3f} ms/step, {rate:.0f} samples/s "
          f"(permuted batches {1e3 * pipeline:.3f} ms, one fixed batch {1e3 * plain:.3f} ms{gap}; "
          f"mean loss {loss_sum.item() / (2 * (args.warmup + args.steps)):.4f})")
    print(f"torch_ms_per_step={ms:.4f} torch_samples_per_s={rate:.1f} pipeline_ms_per_step={1e3 * pipeline:.4f} "
          f"plain_ms_per_step={1e3 * plain:.4f}")


if __name__ == "__main__":
    main()
