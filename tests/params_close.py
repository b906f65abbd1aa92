#!/usr/bin/env python3
"""params_close.py A B TOL: the relative error ||A - B|| / ||B|| over every float32 tensor of
two safetensors files (the same names in both); prints it and exits 1 above TOL. Standard
library only (the test machines have no numpy)."""
import array
import json
import math
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    size = struct.unpack("<Q", data[:8])[0]
    header, base = json.loads(data[8:8 + size]), 8 + size
    found = {}
    for name, t in header.items():
        if name != "__metadata__" and t["dtype"] == "F32":
            values = array.array("f")
            values.frombytes(data[base + t["data_offsets"][0]:base + t["data_offsets"][1]])
            found[name] = values
    return found


def main():
    a, b, tolerance = tensors(sys.argv[1]), tensors(sys.argv[2]), float(sys.argv[3])
    if sorted(a) != sorted(b) or not a:
        print(f"params_close.py: {sys.argv[1]} and {sys.argv[2]} hold different tensors")
        return 1
    diff = sum((x - y) ** 2 for name in a for x, y in zip(a[name], b[name]))
    norm = sum(y * y for name in b for y in b[name])
    error = math.sqrt(diff / norm) if norm else math.sqrt(diff)
    print(f"relative error {error:.3g} (tolerance {tolerance:g})")
    return 0 if error <= tolerance else 1


sys.exit(main())
