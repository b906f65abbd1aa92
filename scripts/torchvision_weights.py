#!/usr/bin/env python3
"""Writes torchvision's initial weights of a ResNet as a safetensors file dp_worker --init takes.

    torchvision_weights.py NAME CLASSES CHANNELS OUT.safetensors [--seed S]

NAME is a torchvision model dp_worker has as a --model preset (resnet18, resnet34, resnet50,
resnet101, resnet152); the file holds torchvision.models.NAME(num_classes=CLASSES)'s state_dict
after torch.manual_seed(S) (default 0): the parameters and running statistics as F32, each
BatchNorm's num_batches_tracked as I64, under torchvision's names (conv1.weight,
layer1.0.bn1.running_mean, layer2.0.downsample.0.weight, fc.bias, ...), which are dp_worker's for
--model NAME. For CHANNELS != 3, conv1 is nn.Conv2d(CHANNELS, 64, 7, 2, 3, bias=False), initialized
as torchvision initializes its convolutions (kaiming_normal_, mode fan_out, relu), the model
scripts/torch_interop.py builds for such images. Written with the standard library and NumPy
(no safetensors package) to a temporary file in OUT's directory, then renamed onto OUT, so OUT is
never seen half written. Exits 77 (skipped) without PyTorch or torchvision, 2 on bad arguments.
"""
import argparse
import json
import os
import struct
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision  # noqa: F401  (torch_interop.torchvision_resnet imports it again)
except ImportError as missing:
    print(f"torchvision_weights: skipped: {missing}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_interop import TORCHVISION, torchvision_resnet  # noqa: E402


def safetensors_bytes(state, metadata):
    """The safetensors file of the named tensors in `state`: F32, or I64 for integer tensors."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, tensor in state.items():
        array = tensor.detach().cpu().numpy()
        if np.issubdtype(array.dtype, np.integer):
            dtype, array = "I64", array.astype("<i8")
        else:
            dtype, array = "F32", array.astype("<f4")
        blob = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)   # spaces keep the data 8-byte aligned, as the reference writer does
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write_atomically(path, data):
    directory = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=TORCHVISION)
    p.add_argument("classes", type=int)
    p.add_argument("channels", type=int)
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.classes < 1 or a.channels < 1:
        p.error("CLASSES and CHANNELS must be at least 1")
    torch.manual_seed(a.seed)
    model = torchvision_resnet(a.name, a.classes, a.channels)
    metadata = {"format": "pt", "source": f"torchvision {torchvision.__version__} models.{a.name}"
                f"(num_classes={a.classes}), {a.channels} channels, seed {a.seed}"}
    state = model.state_dict()
    try:
        write_atomically(a.out, safetensors_bytes(state, metadata))
    except OSError as error:
        print(f"torchvision_weights: cannot write {a.out}: {error}", file=sys.stderr)
        return 1
    print(f"torchvision_weights: wrote {a.out}: {len(state)} tensors of torchvision's {a.name}"
          f"(num_classes={a.classes}) on {a.channels}-channel images, seed {a.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
