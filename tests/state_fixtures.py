# Writes the files tests/state-values.sh needs, with the standard library only: .npy arrays
# and safetensors models of linear(8,bias=0),batchnorm,relu,linear(3) on 16 inputs whose
# state holds values no training produces. Usage: state_fixtures.py DIR
import os, random, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_files import npy, safetensors  # noqa: E402


def model(nbt=3, var=1.0):
    rng = random.Random(0)
    return {'layers.0.weight': ('F32', [8, 16], [rng.gauss(0, 0.2) for _ in range(128)]),
            'layers.1.weight': ('F32', [8], [1.0] * 8), 'layers.1.bias': ('F32', [8], [0.0] * 8),
            'layers.1.running_mean': ('F32', [8], [0.0] * 8), 'layers.1.running_var': ('F32', [8], [var] * 8),
            'layers.1.num_batches_tracked': ('I64', [], [nbt]),
            'layers.3.weight': ('F32', [3, 8], [rng.gauss(0, 0.3) for _ in range(24)]),
            'layers.3.bias': ('F32', [3], [0.0] * 3)}


out = sys.argv[1]
rng = random.Random(1)
for width, rows in ((4, 100), (16, 37), (17, 37), (32, 100)):
    npy(os.path.join(out, 'x%d.npy' % width), '<f4', (rows, width), 'f', [rng.gauss(0, 1) for _ in range(rows * width)])
npy(os.path.join(out, 'labels100.npy'), '<i8', (100,), 'q', [0] * 100)
npy(os.path.join(out, 'x4nan.npy'), '<f4', (100, 4), 'f', [float('nan')] * 4 + [rng.gauss(0, 1) for _ in range(396)])
safetensors(os.path.join(out, 'bn.safetensors'), model())
safetensors(os.path.join(out, 'nbt_max.safetensors'), model(nbt=2**63 - 1))
safetensors(os.path.join(out, 'nbt_negative.safetensors'), model(nbt=-5))
safetensors(os.path.join(out, 'negvar.safetensors'), model(var=-1.0))
