#!/usr/bin/env python3
"""Loads a dptrain checkpoint into the matching PyTorch model and compares outputs.

Inputs [N, D] are features; [N, C, H, W] images, for models with conv2d, pooling and flatten
(nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d(1) for globalavgpool, nn.Flatten,
and nn.BatchNorm2d for a batchnorm on images).

Builds the model that dp_worker's --model (or --layers) describes, loads the safetensors file
with model.load_state_dict(strict=True) (parameters, running statistics and num_batches_tracked),
runs it in eval mode on INPUTS.npy and compares with OUTPUTS.npy (what `dp_worker --predict`
wrote): the largest absolute difference, relative to the largest absolute output, must be at
most --tolerance. Needs PyTorch and NumPy (Debian: python3-torch), and torchvision for the
presets resnet18 ... resnet152; exits 77 (skipped) without them, 1 on any mismatch.

    torch_interop.py --model SPEC | --layers W0,W1,... CHECKPOINT INPUTS.npy OUTPUTS.npy

The modules' tensor names are dptrain's, which are PyTorch's state_dict names of:
  * an unlabelled spec: a module holding `self.layers = nn.Sequential(...)`, the i-th item of the
    list (a residual block counts as one) being layers.{i};
  * a residual block "residual(relu=0|1){body | shortcut}": a module with `body = nn.Sequential(...)`
    and `shortcut = nn.Sequential(...)` (empty, the identity, without "| shortcut") computing
    body(x) + shortcut(x), then a ReLU unless relu=0; the j-th item of its body is B.body.{j}, of
    its shortcut B.shortcut.{j}; blocks nest;
  * a labelled item "label:module" is `label` at the top level and `B.label` in block B (a dotted
    label such as downsample.0 nests: B.downsample is a container holding 0), so
    "layer1.0:residual{conv1:conv2d(64,3,padding=1,bias=0),bn1:batchnorm,relu,...}" names
    torchvision's layer1.0.conv1.weight, layer1.0.bn1.running_mean, ...
The presets resnet18, resnet34, resnet50, resnet101 and resnet152 are torchvision.models.NAME with
num_classes = the rows of the checkpoint's fc.weight; for images of C != 3 channels conv1 is
nn.Conv2d(C, 64, 7, 2, 3, bias=False) (what dptrain builds for such images; torchvision's own conv1
takes 3 channels). The preset resnet is dptrain's small ResNet for 28x28 images, built from the
same --model text dp_worker writes for it (src/nn/presets.c), its fc as wide as fc.weight.
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
    if not match:
        raise SystemExit(f"torch_interop: cannot read the module '{text}'")
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
         "maxpool": ["k", "stride", "padding"], "avgpool": ["k", "stride", "padding"], "dropout": ["p"],
         "batchnorm": ["momentum", "eps", "sync"], "residual": ["relu"]}

# The presets dp_worker takes for --model: (stages' block counts, bottleneck, first stage's width, ImageNet stem).
PRESETS = {"resnet": ([2, 2, 2], False, 16, False),
           "resnet18": ([2, 2, 2, 2], False, 64, True), "resnet34": ([3, 4, 6, 3], False, 64, True),
           "resnet50": ([3, 4, 6, 3], True, 64, True), "resnet101": ([3, 4, 23, 3], True, 64, True),
           "resnet152": ([3, 8, 36, 3], True, 64, True)}
TORCHVISION = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")


def preset_text(name, classes):
    """The --model text dp_worker writes for a preset (src/nn/presets.c), its fc of `classes` outputs."""
    blocks, bottleneck, width, stem = PRESETS[name]
    if stem:
        text = f"conv1:conv2d({width},7,stride=2,padding=3,bias=0),bn1:batchnorm,relu,maxpool(3,stride=2,padding=1)"
    else:
        text = f"conv1:conv2d({width},3,padding=1,bias=0),bn1:batchnorm,relu"
    channels = width
    for s, count in enumerate(blocks, 1):
        for b in range(count):
            planes, stride = width << (s - 1), 2 if s > 1 and b == 0 else 1
            out = 4 * planes if bottleneck else planes
            text += f",layer{s}.{b}:residual{{"
            if bottleneck:
                text += (f"conv1:conv2d({planes},1,bias=0),bn1:batchnorm,relu,"
                         f"conv2:conv2d({planes},3,stride={stride},padding=1,bias=0),bn2:batchnorm,relu,"
                         f"conv3:conv2d({out},1,bias=0),bn3:batchnorm")
            else:
                text += (f"conv1:conv2d({planes},3,stride={stride},padding=1,bias=0),bn1:batchnorm,relu,"
                         f"conv2:conv2d({planes},3,padding=1,bias=0),bn2:batchnorm")
            if stride != 1 or channels != out:
                text += f"|downsample.0:conv2d({out},1,stride={stride},bias=0),downsample.1:batchnorm"
            text += "}"
            channels = out
    return text + f",avgpool:globalavgpool,flatten,fc:linear({classes})"


def torchvision_resnet(name, classes, channels):
    """torchvision.models.NAME(num_classes=classes); for images of channels != 3, conv1 is
    nn.Conv2d(channels, 64, 7, 2, 3, bias=False), initialized as torchvision initializes its convolutions
    (kaiming_normal_, fan_out, relu). Exits 77 without torchvision."""
    try:
        import torchvision
    except ImportError as missing:
        print(f"torch_interop: skipped: --model {name} needs torchvision: {missing}")
        sys.exit(77)
    model = getattr(torchvision.models, name)(num_classes=classes)
    if channels != 3:
        model.conv1 = torch.nn.Conv2d(channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        torch.nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


def split_outside(text, stops):
    """text cut at each character of `stops` outside parentheses and braces."""
    parts, depth, begin = [], 0, 0
    for i, c in enumerate(text):
        if depth == 0 and c in stops:
            parts.append(text[begin:i])
            begin = i + 1
        depth += (c in "({") - (c in ")}")
        if depth < 0:
            raise SystemExit(f"torch_interop: unbalanced parentheses or braces in '{text}'")
    if depth != 0:
        raise SystemExit(f"torch_interop: unbalanced parentheses or braces in '{text}'")
    return parts + [text[begin:]]


def parse_list(text):
    """'[label:]module, [label:]residual(...){body | shortcut}, ...' -> entries
    (label, name, options, body, shortcut), body and shortcut themselves lists of entries (None
    for a module that is not a block)."""
    entries = []
    for item in split_outside(text, ","):
        item = item.strip()
        if not item:
            raise SystemExit(f"torch_interop: an empty module in '{text}'")
        brace, colon, paren = item.find("{"), item.find(":"), item.find("(")
        head_end = brace if brace >= 0 else len(item)
        label = ""
        if 0 <= colon < head_end and (paren < 0 or colon < paren):
            label, item = item[:colon].strip(), item[colon + 1:]
            brace = item.find("{")
            head_end = brace if brace >= 0 else len(item)
        name, positional, named = module_options(item[:head_end])
        options = dict(zip(ORDER.get(name, []), positional), **named)
        body = shortcut = None
        if name == "residual":
            if brace < 0 or not item.rstrip().endswith("}"):
                raise SystemExit(f"torch_interop: residual needs its modules in braces: '{item}'")
            inner = split_outside(item[brace + 1:item.rstrip().rindex("}")], "|")
            if len(inner) > 2:
                raise SystemExit(f"torch_interop: more than one '|' in '{item}'")
            body = parse_list(inner[0])
            shortcut = parse_list(inner[1]) if len(inner) == 2 else []
        elif brace >= 0:
            raise SystemExit(f"torch_interop: only residual takes modules in braces: '{item}'")
        entries.append((label, name, options, body, shortcut))
    return entries


def flag(options, key, default):
    return options.get(key, default) != "0"


def pooled(shape, k, stride, padding):
    return shape[:1] + tuple((s + 2 * padding - k) // stride + 1 for s in shape[1:])


def leaf(name, o, shape):
    """The PyTorch module of one (non-block) item on inputs of one sample's `shape`, and its output shape."""
    if name == "linear":
        out = int(o["out"])
        return torch.nn.Linear(int(np.prod(shape)), out, bias=flag(o, "bias", "1")), (out,)
    if name == "conv2d":
        k, stride, padding = int(o["k"]), int(o.get("stride", "1")), int(o.get("padding", "0"))
        conv = torch.nn.Conv2d(shape[0], int(o["out"]), k, stride, padding, bias=flag(o, "bias", "1"))
        return conv, (int(o["out"]),) + pooled(shape, k, stride, padding)[1:]
    if name in ("maxpool", "avgpool"):
        k = int(o.get("k", "2"))
        stride, padding = int(o.get("stride", k)), int(o.get("padding", "0"))
        # nn.AvgPool2d's count_include_pad=True (its default) is dptrain's: padding counts as zeros.
        pool = torch.nn.MaxPool2d(k, stride, padding) if name == "maxpool" else torch.nn.AvgPool2d(k, stride, padding)
        return pool, pooled(shape, k, stride, padding)
    if name == "globalavgpool":
        return torch.nn.AdaptiveAvgPool2d(1), (shape[0], 1, 1)
    if name == "flatten":
        return torch.nn.Flatten(), (int(np.prod(shape)),)
    if name == "relu":
        return torch.nn.ReLU(), shape
    if name == "batchnorm":
        eps, momentum = float(o.get("eps", "1e-5")), float(o.get("momentum", "0.1"))
        if len(shape) == 3:
            return torch.nn.BatchNorm2d(shape[0], eps=eps, momentum=momentum), shape
        return torch.nn.BatchNorm1d(int(np.prod(shape)), eps=eps, momentum=momentum), shape
    if name == "dropout":
        return torch.nn.Dropout(float(o.get("p", "0.5"))), shape
    raise SystemExit(f"torch_interop: unknown module {name}")


def place(owner, path, module):
    """Registers module under owner at the dotted path (containers made for the components before
    the last), as state_dict names it: owner's prefix + path."""
    *outer, last = path.split(".")
    for part in outer:
        inner = owner._modules.get(part)
        if inner is None:
            if hasattr(owner, part):
                raise SystemExit(f"torch_interop: the name '{path}' clashes with an attribute '{part}'")
            inner = torch.nn.Sequential()
            owner.add_module(part, inner)
        owner = inner
    if last in owner._modules or hasattr(owner, last):
        raise SystemExit(f"torch_interop: two modules named '{path}'")
    owner.add_module(last, module)


def run(steps, x):
    for module in steps:
        x = module(x)
    return x


class Block(torch.nn.Module):
    """residual(relu=R){body | shortcut}: body(x) + shortcut(x), then a ReLU if R."""

    def __init__(self, relu):
        super().__init__()
        self.body = torch.nn.Sequential()
        self.shortcut = torch.nn.Sequential()
        self._dp_relu = relu
        self._dp_body, self._dp_shortcut = [], []   # the modules in order (labelled ones live elsewhere)

    def forward(self, x):
        y = run(self._dp_body, x) + run(self._dp_shortcut, x)
        return torch.relu(y) if self._dp_relu else y


class Net(torch.nn.Module):
    """The modules of a --model text: unlabelled ones in `layers`, labelled ones by their label."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential()
        self._dp_steps = []

    def forward(self, x):
        return run(self._dp_steps, x)


def build_list(entries, shape, owner, part, steps):
    """Adds the modules of `entries` on inputs of `shape` to owner (unlabelled ones under owner.part,
    numbered by their place in the list) and to steps, in order; returns the output shape."""
    for k, (label, name, options, body, shortcut) in enumerate(entries):
        if name == "residual":
            module = Block(flag(options, "relu", "1"))
            out = build_list(body, shape, module, "body", module._dp_body)
            other = build_list(shortcut, shape, module, "shortcut", module._dp_shortcut)
            if out != other:
                raise SystemExit(f"torch_interop: a residual block's body gives {out}, its shortcut {other}")
        else:
            module, out = leaf(name, options, shape)
        place(owner, label if label else f"{part}.{k}", module)
        steps.append(module)
        shape = out
    return shape


def build(spec, sample, checkpoint=None):
    """The model --model spec describes on samples of shape `sample` ((D,) features or (C, H, W)
    images); presets take their class count from the checkpoint's fc.weight."""
    spec = spec.strip()
    if spec in PRESETS:
        if checkpoint is None or "fc.weight" not in checkpoint:
            raise SystemExit(f"torch_interop: --model {spec}: the checkpoint has no fc.weight to take the classes from")
        classes = checkpoint["fc.weight"].shape[0]
        if spec in TORCHVISION:
            return torchvision_resnet(spec, classes, sample[0])
        spec = preset_text(spec, classes)
    net = Net()
    build_list(parse_list(spec), tuple(sample), net, "layers", net._dp_steps)
    return net


class Model(torch.nn.Module):
    def __init__(self, modules):
        super().__init__()
        # --layers checkpoints are version 1's MLP: a ModuleList of the Linear layers only.
        self.layers = torch.nn.ModuleList(modules)

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
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
    checkpoint = read_safetensors(a.checkpoint)
    if a.layers:
        widths = [int(w) for w in a.layers.split(",")]
        model = Model([torch.nn.Linear(i, o) for i, o in zip(widths, widths[1:])])
    else:
        model = build(a.model, x.shape[1:], checkpoint)
    model.load_state_dict(checkpoint, strict=True)
    model.eval()
    with torch.no_grad():
        ours = torch.from_numpy(np.load(a.outputs))
        theirs = model(x)
    if ours.shape != theirs.shape:
        print(f"torch_interop: load_state_dict(strict=True) took every tensor, but the outputs are {tuple(ours.shape)} "
              f"where PyTorch's are {tuple(theirs.shape)}")
        return 1
    error = (ours - theirs).abs().max().item() / max(theirs.abs().max().item(), 1e-30)
    print(f"torch_interop: load_state_dict(strict=True) took every tensor; eval outputs of {tuple(x.shape)} "
          f"inputs differ from dp_worker --predict by {error:.3g} (max abs, relative to the largest)")
    return 0 if error <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
