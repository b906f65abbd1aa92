# Writes the files tests/hostile-v3.sh needs, with the standard library only: images and
# targets of several shapes, inputs whose BatchNorm statistics overflow, targets that make
# --exact's sums overflow, a model file with a tensor no model has, a malformed .npy header
# and an IDX directory of training files alone. Usage: hostile_v3_fixtures.py DIR
import os, random, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_files import npy, safetensors  # noqa: E402


def f32(path, shape, values):
    npy(path, '<f4', shape, 'f', values)


out = sys.argv[1]
rng = random.Random(3)
gauss = lambda n, scale=1.0: [rng.gauss(0, scale) for _ in range(n)]
p = lambda name: os.path.join(out, name)

images = gauss(64 * 64)
f32(p('i8.npy'), (64, 1, 8, 8), images)          # 64 one-channel 8x8 images
f32(p('h8.npy'), (64, 8, 8), images)             # the same as [N, H, W]
f32(p('t8.npy'), (20, 1, 8, 8), gauss(20 * 64))
npy(p('y64.npy'), '<i8', (64,), 'q', [i % 3 for i in range(64)])
f32(p('t4.npy'), (64, 4), gauss(64 * 4))         # 4 target columns
f32(p('t36.npy'), (64, 36), gauss(64 * 36))      # 36: what conv2d(4,3),maxpool(2),flatten makes
huge = list(images)
huge[10 * 64:11 * 64] = [3e20] * 64              # one image whose squares overflow float32
f32(p('bnhuge.npy'), (64, 1, 8, 8), huge)
f32(p('x16.npy'), (48, 16), gauss(48 * 16))
f32(p('t4wide.npy'), (10, 4), gauss(40))         # 4 features: no 16-input model takes it
f32(p('y4.npy'), (48, 4), gauss(48 * 4))         # 4 target columns for x16
npy(p('y48.npy'), '<i8', (48,), 'q', [i % 3 for i in range(48)])
f32(p('ht.npy'), (48, 3), gauss(48 * 3, 3e10))   # targets that make gradients beyond 2^32

# A model of linear(8),relu,linear(3) on 16 inputs, and the same with a tensor it has no place for.
model = {'layers.0.weight': ('F32', [8, 16], gauss(128, 0.2)), 'layers.0.bias': ('F32', [8], [0.0] * 8),
         'layers.2.weight': ('F32', [3, 8], gauss(24, 0.3)), 'layers.2.bias': ('F32', [3], [0.0] * 3)}
safetensors(p('mlp.safetensors'), model)
model['head.weight'] = ('F32', [3], [1.0, 2.0, 3.0])
safetensors(p('extra.safetensors'), model)

# A .npy header with control bytes (an escape sequence) where a dimension belongs.
header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4, \x1b[31m), }"
header += b' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + b'\n'
with open(p('escape.npy'), 'wb') as f:
    f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header + bytes(64))

# An IDX directory with training files only (no t10k): 6 images of 2x2 pixels.
os.makedirs(p('train-only'), exist_ok=True)
with open(p('train-only/train-images-idx3-ubyte'), 'wb') as f:
    f.write(b'\0\0\x08\x03' + struct.pack('>III', 6, 2, 2) + bytes(range(24)))
with open(p('train-only/train-labels-idx1-ubyte'), 'wb') as f:
    f.write(b'\0\0\x08\x01' + struct.pack('>I', 6) + bytes([0, 1, 2, 0, 1, 2]))
