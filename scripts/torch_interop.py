#!/usr/bin/env python3
"""Loads a dptrain checkpoint into the matching PyTorch model and compares outputs.

Inputs [N, D] are features; [N, C, H, W] images, for models with conv2d, pooling and flatten
(nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d, nn.Flatten, and nn.BatchNorm2d for a batchnorm on images).

Builds the nn.Sequential that dp_worker's --model (or --layers) describes, held in a `layers`
attribute as DESIGN.md says, loads the safetensors file with model.load_state_dict(strict=True)
(parameters, running statistics and num_batches_tracked), runs it in eval mode on INPUTS.npy
and compares with OUTPUTS.npy (what `dp_worker --predict` wrote). Needs PyTorch and NumPy
(Debian: python3-torch); exits 77 (skipped) without them, 1 on any mismatch.

    torch_interop.py --model SPEC | --layers W0,W1,... CHECKPOINT INPUTS.npy OUTPUTS.npy
"""
import argparse
import json
import re
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError as missing:
    print(f"torch_interop: skipped: {missing}")
    sys.exit(77)


def read_safetensors(path):
    """The file's tensors, by name, with NumPy only (no safetensors package needed)."""
    with open(path, "rb") as f:
        data = f.read()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    dtypes = {"F32": np.float32, "I64": np.int64}
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[8 + length + begin:8 + length + end], dtype=dtypes[entry["dtype"]])
        tensors[name] = torch.from_numpy(array.reshape(entry["shape"]).copy())
    return tensors


def module_options(text):
    """'linear(256,bias=0)' -> ('linear', ['256'], {'bias': '0'})."""
    match = re.fullmatch(r"\s*(\w+)\s*(?:\((.*)\))?\s*", text)
    name, args = match.group(1), match.group(2) or ""
    positional, named = [], {}
    for item in filter(None, (a.strip() for a in args.split(","))):
        if "=" in item:
            key, value = item.split("=", 1)
            named[key.strip()] = value.strip()
        else:
            positional.append(item)
    return name, positional, named


# Each module's options in dp_worker's order: the first ones may come without name=.
ORDER = {"linear": ["out", "bias"], "conv2d": ["out", "k", "stride", "padding", "bias"],
         "maxpool": ["k", "stride"], "avgpool": ["k", "stride"], "dropout": ["p"],
         "batchnorm": ["momentum", "eps", "sync"]}


def build(spec, sample):
    """The modules of spec on one sample of shape `sample` ((D,) features or (C, H, W) images)."""
    modules, shape = [], tuple(sample)
    for item in re.split(r",(?![^()]*\))", spec):
        name, positional, named = module_options(item)
        o = dict(zip(ORDER.get(name, []), positional), **named)
        if name == "linear":
            out = int(o["out"])
            modules.append(torch.nn.Linear(int(np.prod(shape)), out, bias=o.get("bias", "1") != "0"))
            shape = (out,)
        elif name == "conv2d":
            k, stride, padding = int(o["k"]), int(o.get("stride", "1")), int(o.get("padding", "0"))
            modules.append(torch.nn.Conv2d(shape[0], int(o["out"]), k, stride, padding, bias=o.get("bias", "1") != "0"))
            shape = (int(o["out"]),) + tuple((s + 2 * padding - k) // stride + 1 for s in shape[1:])
        elif name in ("maxpool", "avgpool"):
            k = int(o["k"])
            stride = int(o.get("stride", k))
            pool = torch.nn.MaxPool2d if name == "maxpool" else torch.nn.AvgPool2d
            modules.append(pool(k, stride))
            shape = shape[:1] + tuple((s - k) // stride + 1 for s in shape[1:])
        elif name == "flatten":
            modules.append(torch.nn.Flatten())
            shape = (int(np.prod(shape)),)
        elif name == "relu":
            modules.append(torch.nn.ReLU())
        elif name == "batchnorm":
            norm = torch.nn.BatchNorm2d if len(shape) == 3 else torch.nn.BatchNorm1d
            modules.append(norm(shape[0] if len(shape) == 3 else int(np.prod(shape)), eps=float(o.get("eps", "1e-5")),
                                momentum=float(o.get("momentum", "0.1"))))
        elif name == "dropout":
            modules.append(torch.nn.Dropout(float(o.get("p", "0.5"))))
        else:
            raise SystemExit(f"torch_interop: unknown module {name}")
    return modules


class Model(torch.nn.Module):
    def __init__(self, modules, as_list):
        super().__init__()
        # --layers checkpoints are version 1's MLP: a ModuleList of the Linear layers only.
        self.layers = torch.nn.ModuleList(modules) if as_list else torch.nn.Sequential(*modules)
        self.as_list = as_list

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if self.as_list and i + 1 < len(self.layers):
                x = torch.relu(x)
        return x


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model")
    which.add_argument("--layers")
    p.add_argument("checkpoint")
    p.add_argument("inputs")
    p.add_argument("outputs")
    p.add_argument("--tolerance", type=float, default=1e-4)
    a = p.parse_args()
    x = torch.from_numpy(np.load(a.inputs))
    if a.layers:
        widths = [int(w) for w in a.layers.split(",")]
        model = Model([torch.nn.Linear(i, o) for i, o in zip(widths, widths[1:])], True)
    else:
        model = Model(build(a.model, x.shape[1:]), False)
    model.load_state_dict(read_safetensors(a.checkpoint), strict=True)
    model.eval()
    with torch.no_grad():
        ours = torch.from_numpy(np.load(a.outputs))
        theirs = model(x)
    error = (ours - theirs).abs().max().item() / max(theirs.abs().max().item(), 1e-30)
    print(f"torch_interop: load_state_dict(strict=True) took every tensor; eval outputs of {tuple(x.shape)} "
          f"inputs differ from dp_worker --predict by {error:.3g} (max abs, relative to the largest)")
    return 0 if error <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
