"""PyTorch oracle for weft's dtype/dynamic: bitsandbytes' dynamic 8-bit
maps and blockwise quantization, written from their definitions with torch
ops in float32 (no bitsandbytes needed).

  oracle.py DIR BLOCKSIZE

reads DIR/x_signed.f32 and DIR/x_unsigned.f32 (little-endian float32) and
writes, for each of signed and unsigned:
  map_S.f32      create_dynamic_map(signed=S): 256 values, sorted
  codes_S.u8     the code of each element
  absmax_S.f32   each block's max |x| (NaN if it holds one)
  deq_S.f32      code value times absmax
The rule: x / absmax in float32, clamped to the map's range, the argmin of
the float32 distance to the 256 values (torch.argmin: the first, lower,
code on a tie); NaN takes code 0 and a zero block the code of 0.
"""
import os
import sys

import numpy as np
import torch


def linspace(start, end, n):
    # torch.linspace(start, end, n, dtype=torch.float32) as torch 2's CPU
    # kernel computes it, the map of bitsandbytes' published dumps: start +
    # step*i up to half way, end - step*(n-1-i) after, one rounding (a fused
    # multiply-add; float64 holds these products and sums exactly). Torch
    # 1.13's vectorised kernel adds step to a rounded base, which puts some
    # values of the map an ulp off bitsandbytes'.
    start, end = np.float32(start), np.float32(end)
    step = np.float32((end - start) / np.float32(n - 1))
    i = np.arange(n, dtype=np.float64)
    lo = np.float64(start) + np.float64(step) * i
    hi = np.float64(end) - np.float64(step) * (n - 1 - i)
    return torch.from_numpy(np.where(i < n // 2, lo, hi).astype(np.float32))


def create_dynamic_map(signed):
    # Dettmers' dynamic tree quantization as bitsandbytes builds it with 7
    # exponent bits of 8: per exponent i, linearly spaced fractions whose
    # midpoints are scaled by 10^(i-6); the unsigned map puts the sign bit
    # into the fraction.
    data = []
    for i in range(7):
        items = 2**i + 1 if signed else 2 ** (i + 1) + 1
        bounds = linspace(0.1, 1, items)
        means = (bounds[:-1] + bounds[1:]) / 2.0
        data += ((10 ** (i - 6)) * means).tolist()
        if signed:
            data += (-(10 ** (i - 6)) * means).tolist()
    data += [0.0, 1.0]
    assert len(data) == 256, len(data)
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


def quantize(x, code, bs):
    n = x.numel()
    nb = (n + bs - 1) // bs
    xb = torch.cat([x, torch.zeros(nb * bs - n)]).view(nb, bs)
    absmax = xb.abs().amax(dim=1)
    scaled = (xb / absmax[:, None]).clamp(code[0].item(), 1.0)
    idx = (scaled.unsqueeze(-1) - code).abs().argmin(dim=-1)
    idx[torch.isnan(scaled)] = 0
    idx[absmax == 0] = int((code == 0).nonzero()[0])
    codes = idx.reshape(-1)[:n]
    deq = code[codes] * absmax.repeat_interleave(bs)[:n]
    return codes.to(torch.uint8), absmax, deq


def main(argv):
    d, bs = argv[0], int(argv[1])
    for name, signed in (("signed", True), ("unsigned", False)):
        code = create_dynamic_map(signed)
        x = torch.from_numpy(np.fromfile(os.path.join(d, f"x_{name}.f32"), dtype="<f4"))
        codes, absmax, deq = quantize(x, code, bs)
        code.numpy().astype("<f4").tofile(os.path.join(d, f"map_{name}.f32"))
        codes.numpy().tofile(os.path.join(d, f"codes_{name}.u8"))
        absmax.numpy().astype("<f4").tofile(os.path.join(d, f"absmax_{name}.f32"))
        deq.numpy().astype("<f4").tofile(os.path.join(d, f"deq_{name}.f32"))


if __name__ == "__main__":
    main(sys.argv[1:])
