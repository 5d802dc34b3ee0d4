#!/usr/bin/env python3
"""Write conv_bf16.safetensors: bf16 Conv2d cases computed by PyTorch on the CPU.

Each case <name> holds bf16 tensors <name>.x [N,C,H,W], <name>.w [Cout,C,KH,KW],
<name>.dy (the gradient fed back), and PyTorch's results <name>.y =
conv2d(x, w, stride, padding), <name>.dx and <name>.dw (autograd with dy); the
metadata entry <name> reads "stride=S,pad=P". Inputs are standard normal values
rounded to bf16, from fixed seeds, so the output is the same on every run.

Run by hand (Debian's python3-torch, torch 1.13, CPU only; nothing else is needed):

    /usr/bin/python3 testdata/ops/make_conv_bf16.py

tensor/conv_torch_test.go compares weft's bf16 Conv2d and both gradients with it.
"""
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

CASES = [  # name, N, C, H, W, Cout, KH, KW, stride, pad
    ("small", 2, 3, 6, 5, 4, 3, 3, 1, 0),
    ("strided", 2, 3, 6, 5, 4, 3, 3, 2, 1),
    ("rect", 1, 2, 7, 7, 3, 2, 3, 2, 2),
    ("cnn2", 4, 8, 12, 12, 16, 3, 3, 2, 1),  # the reference cnn's second convolution
    ("wide", 2, 32, 8, 8, 8, 3, 3, 1, 1),  # 288 products in each output's sum
]


def write_safetensors(path, tensors, metadata):
    """Write tensors (name -> bf16 tensor) in the safetensors format: an 8-byte
    little-endian header length, the JSON header, then the raw bytes."""
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        assert t.dtype == torch.bfloat16
        data = t.view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for c in chunks:
            f.write(c)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conv_bf16.safetensors")
    tensors, metadata = {}, {"torch": torch.__version__}
    for i, (name, n, c, h, w, cout, kh, kw, stride, pad) in enumerate(CASES):
        g = torch.Generator().manual_seed(1000 + i)
        x = torch.randn(n, c, h, w, generator=g).bfloat16().requires_grad_()
        weight = torch.randn(cout, c, kh, kw, generator=g).bfloat16().requires_grad_()
        y = F.conv2d(x, weight, stride=stride, padding=pad)
        dy = torch.randn(y.shape, generator=g).bfloat16()
        dx, dw = torch.autograd.grad(y, (x, weight), dy)
        for key, t in (("x", x), ("w", weight), ("dy", dy), ("y", y), ("dx", dx), ("dw", dw)):
            tensors[f"{name}.{key}"] = t.detach()
        metadata[name] = f"stride={stride},pad={pad}"
    write_safetensors(out, tensors, metadata)
    print(f"wrote {out}: {len(CASES)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
