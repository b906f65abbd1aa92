#!/usr/bin/env python3
"""Lists the GPU code an object's fat binaries hold, as "elf:sm_80 ptx:sm_90 ...", sorted.

For tests/cuda-layouts.sh where the toolkit ships no cuobjdump. A fat binary starts with the
magic 0xBA55ED50, its header size and payload size; each entry with its kind (1 PTX, 2 ELF),
header size, payload size and, at byte 28, the compute capability it is for."""
import struct
import sys

MAGIC = struct.pack("<I", 0xBA55ED50)
KINDS = {1: "ptx", 2: "elf"}


def entries(data):
    at = data.find(MAGIC)
    while at >= 0:
        _, header, size = struct.unpack_from("<HHQ", data, at + 4)
        entry, end = at + header, at + header + size
        while entry < end:
            kind, _, entry_header, entry_size = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            yield f"{KINDS.get(kind, f'kind{kind}')}:sm_{arch}"
            entry += entry_header + entry_size
        at = data.find(MAGIC, end)


with open(sys.argv[1], "rb") as f:
    print(" ".join(sorted(set(entries(f.read())))))
