"""The .npy and safetensors writers the fixture scripts share (standard library only)."""
import json
import struct


def npy(path, descr, shape, fmt, values):
    """A version 1.0 .npy file: descr '<f4' with fmt 'f', '<i8' with 'q'."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    header += ' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + '\n'
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header.encode())
        f.write(struct.pack('<%d%s' % (len(values), fmt), *values))


def safetensors(path, tensors):
    """tensors: name -> (dtype 'F32' or 'I64', shape, values), in file order."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, values) in tensors.items():
        data = struct.pack('<%d%s' % (len(values), 'f' if dtype == 'F32' else 'q'), *values)
        header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b' ' * ((8 - len(text) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + b''.join(blobs))
